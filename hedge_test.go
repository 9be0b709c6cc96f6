package balancer

import (
	"context"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// hedgeRig runs one hedged Attempts.Run on a goroutine, over SmoothWRR
// with a (weight 3), b (2) and c (1), which a fresh request picks in the
// order a, b, c, and a fake clock that moves only when the test moves it.
// Each try announces itself on started and waits for the test's verdict
// or its context's end; a try whose context ended returns a failure, so
// that a loser's report shows Run's Abandoned, not try's verdict. The
// hedge's timer is the test's: each arming arrives on timers and fires
// when the test says.
type hedgeRig struct {
	t       *testing.T
	clk     *fakeClock
	lb      Balancer
	rec     *recorder
	h       *Hedging
	r       Request
	loop    Attempts
	started chan *hedgeCall
	timers  chan hedgeTimer
	done    chan error

	mu     sync.Mutex
	events []string
}

type hedgeCall struct {
	peer  string
	ctx   context.Context
	reply chan Verdict
}

type hedgeTimer struct {
	d    time.Duration
	fire chan time.Time
}

func newHedgeRig(t *testing.T, p HedgePolicy) *hedgeRig {
	t.Helper()
	g := &hedgeRig{t: t, clk: newFakeClock(), started: make(chan *hedgeCall, 8), timers: make(chan hedgeTimer, 8), done: make(chan error, 1)}
	var err error
	g.lb, err = NewSmoothWRR([]*Peer{
		NewPeer("a", Weight(3), MaxFails(0)),
		NewPeer("b", Weight(2), MaxFails(0)),
		NewPeer("c", Weight(1), MaxFails(0)),
	}, g.clk.opt())
	require.NoError(t, err)
	g.rec = &recorder{Picker: g.lb}
	if p.Budget == nil {
		p.Budget, err = NewRetryBudget(1, 0, time.Second, g.clk.opt()) // one hedge a request
		require.NoError(t, err)
	}
	p.Timer = func(d time.Duration) (<-chan time.Time, func() bool) {
		c := make(chan time.Time, 1)
		g.timers <- hedgeTimer{d, c}
		return c, func() bool { return true }
	}
	p.Events = func(e Event) {
		g.mu.Lock()
		defer g.mu.Unlock()
		s := e.Kind.String()
		if e.Peer != nil {
			s += " " + e.Peer.Addr()
		}
		g.events = append(g.events, s)
	}
	g.h, err = NewHedging(p)
	require.NoError(t, err)
	g.loop = Attempts{Picker: g.rec, Request: &g.r, Now: g.clk.now}
	return g
}

// run starts the loop.
func (g *hedgeRig) run() {
	go func() {
		g.done <- g.loop.RunHedged(context.Background(), g.h, func(ctx context.Context, peer *Peer) Verdict {
			c := &hedgeCall{peer: peer.Addr(), ctx: ctx, reply: make(chan Verdict, 1)}
			g.started <- c
			select {
			case v := <-c.reply:
				return v
			case <-ctx.Done():
				return Verdict{Outcome: Outcome{Failed: true}, Retry: true}
			}
		})
	}()
}

// call waits for the next attempt, which must be on peer.
func (g *hedgeRig) call(peer string) *hedgeCall {
	g.t.Helper()
	c := <-g.started
	require.Equal(g.t, peer, c.peer, "attempt's peer")
	return c
}

// timer waits for the next arming of the hedge's timer, which must be
// for d.
func (g *hedgeRig) timer(d time.Duration) hedgeTimer {
	g.t.Helper()
	tm := <-g.timers
	require.Equal(g.t, d, tm.d, "hedge delay")
	return tm
}

// idle checks that no attempt has started and no timer was armed beyond
// those the test took. Run's goroutine is then blocked on its select (a
// timer was armed, the attempts wait for the test), so nothing can start
// until the test acts.
func (g *hedgeRig) idle() {
	g.t.Helper()
	assert.Empty(g.t, g.started, "an attempt started")
	assert.Empty(g.t, g.timers, "a timer was armed")
}

func (g *hedgeRig) wait() error {
	g.t.Helper()
	err := <-g.done
	for _, q := range g.lb.Peers() {
		assert.Zero(g.t, q.InFlight(), "in flight on %s after Run", q)
	}
	return err
}

func (g *hedgeRig) eventList() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.events)
}

var ok = Verdict{}

