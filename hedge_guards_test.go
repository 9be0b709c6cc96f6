package balancer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The guards with hedging on: the retry budget, panic mode and
// success-rate ejection work under Attempts.RunHedged as under Run (the
// per-attempt timeouts live in balancerhttp's Transport, whose tests hold
// them with hedging on; in this package a timed-out attempt is a try's
// failure, which TestHedge_failureBeforeDelayIsRetry covers).

// TestHedge_retryBudget: the retry budget bounds the retries of a hedged
// request. Apart from the hedge budget, a retry budget of ratio 0 and no
// reserve refuses the retry after a failure with nothing in flight (no
// hedge is asked: the failure came before the delay). Shared with the
// hedges, a budget of ratio 1 gets one deposit a request (RunHedged
// deposits once): the hedge takes that token, so when both attempts fail
// the retry is refused and a third attempt never goes; two deposits would
// have let it go to c.
func TestHedge_retryBudget(t *testing.T) {
	t.Run("apart", func(t *testing.T) {
		g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
		var err error
		g.loop.Budget, err = NewRetryBudget(0, 0, time.Second, g.clk.opt())
		require.NoError(t, err)
		g.run()
		a := g.call("a")
		g.timer(10 * time.Millisecond)
		a.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
		err = g.wait()
		assert.ErrorIs(t, err, ErrRetryBudget)
		assert.Equal(t, []string{"a failed 0s"}, g.rec.got)
		assert.Equal(t, uint64(0), g.h.Stats().Sent)
		g.idle()
	})
	t.Run("shared", func(t *testing.T) {
		g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
		bud, err := NewRetryBudget(1, 0, time.Second, g.clk.opt())
		require.NoError(t, err)
		g.loop.Budget, g.h.budget = bud, bud
		g.run()
		a := g.call("a")
		g.clk.add(10 * time.Millisecond)
		g.timer(10 * time.Millisecond).fire <- time.Time{}
		b := g.call("b")
		a.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
		b.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
		err = g.wait()
		assert.ErrorIs(t, err, ErrRetryBudget)
		assert.ElementsMatch(t, []string{"a failed 10ms", "b failed 0s"}, g.rec.got)
		assert.Equal(t, 2, g.r.Attempts(), "no third attempt")
		assert.Equal(t, uint64(1), g.h.Stats().Sent)
		assert.Empty(t, g.started, "an attempt started")
	})
}

// signalPicker tells on picks: each Pick's error (nil for a peer) goes to
// picked, if set.
type signalPicker struct {
	Picker
	picked chan error
	peers  []*Peer
}

func (s *signalPicker) Pick(r *Request) (*Peer, error) {
	p, err := s.Picker.Pick(r)
	if err == nil {
		s.peers = append(s.peers, p)
	}
	s.picked <- err
	return p, err
}

// TestHedge_panicMode: with a, b and c out for their failures and d alone
// eligible, 1 of 4 peers (25%) is below WithPanicThreshold(50): in panic
// a peer in its fail window is picked as though it had no failures, so
// the hedge finds a second peer and goes. Without panic mode the hedge's
// pick finds no peer the request has not tried (ErrNoLivePeer), no hedge
// goes and d answers alone. The first attempt answers once the hedge's
// pick is made, so that both runs end whatever it found.
func TestHedge_panicMode(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		sent  uint64
		picks []string // the attempts' peers; "" where the pick failed
	}{
		{"panic", []Option{WithPanicThreshold(50)}, 1, nil},
		{"no panic", nil, 0, []string{"d"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := []*Peer{}
			for _, n := range []string{"a", "b", "c", "d"} {
				peers = append(peers, NewPeer(n, MaxFails(1), FailTimeout(time.Minute)))
			}
			lb, err := NewSmoothWRR(peers, append(tc.opts, clk.opt())...)
			require.NoError(t, err)
			for _, p := range peers[:3] {
				r := new(Request)
				for {
					q := mustPick(t, lb, r)
					if q == p {
						require.NoError(t, lb.Done(q, Outcome{Failed: true}))
						break
					}
					require.NoError(t, lb.Done(q, Outcome{}))
				}
			}
			for i, p := range peers {
				require.Equal(t, i < 3, p.Stats().Fails == 1, "%s failed", p)
			}
			sp := &signalPicker{Picker: lb, picked: make(chan error, 2)}
			budget, err := NewRetryBudget(1, 0, time.Second, clk.opt())
			require.NoError(t, err)
			h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Delay: time.Millisecond, Budget: budget,
				Timer: func(time.Duration) (<-chan time.Time, func() bool) {
					c := make(chan time.Time, 1)
					c <- time.Time{} // the delay has passed
					return c, func() bool { return true }
				}})
			require.NoError(t, err)
			loop := Attempts{Picker: sp, Now: clk.now}
			first := make(chan struct{})
			var hedgePick error
			err = loop.RunHedged(context.Background(), h, func(ctx context.Context, p *Peer) Verdict {
				select {
				case <-first: // the hedge: it answers
					return ok
				default:
				}
				close(first)
				<-sp.picked             // the first's own pick
				hedgePick = <-sp.picked // the hedge's
				select {
				case <-ctx.Done(): // the hedge won
					return Verdict{Outcome: Outcome{Abandoned: true}}
				default:
					return ok
				}
			})
			require.NoError(t, err)
			assert.Equal(t, tc.sent, h.Stats().Sent)
			if tc.sent == 0 {
				assert.ErrorIs(t, hedgePick, ErrNoLivePeer)
				var got []string
				for _, p := range sp.peers {
					got = append(got, p.Addr())
				}
				assert.Equal(t, tc.picks, got)
			} else {
				require.NoError(t, hedgePick)
				require.Len(t, sp.peers, 2)
				assert.NotEqual(t, sp.peers[0], sp.peers[1], "the hedge on another peer")
				assert.Equal(t, uint64(1), lb.Stats().Panics, "panic engaged")
			}
			for _, p := range peers {
				assert.Zero(t, p.InFlight(), "%s in flight", p)
			}
		})
	}
}

