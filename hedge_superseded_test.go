package balancer

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hedgeStep is the delay of supersededRun's hedges and the time b takes
// to answer after the last one, on the fake clock.
const hedgeStep = 10 * time.Millisecond

// supersededRun runs one request through RunHedged over a, b and c with
// MaxAttempts 3 and a hedge every hedgeStep: the three attempts go out
// hedgeStep apart, in the order the picker chooses, and b answers
// hedgeStep after the last, so that a and c lose. Each attempt has then
// waited 3, 2 or 1 hedgeStep, by its place. It returns the peer of each
// attempt in order.
func supersededRun(t *testing.T, lb Picker, clk *fakeClock, h *Hedging, timers chan chan time.Time) []string {
	t.Helper()
	type call struct {
		peer  string
		reply chan Verdict
	}
	started := make(chan call, 3)
	done := make(chan error, 1)
	loop := Attempts{Picker: lb, Now: clk.now}
	go func() {
		done <- loop.RunHedged(context.Background(), h, func(ctx context.Context, p *Peer) Verdict {
			c := call{p.Addr(), make(chan Verdict, 1)}
			started <- c
			select {
			case v := <-c.reply:
				return v
			case <-ctx.Done():
				return Verdict{Outcome: Outcome{Failed: true}, Retry: true} // a loser: Run reports it
			}
		})
	}()
	var order []string
	var b call
	for i := range 3 {
		c := <-started
		order = append(order, c.peer)
		if c.peer == "b" {
			b = c
		}
		if i < 2 {
			fire := <-timers
			clk.add(hedgeStep)
			fire <- time.Time{}
		}
	}
	require.Equal(t, "b", b.peer, "b got no attempt: %v", order)
	clk.add(hedgeStep)
	b.reply <- ok
	require.NoError(t, <-done)
	return order
}

// TestHedge_losersAreNotSilence: a peer whose attempts keep losing to
// hedges is not taken for one that stopped answering. Each request sends
// one attempt to each of a, b and c, 10 ms apart, and b answers 10 ms
// after the last; a and c lose every time. Without Superseded, the
// losers were plain abandoned attempts: FastestFirst floored a and c
// after three losses in a row (weight 1 of 100), and P2CPeakEWMA summed
// their waits into an estimate past 100 ms. The expected values, derived:
// every attempt has waited at most 3 steps (30 ms) and at least 1 (10
// ms), so every estimate lies in [10, 30] ms, each peer's within the
// default tolerance (3x) of the fastest: FastestFirst's derived weights
// all stay 100, and no P2CPeakEWMA estimate exceeds 30 ms.
func TestHedge_losersAreNotSilence(t *testing.T) {
	const requests = 6
	cases := []struct {
		name  string
		new   func(peers []*Peer, opts ...Option) (Balancer, error)
		check func(t *testing.T, peers []*Peer)
	}{
		{"FastestFirst", as(NewFastestFirst), func(t *testing.T, peers []*Peer) {
			for _, p := range peers {
				assert.Equal(t, fastestScale, p.Stats().DerivedWeight, "%s's derived weight", p)
			}
		}},
		{"P2CPeakEWMA", as(NewP2CPeakEWMA), func(t *testing.T, peers []*Peer) {
			for _, p := range peers {
				st := p.Stats()
				assert.True(t, st.Measured, "%s measured", p)
				assert.LessOrEqual(t, st.Latency, 3*hedgeStep, "%s's estimate", p)
				assert.GreaterOrEqual(t, st.Latency, hedgeStep, "%s's estimate", p)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := []*Peer{NewPeer("a"), NewPeer("b"), NewPeer("c")}
			lb, err := tc.new(peers, clk.opt(), WithRand(rand.NewPCG(1, 2)))
			require.NoError(t, err)
			budget, err := NewRetryBudget(2, 0, time.Second, clk.opt()) // two hedges a request
			require.NoError(t, err)
			timers := make(chan chan time.Time, 2)
			h, err := NewHedging(HedgePolicy{MaxAttempts: 3, Delay: hedgeStep, Budget: budget,
				Timer: func(time.Duration) (<-chan time.Time, func() bool) {
					c := make(chan time.Time, 1)
					timers <- c
					return c, func() bool { return true }
				}})
			require.NoError(t, err)
			for range requests {
				order := supersededRun(t, lb, clk, h, timers)
				assert.ElementsMatch(t, []string{"a", "b", "c"}, order)
			}
			for _, p := range peers {
				assert.Zero(t, p.InFlight(), "%s in flight", p)
			}
			assert.Equal(t, uint64(2*requests), h.Stats().Sent)
			tc.check(t, peers)
		})
	}
}

// TestHedge_callerGaveUpIsNotSuperseded: when the caller's context ends
// while a hedge is in flight, every attempt is cut short by the caller's
// patience, not by another attempt's answer: each is reported Abandoned,
// none Superseded, as without hedging.
func TestHedge_callerGaveUpIsNotSuperseded(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		g.done <- g.loop.RunHedged(ctx, g.h, func(actx context.Context, peer *Peer) Verdict {
			c := &hedgeCall{peer: peer.Addr(), ctx: actx}
			g.started <- c
			<-actx.Done()
			return Verdict{Outcome: Outcome{Abandoned: true}}
		})
	}()
	g.call("a")
	g.clk.add(10 * time.Millisecond)
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	g.call("b")
	g.clk.add(5 * time.Millisecond)
	cancel()
	require.NoError(t, g.wait()) // the first abandoned verdict ends the loop
	got := slices.Clone(g.rec.got)
	slices.Sort(got)
	assert.Equal(t, []string{"a abandoned 15ms", "b abandoned 5ms"}, got)
}