// TestHedge_firesAtDelay: the hedge goes when the timer armed for Delay
// fires and not before; the first answer wins, the loser's context is
// cancelled with ErrSuperseded, and it is reported Abandoned and
// Superseded once, with the time it ran, whatever its try returned.
func TestHedge_firesAtDelay(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	tm := g.timer(10 * time.Millisecond)
	g.idle()
	assert.Equal(t, 1, g.lb.Peers()[0].InFlight()+g.lb.Peers()[1].InFlight(), "one attempt before the delay")

	g.clk.add(10 * time.Millisecond)
	tm.fire <- time.Time{}
	b := g.call("b")
	g.clk.add(5 * time.Millisecond)
	b.reply <- ok
	require.NoError(t, g.wait())
	assert.ErrorIs(t, context.Cause(a.ctx), ErrSuperseded, "loser's context")
	assert.NoError(t, b.ctx.Err(), "the winner's context lives on")
	assert.Equal(t, []string{"b ok 5ms", "a superseded 15ms"}, g.rec.got)
	assert.Equal(t, []string{"HedgeSent b", "HedgeWon b"}, g.eventList())
	assert.Equal(t, HedgeStats{Sent: 1, Won: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, 2, g.r.Attempts())
}

// TestHedge_originalWins: the original answers after the hedge was sent:
// it wins, the hedge is the loser, and no hedge win is counted.
func TestHedge_originalWins(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	g.clk.add(10 * time.Millisecond)
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	g.clk.add(2 * time.Millisecond)
	a.reply <- ok
	require.NoError(t, g.wait())
	assert.ErrorIs(t, context.Cause(b.ctx), ErrSuperseded)
	assert.Equal(t, []string{"a ok 12ms", "b superseded 2ms"}, g.rec.got)
	assert.Equal(t, []string{"HedgeSent b"}, g.eventList())
	assert.Equal(t, HedgeStats{Sent: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
}

// TestHedge_answerBeforeDelay: an answer before the delay ends the loop
// with no hedge.
func TestHedge_answerBeforeDelay(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond)
	g.clk.add(3 * time.Millisecond)
	a.reply <- ok
	require.NoError(t, g.wait())
	assert.Equal(t, []string{"a ok 3ms"}, g.rec.got)
	assert.Empty(t, g.eventList())
	assert.Equal(t, HedgeStats{Delay: 10 * time.Millisecond}, g.h.Stats())
}

// TestHedge_failureBeforeDelayIsRetry: a failure before the delay is an
// ordinary retry, taken from Attempts.Budget, not a hedge; the retry is
// hedged in its turn, its own delay armed afresh.
func TestHedge_failureBeforeDelayIsRetry(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	retries, err := NewRetryBudget(1, 0, time.Second, g.clk.opt())
	require.NoError(t, err)
	g.loop.Budget = retries
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond)
	g.clk.add(time.Millisecond)
	a.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
	b := g.call("b")
	g.timer(10 * time.Millisecond)
	g.clk.add(4 * time.Millisecond)
	b.reply <- ok
	require.NoError(t, g.wait())
	assert.Equal(t, []string{"a failed 1ms", "b ok 4ms"}, g.rec.got)
	assert.Equal(t, HedgeStats{Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, RetryBudgetStats{Deposits: 1, Retries: 1}, retries.Stats())
	assert.Equal(t, RetryBudgetStats{Deposits: 1}, g.h.budget.(*RetryBudget).Stats(), "the hedge budget: nothing withdrawn")
}

// TestHedge_failureWhileHedgeInFlight: the original fails after the hedge
// went: no retry while the hedge is in flight, and the hedge's answer
// ends the loop (a win).
func TestHedge_failureWhileHedgeInFlight(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	g.clk.add(10 * time.Millisecond)
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	g.clk.add(time.Millisecond)
	a.reply <- Verdict{Outcome: Outcome{Failed: true}, Retry: true}
	for g.lb.Peers()[0].InFlight() != 0 { // a reported
		runtime.Gosched()
	}
	g.clk.add(time.Millisecond)
	b.reply <- ok
	require.NoError(t, g.wait())
	assert.Equal(t, []string{"a failed 11ms", "b ok 2ms"}, g.rec.got)
	assert.Equal(t, HedgeStats{Sent: 1, Won: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, 2, g.r.Attempts(), "no third attempt")
}

// TestHedge_budgetRefuses: a budget that allows nothing refuses the hedge;
// the original goes on alone and no further timer is armed.
func TestHedge_budgetRefuses(t *testing.T) {
	clk := newFakeClock()
	none, err := NewRetryBudget(0, 0, time.Second, clk.opt())
	require.NoError(t, err)
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 3, Delay: 10 * time.Millisecond, Budget: none})
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	a.reply <- ok
	require.NoError(t, g.wait())
	g.idle()
	assert.Equal(t, []string{"a ok 0s"}, g.rec.got)
	assert.Equal(t, []string{"HedgeRefused"}, g.eventList())
	assert.Equal(t, HedgeStats{Refused: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, RetryBudgetStats{Deposits: 1, Refused: 1}, none.Stats())
	assert.Equal(t, 1, g.r.Attempts(), "the picker was not asked")
}

// TestHedge_maxAttempts: with MaxAttempts 3 a second hedge follows the
// first by the delay; none beyond three in flight; the last answers.
func TestHedge_maxAttempts(t *testing.T) {
	clk := newFakeClock()
	two, err := NewRetryBudget(2, 0, time.Second, clk.opt()) // two hedges a request
	require.NoError(t, err)
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 3, Delay: 10 * time.Millisecond, Budget: two})
	g.run()
	a := g.call("a")
	g.clk.add(10 * time.Millisecond)
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	g.clk.add(10 * time.Millisecond)
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	c := g.call("c")
	g.idle() // three in flight: no timer
	g.clk.add(time.Millisecond)
	c.reply <- ok
	require.NoError(t, g.wait())
	for _, x := range []*hedgeCall{a, b} {
		assert.ErrorIs(t, context.Cause(x.ctx), ErrSuperseded)
	}
	assert.Equal(t, []string{"c ok 1ms", "a superseded 21ms", "b superseded 11ms"}, sortLosers(g.rec.got))
	assert.Equal(t, HedgeStats{Sent: 2, Won: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
}

// sortLosers sorts the reports after the first (the winner's): losers
// return in any order.
func sortLosers(got []string) []string {
	out := slices.Clone(got)
	if len(out) > 1 {
		slices.Sort(out[1:])
	}
	return out
}

// TestHedge_zeroDelay: Delay 0 sends MaxAttempts at once, as A6's
// hedgingDelay 0 does, with no timer.
func TestHedge_zeroDelay(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 3})
	g.h.budget, _ = NewRetryBudget(2, 0, time.Second, g.clk.opt())
	g.run()
	got := map[string]*hedgeCall{}
	for range 3 {
		c := <-g.started
		got[c.peer] = c
	}
	g.idle()
	got["b"].reply <- ok
	require.NoError(t, g.wait())
	assert.Equal(t, []string{"b ok 0s", "a superseded 0s", "c superseded 0s"}, sortLosers(g.rec.got))
	assert.Equal(t, uint64(2), g.h.Stats().Sent)
}

