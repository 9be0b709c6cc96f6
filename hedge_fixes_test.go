package balancer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHedge_abandonedHedgeDoesNotWin: a hedge whose verdict ends the loop
// Abandoned (its try gave up, not its peer's answer) ended the request
// without winning it: Won stays 0 and no EventHedgeWon is sent; only the
// hedge sent is counted.
func TestHedge_abandonedHedgeDoesNotWin(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	b.reply <- Verdict{Outcome: Outcome{Abandoned: true}}
	<-a.ctx.Done()
	require.NoError(t, g.wait())
	assert.Equal(t, HedgeStats{Sent: 1, Won: 0, Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, []string{"HedgeSent b"}, g.eventList())
}

// TestHedge_loserFailedBeforeCancel: a loser whose try returned a failure
// before its context was cancelled (its peer answered, with a failure,
// while the winner's verdict was on its way) is reported with that
// failure, not Abandoned and Superseded. The test holds a's verdict
// between try's return and its send (on the Now that follows try) until
// b has won and cancelled a.
func TestHedge_loserFailedBeforeCancel(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	var hold atomic.Bool
	held, release := make(chan struct{}), make(chan struct{})
	g.loop.Now = func() time.Time {
		if hold.CompareAndSwap(true, false) {
			close(held)
			<-release
		}
		return g.clk.now()
	}
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	hold.Store(true)
	a.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
	<-held // a's try has returned, before any cancel: nothing else runs
	require.NoError(t, a.ctx.Err(), "a not cancelled when its try returned")
	b.reply <- ok
	<-a.ctx.Done() // b won
	close(release)
	require.NoError(t, g.wait())
	assert.Equal(t, []string{"b ok 0s", "a failed 0s"}, g.rec.got)
	assert.Equal(t, HedgeStats{Sent: 1, Won: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
}

// TestHedge_panicStopsTimer: when a try panics, the hedge timer armed for
// the next hedge is stopped at once, before the attempts still in flight
// are cancelled, and no further attempt is sent while they return, even
// if that timer fires.
func TestHedge_panicStopsTimer(t *testing.T) {
	type armed struct {
		fire    chan time.Time
		stopped atomic.Bool
	}
	timers := make(chan *armed, 4)
	bud, err := NewRetryBudget(2, 0, time.Second)
	require.NoError(t, err)
	h, err := NewHedging(HedgePolicy{MaxAttempts: 3, Delay: 10 * time.Millisecond, Budget: bud,
		Timer: func(time.Duration) (<-chan time.Time, func() bool) {
			tm := &armed{fire: make(chan time.Time, 1)}
			timers <- tm
			return tm.fire, func() bool { tm.stopped.Store(true); return true }
		}})
	require.NoError(t, err)
	lb, err := NewSmoothWRR([]*Peer{
		NewPeer("a", Weight(3), MaxFails(0)),
		NewPeer("b", Weight(2), MaxFails(0)),
		NewPeer("c", Weight(1), MaxFails(0)),
	})
	require.NoError(t, err)
	go func() { (<-timers).fire <- time.Time{} }() // the first hedge, to b
	var (
		second          *armed // armed once b is in flight
		stoppedOnCancel bool
		tries           atomic.Int64
	)
	loop := Attempts{Picker: lb, Request: new(Request)}
	assert.PanicsWithValue(t, "boom", func() {
		_ = loop.RunHedged(context.Background(), h, func(ctx context.Context, peer *Peer) Verdict {
			tries.Add(1)
			if peer.Addr() == "a" {
				<-ctx.Done() // cancelled after b's panic
				stoppedOnCancel = second.stopped.Load()
				second.fire <- time.Time{} // too late to send a hedge
				return ok
			}
			if peer.Addr() == "c" {
				return ok // a hedge sent after the panic
			}
			second = <-timers
			panic("boom")
		})
	})
	assert.True(t, stoppedOnCancel, "the hedge timer stopped when the try panicked")
	assert.Equal(t, int64(2), tries.Load(), "no attempt after the panic")
	assert.Equal(t, HedgeStats{Sent: 1, Delay: 10 * time.Millisecond}, h.Stats())
	assert.Empty(t, timers, "no timer armed after the panic")
}