// doneSignal passes each report on, and says so on dones for watch's.
type doneSignal struct {
	Picker
	watch *Peer
	dones chan struct{}
}

func (d *doneSignal) Done(p *Peer, o Outcome) error {
	err := d.Picker.Done(p, o)
	if p == d.watch {
		d.dones <- struct{}{}
	}
	return err
}

// TestHedge_outlierEjection: success-rate ejection takes out a failing
// peer while every request is hedged. Five peers in equal turns (SmoothWRR,
// max_fails 1000, so failures alone never take one out), each request two
// attempts, the hedge sent at once; bad fails every attempt and is
// reported first, a good peer answers the request, and the other good
// attempt, if any, loses and is reported Superseded, which is no attempt
// for the ejection. The test checks that in 100 requests bad failed and
// each good peer answered at least RequestVolume (5) times, so all five
// count. At the interval's end the rates are bad 0 and the others 1:
// mean 0.8, population stdev 0.4, and bad's 0 is below 0.8 − 1.9·0.4 =
// 0.04, the others above: bad alone is ejected, and no later attempt,
// first or hedge, goes to it.
func TestHedge_outlierEjection(t *testing.T) {
	clk := newFakeClock()
	var peers []*Peer
	for _, n := range []string{"bad", "g1", "g2", "g3", "g4"} {
		peers = append(peers, NewPeer(n, MaxFails(1000), FailTimeout(time.Minute)))
	}
	bad := peers[0]
	lb, err := NewSmoothWRR(peers, clk.opt(), WithSuccessRateEjection(SuccessRateEjection{Interval: time.Second, RequestVolume: 5}))
	require.NoError(t, err)
	ds := &doneSignal{Picker: lb, watch: bad, dones: make(chan struct{}, 2)}
	budget, err := NewRetryBudget(1, 0, time.Minute, clk.opt())
	require.NoError(t, err)
	h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Budget: budget}) // delay 0: both at once
	require.NoError(t, err)

	type call struct {
		peer  *Peer
		reply chan Verdict
	}
	answered := map[*Peer]int{}
	request := func() []*Peer {
		started := make(chan call, 2)
		done := make(chan error, 1)
		loop := Attempts{Picker: ds, Now: clk.now}
		go func() {
			done <- loop.RunHedged(context.Background(), h, func(ctx context.Context, p *Peer) Verdict {
				c := call{p, make(chan Verdict, 1)}
				started <- c
				select {
				case v := <-c.reply:
					return v
				case <-ctx.Done():
					return Verdict{Outcome: Outcome{Abandoned: true}}
				}
			})
		}()
		calls := []call{<-started, <-started}
		var got []*Peer
		for _, c := range calls {
			got = append(got, c.peer)
			if c.peer == bad {
				c.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
				<-ds.dones // reported before the good one answers
			}
		}
		for _, c := range calls {
			if c.peer != bad {
				answered[c.peer]++
				c.reply <- ok
				break
			}
		}
		require.NoError(t, <-done)
		return got
	}

	attempts := map[*Peer]int{}
	for range 100 {
		for _, p := range request() {
			attempts[p]++
		}
	}
	require.GreaterOrEqual(t, attempts[bad], 5, "bad's failures")
	for _, p := range peers[1:] {
		require.GreaterOrEqual(t, answered[p], 5, "%s's answers", p)
	}
	assert.Zero(t, lb.Stats().OutlierEjections, "none before the interval's end")
	clk.add(time.Second + time.Millisecond) // past the interval's last instant
	for range 10 {                          // bad's next failure ends the interval
		request()
	}
	assert.Equal(t, uint64(1), lb.Stats().OutlierEjections)
	after := map[*Peer]int{}
	for range 50 {
		for _, p := range request() {
			after[p]++
		}
	}
	assert.Zero(t, after[bad], "attempts on the ejected peer")
	for _, p := range peers {
		assert.Zero(t, p.InFlight(), "%s in flight", p)
	}
}