// TestHedge_reportedLoser: a loser whose verdict says Reported is the
// caller's to report: Run reports only the winner.
func TestHedge_reportedLoser(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	g.run()
	a := g.call("a")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	b.reply <- ok
	<-a.ctx.Done()
	a.reply <- Verdict{Reported: true} // read by the try only if it had not seen ctx end
	require.NoError(t, <-g.done)
	assert.Equal(t, "b ok 0s", g.rec.got[0])
	assert.Len(t, g.rec.got, 2, "a's try saw its context end first and failed: Run reports it Abandoned")
	assert.Equal(t, "a superseded 0s", g.rec.got[1])
}

// TestHedge_maxTries: Attempts.MaxTries bounds hedges too: with MaxTries
// 2 and MaxAttempts 3, the timer armed after the first hedge finds no try
// left; no third attempt goes, nothing is refused or withdrawn.
func TestHedge_maxTries(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 3, Delay: 10 * time.Millisecond})
	g.loop.MaxTries = 2
	g.run()
	g.call("a")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b := g.call("b")
	g.timer(10 * time.Millisecond).fire <- time.Time{}
	b.reply <- ok
	require.NoError(t, g.wait())
	g.idle()
	assert.Equal(t, 2, g.r.Attempts())
	assert.Equal(t, HedgeStats{Sent: 1, Won: 1, Delay: 10 * time.Millisecond}, g.h.Stats())
	assert.Equal(t, RetryBudgetStats{Deposits: 1, Retries: 1}, g.h.budget.(*RetryBudget).Stats())
}

// firstPicker notes each request's first peer.
type firstPicker struct {
	Picker
	first *Peer
}

func (f *firstPicker) Pick(r *Request) (*Peer, error) {
	p, err := f.Picker.Pick(r)
	if err == nil && r.Attempts() == 1 {
		f.first = p
	}
	return p, err
}

// countingPicker counts Picks that returned a peer and Dones.
type countingPicker struct {
	Picker
	picks, dones atomic.Int64
}

