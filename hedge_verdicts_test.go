package balancer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// donePicker is a Picker that tells reported, after reporting, the peer
// of each outcome reported to it.
type donePicker struct {
	Picker
	reported chan string
}

func (d *donePicker) Done(p *Peer, o Outcome) error {
	err := d.Picker.Done(p, o)
	d.reported <- p.Addr()
	return err
}

// TestHedge_wonNeedsAnAnswer: a hedge wins its request (HedgeStats.Won,
// EventHedgeWon) only when its verdict ends the loop with an answer,
// neither Failed nor Abandoned. Each request sends a to the first attempt
// and, when the delay's timer fires, the hedge to b; b's verdict then
// ends the loop while a is in flight. In "the caller gives up", the
// caller's context ends with both in flight and a returns only once b's
// abandoned verdict was reported, so that b's verdict is the one that
// ends the loop: the case that counted a win in about 3 runs of 5 when
// the two tries raced.
func TestHedge_wonNeedsAnAnswer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hedge     Verdict // b's verdict; unused when the caller gives up
		giveUp    bool
		wantB     string // b's report
		wantWon   uint64
		wantEvent []string
	}{
		{"the hedge answers", ok, false, "b ok 5ms", 1, []string{"HedgeSent b", "HedgeWon b"}},
		{"the hedge fails, no retry", Verdict{Outcome: Outcome{Failed: true}}, false, "b failed 5ms", 0, []string{"HedgeSent b"}},
		{"the hedge's try gives up", Verdict{Outcome: Outcome{Abandoned: true}}, false, "b abandoned 5ms", 0, []string{"HedgeSent b"}},
		{"the caller gives up", Verdict{}, true, "b abandoned 5ms", 0, []string{"HedgeSent b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
			dp := &donePicker{Picker: g.rec, reported: make(chan string, 4)}
			g.loop.Picker = dp
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() {
				g.done <- g.loop.RunHedged(ctx, g.h, func(actx context.Context, peer *Peer) Verdict {
					c := &hedgeCall{peer: peer.Addr(), ctx: actx, reply: make(chan Verdict, 1)}
					g.started <- c
					select {
					case v := <-c.reply:
						return v
					case <-actx.Done():
					}
					if tc.giveUp && peer.Addr() == "a" {
						for p := range dp.reported {
							if p == "b" {
								break // b's verdict is in: a returns after it
							}
						}
					}
					return Verdict{Outcome: Outcome{Abandoned: true}}
				})
			}()
			g.call("a")
			g.clk.add(10 * time.Millisecond)
			g.timer(10 * time.Millisecond).fire <- time.Time{}
			b := g.call("b")
			g.clk.add(5 * time.Millisecond)
			if tc.giveUp {
				cancel()
			} else {
				b.reply <- tc.hedge
			}
			require.NoError(t, g.wait()) // b's verdict ended the loop
			require.NotEmpty(t, g.rec.got)
			assert.Equal(t, tc.wantB, g.rec.got[0], "b's report, the first")
			assert.Equal(t, tc.wantWon, g.h.Stats().Won, "won")
			assert.Equal(t, uint64(1), g.h.Stats().Sent, "sent")
			assert.Equal(t, tc.wantEvent, g.eventList())
		})
	}
}

// TestHedge_loserFailureIsReported: a loser whose try returns a failure
// after the winner's answer (a 503 read as the winner's reply came in) is
// reported Failed, with its own latency if it gave one: a failure reply
// is the peer's failure whatever the race, and the picker's failure
// accounting sees it. A loser whose try returns because its context was
// cancelled (Abandoned), or with anything but a failure, is reported
// Abandoned and Superseded, as before. a goes first; the hedge b answers
// 5 ms after it was sent, 15 ms after a; then a's try returns the row's
// verdict.
func TestHedge_loserFailureIsReported(t *testing.T) {
	for _, tc := range []struct {
		name  string
		loser Verdict
		want  string // a's report
		fails uint64 // a's failures counted by the picker
	}{
		{"a failure asking for a retry", Verdict{Outcome: Outcome{Failed: true}, Retry: true}, "a failed 15ms", 1},
		{"a failure, no retry", Verdict{Outcome: Outcome{Failed: true}}, "a failed 15ms", 1},
		{"a failure with its own latency", Verdict{Outcome: Outcome{Failed: true, Latency: 7 * time.Millisecond}, Retry: true}, "a failed 7ms", 1},
		{"cut short by its cancellation", Verdict{Outcome: Outcome{Abandoned: true}}, "a superseded 15ms", 0},
		{"a success after its cancellation", ok, "a superseded 15ms", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
			go func() {
				g.done <- g.loop.RunHedged(context.Background(), g.h, func(ctx context.Context, peer *Peer) Verdict {
					c := &hedgeCall{peer: peer.Addr(), ctx: ctx, reply: make(chan Verdict, 1)}
					g.started <- c
					if peer.Addr() == "a" {
						<-ctx.Done() // superseded: b has answered
						return tc.loser
					}
					return <-c.reply
				})
			}()
			a := g.call("a")
			g.clk.add(10 * time.Millisecond)
			g.timer(10 * time.Millisecond).fire <- time.Time{}
			b := g.call("b")
			g.clk.add(5 * time.Millisecond)
			b.reply <- ok
			require.NoError(t, g.wait())
			assert.ErrorIs(t, context.Cause(a.ctx), ErrSuperseded, "a lost")
			assert.Equal(t, []string{"b ok 5ms", tc.want}, g.rec.got)
			assert.Equal(t, tc.fails, g.lb.Peers()[0].Stats().Failures, "a's failures")
			assert.Equal(t, uint64(1), g.h.Stats().Won)
		})
	}
}