func (c *countingPicker) Pick(r *Request) (*Peer, error) {
	p, err := c.Picker.Pick(r)
	if err == nil {
		c.picks.Add(1)
	}
	return p, err
}

func (c *countingPicker) Done(p *Peer, o Outcome) error {
	c.dones.Add(1)
	return c.Picker.Done(p, o)
}

// TestHedge_panic: a try that panics while another is in flight stops
// the loop; the other is cancelled and reported Abandoned (and
// Superseded: the panic, not its peer, cut it short), the panicking one
// Abandoned alone, and the panic goes on from Run.
func TestHedge_panic(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Delay: 10 * time.Millisecond})
	var a *hedgeCall
	go func() { (<-g.timers).fire <- time.Time{} }()
	assert.PanicsWithValue(t, "boom", func() {
		_ = g.loop.RunHedged(context.Background(), g.h, func(ctx context.Context, peer *Peer) Verdict {
			if peer.Addr() == "a" {
				a = &hedgeCall{ctx: ctx}
				g.started <- a
				<-ctx.Done()
				return ok
			}
			panic("boom")
		})
	})
	assert.ErrorIs(t, context.Cause(a.ctx), ErrSuperseded)
	assert.Equal(t, []string{"b abandoned 0s", "a superseded 0s"}, g.rec.got)
}

// TestHedge_percentile: the delay is the nearest-rank percentile of the
// first attempts' latencies in the window, none before 128 are recorded,
// then recomputed every 64, over the last 1024 only; never below Delay.
func TestHedge_percentile(t *testing.T) {
	bud, err := NewRetryBudget(1, 0, time.Second)
	require.NoError(t, err)
	h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Percentile: 0.95, Budget: bud})
	require.NoError(t, err)
	// nearest is the q-quantile by the nearest rank of the values lo..hi
	// ms (each once), computed apart from the code: rank ⌈q·n⌉.
	nearest := func(lo, hi int) time.Duration {
		n := hi - lo + 1
		return time.Duration(lo-1+int(math.Ceil(0.95*float64(n)))) * time.Millisecond
	}
	for i := 1; i <= 127; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	assert.Equal(t, time.Duration(-1), h.Stats().Delay, "127 samples: no hedge yet")
	h.record(128 * time.Millisecond)
	assert.Equal(t, nearest(1, 128), h.Stats().Delay) // ⌈121.6⌉ = 122 ms
	assert.Equal(t, 122*time.Millisecond, nearest(1, 128))
	for i := 129; i <= 191; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	assert.Equal(t, nearest(1, 128), h.Stats().Delay, "until the 192nd")
	h.record(192 * time.Millisecond)
	assert.Equal(t, nearest(1, 192), h.Stats().Delay)
	for i := 193; i <= 2048; i++ {
		h.record(time.Duration(i) * time.Millisecond)
	}
	assert.Equal(t, nearest(1025, 2048), h.Stats().Delay, "the last 1024 only")

	h2, err := NewHedging(HedgePolicy{MaxAttempts: 2, Percentile: 0.5, Delay: time.Second, Budget: bud})
	require.NoError(t, err)
	for range 128 {
		h2.record(time.Millisecond)
	}
	assert.Equal(t, time.Second, h2.Stats().Delay, "Delay is the least")
}

// TestHedge_percentileNoHedgeYet: before the window has its samples, Run
// arms no timer and sends no hedge.
func TestHedge_percentileNoHedgeYet(t *testing.T) {
	g := newHedgeRig(t, HedgePolicy{MaxAttempts: 2, Percentile: 0.9})
	g.run()
	a := g.call("a")
	g.clk.add(7 * time.Millisecond)
	a.reply <- ok
	require.NoError(t, g.wait())
	g.idle()
	assert.Equal(t, []string{"a ok 7ms"}, g.rec.got)
	assert.Equal(t, uint64(1), g.h.n.Load(), "its latency recorded")
}

// TestHedge_budgetBounds: every request slow (the timer fires before any
// answer), N = 1000 requests on a still clock, a hedge budget of 5% and a
// reserve of 1 a second over 10 s: the budget allows 10 + 0.05·k hedges
// by the k-th request (deposited before its hedge is asked), so exactly
// ⌊10 + 0.05·1000⌋ = 60 hedges go and 940 are refused; each request ends
// with one answer.
func TestHedge_budgetBounds(t *testing.T) {
	clk := newFakeClock()
	lb, err := NewRoundRobin([]*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0))}, clk.opt())
	require.NoError(t, err)
	bud, err := NewRetryBudget(0.05, 1, 10*time.Second, clk.opt())
	require.NoError(t, err)
	var decided chan EventKind
	h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Delay: time.Millisecond, Budget: bud,
		Timer: func(time.Duration) (<-chan time.Time, func() bool) {
			c := make(chan time.Time, 1)
			c <- time.Time{} // slow: the delay passes before any answer
			return c, func() bool { return true }
		},
		Events: func(e Event) { decided <- e.Kind }})
	require.NoError(t, err)
	const n = 1000
	answers := 0
	fp := &firstPicker{Picker: lb}
	for range n {
		decided = make(chan EventKind, 2)
		loop := Attempts{Picker: fp, Now: clk.now}
		err := loop.RunHedged(context.Background(), h, func(ctx context.Context, peer *Peer) Verdict {
			if peer != fp.first { // picked before the attempt's goroutine began
				return ok // the hedge answers at once
			}
			switch <-decided {
			case EventHedgeRefused:
				return ok // alone: it answers
			default:
				<-ctx.Done() // the hedge wins
				return Verdict{Outcome: Outcome{Abandoned: true}}
			}
		})
		require.NoError(t, err)
		answers++
	}
	st := h.Stats()
	assert.Equal(t, uint64(60), st.Sent)
	assert.Equal(t, uint64(60), st.Won)
	assert.Equal(t, uint64(n-60), st.Refused)
	assert.LessOrEqual(t, float64(st.Sent), 0.05*n+10)
	assert.Equal(t, n, answers)
	for _, q := range lb.Peers() {
		assert.Zero(t, q.InFlight())
	}
}

// TestHedge_concurrent: 64 goroutines × 50 requests with Delay 0 (two
// attempts at once, on the real scheduler), every try answering at once:
// each request ends with nil, every attempt is reported (no peer keeps
// one in flight), and the picks equal the reports. Run with -race.
func TestHedge_concurrent(t *testing.T) {
	lb, err := NewRoundRobin([]*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0)), NewPeer("c", MaxFails(0))})
	require.NoError(t, err)
	bud, err := NewRetryBudget(1, 0, time.Minute)
	require.NoError(t, err)
	h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Budget: bud})
	require.NoError(t, err)
	cnt := &countingPicker{Picker: lb}
	var wg sync.WaitGroup
	errs := make(chan error, 64*50)
	for range 64 {
		wg.Go(func() {
			for range 50 {
				loop := Attempts{Picker: cnt}
				errs <- loop.RunHedged(context.Background(), h, func(context.Context, *Peer) Verdict { return ok })
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, q := range lb.Peers() {
		assert.Zero(t, q.InFlight(), "in flight on %s", q)
	}
	assert.Equal(t, cnt.picks.Load(), cnt.dones.Load())
	assert.Equal(t, int64(64*50)+int64(h.Stats().Sent), cnt.picks.Load(), "each request's first attempt and its hedges")
}

// TestNewHedging_badPolicy: each bad field is ErrInvalidConfig naming
// its value.
func TestNewHedging_badPolicy(t *testing.T) {
	bud, err := NewRetryBudget(1, 0, time.Second)
	require.NoError(t, err)
	for _, tt := range []struct {
		p    HedgePolicy
		text string
	}{
		{HedgePolicy{MaxAttempts: 1, Budget: bud}, "MaxAttempts 1 out of range [2, 5]"},
		{HedgePolicy{MaxAttempts: 6, Budget: bud}, "MaxAttempts 6 out of range [2, 5]"},
		{HedgePolicy{MaxAttempts: 2, Delay: -time.Second, Budget: bud}, "Delay -1s is negative"},
		{HedgePolicy{MaxAttempts: 2, Percentile: 1, Budget: bud}, "Percentile 1 out of range [0, 1)"},
		{HedgePolicy{MaxAttempts: 2, Percentile: -0.5, Budget: bud}, "Percentile -0.5 out of range"},
		{HedgePolicy{MaxAttempts: 2, Percentile: math.NaN(), Budget: bud}, "Percentile NaN"},
		{HedgePolicy{MaxAttempts: 2}, "Budget is nil (<nil>)"},
		{HedgePolicy{MaxAttempts: 2, Budget: (*RetryBudget)(nil)}, "Budget is nil (*balancer.RetryBudget)"},
		{HedgePolicy{MaxAttempts: 2, Budget: (*countingBudget)(nil)}, "Budget is nil (*balancer.countingBudget)"},
	} {
		h, err := NewHedging(tt.p)
		assert.Nil(t, h)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, tt.text)
	}
	_, err = NewHedging(HedgePolicy{MaxAttempts: 5, Budget: bud})
	assert.NoError(t, err)
}
