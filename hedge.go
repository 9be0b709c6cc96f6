package balancer

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// ErrSuperseded is the cause (context.Cause) with which Attempts.RunHedged
// cancels the context of an attempt still in flight when another attempt
// ended the loop: the hedge or the original that lost. Such an attempt is
// reported Abandoned, never as the peer's failure.
var ErrSuperseded = errors.New("balancer: attempt superseded by another attempt of its request")

// The bounds of HedgePolicy.MaxAttempts: gRPC's A6 caps its hedgingPolicy's
// maxAttempts at 5.
const (
	MinHedgeAttempts = 2
	MaxHedgeAttempts = 5
)

// HedgePolicy configures a Hedging: when a hedge is sent, how many
// attempts may be in flight at once, and what bounds the extra load.
type HedgePolicy struct {
	// MaxAttempts bounds the attempts of one request in flight at once,
	// the first included, in [MinHedgeAttempts, MaxHedgeAttempts] (A6's
	// maxAttempts; clamp a larger one to 5 as A6 does).
	MaxAttempts int

	// Delay is how long an attempt goes without an answer before the
	// next is sent, when Percentile is 0; with Percentile, the least
	// delay. 0 with Percentile 0 sends MaxAttempts at once, as A6's
	// hedgingDelay of 0 does. Negative is ErrInvalidConfig.
	Delay time.Duration

	// Percentile, in (0, 1), makes the delay that quantile of the
	// latencies of the last 1024 first attempts (see Hedging), and no
	// hedge is sent before 128 are recorded. Finagle's rule: a
	// percentile of 1 - the extra load allowed, 0.95 for 5%. 0: the
	// fixed Delay.
	Percentile float64

	// Budget bounds the hedges: Attempts.RunHedged deposits each hedged
	// request in it and withdraws each hedge before its pick (refunded
	// if the pick finds no peer); a hedge it refuses is not sent, and the
	// request goes on with the attempts in flight. Required: nil, or a
	// nil pointer in it, is refused. A budget of its own (such as
	// retrybudget.New(0.05, 1, 10*time.Second): 5% more attempts plus
	// one a second) keeps hedges and retries from starving each other;
	// the same budget as Attempts.Budget makes them share one (RunHedged
	// deposits once).
	Budget Budget

	// Timer returns a channel that receives once d has passed, and a
	// function that stops it, for the hedge's delay. Default: a
	// time.Timer. Tests give a virtual clock's.
	Timer func(d time.Duration) (<-chan time.Time, func() bool)

	// Events, if set, is called for each hedge sent (EventHedgeSent,
	// Peer the hedge's), each request a hedge won (EventHedgeWon, Peer
	// the winner) and each hedge the budget refused (EventHedgeRefused),
	// on the goroutine of Attempts.RunHedged, with Attempts.Now's time. It
	// must be quick and safe for concurrent use.
	Events func(Event)
}

// Hedging sends a request's next attempt to another peer when the attempt
// in flight has not answered within a delay, takes the first attempt that
// ends the loop and cancels the others (Attempts.RunHedged; the hedged
// requests of "The Tail at Scale", Finagle's BackupRequestFilter, gRPC
// A6's hedgingPolicy). The delay is fixed, or a percentile of the recent
// latencies of the requests' first attempts: a sliding window of the last
// 1024, sorted afresh every 64 (each record is an atomic store, the sort
// runs on the recording goroutine under a lock another recorder skips,
// and nothing allocates), where Finagle keeps a 30 s histogram clamped at
// 2 s: a window of samples needs no range, and its span follows the
// client's rate. An attempt that lost is recorded with its time until
// it was superseded (it was at least that slow); failed attempts, which
// retry at once, are not. Make it with NewHedging and share it among a
// client's requests; it is safe for concurrent use.
type Hedging struct {
	max     int
	delay   time.Duration
	q       float64
	budget  Budget
	timer   func(time.Duration) (<-chan time.Time, func() bool)
	events  func(Event)
	sent    atomic.Uint64
	won     atomic.Uint64
	refused atomic.Uint64

	// The window of latencies (ns), written at n-1 mod its size, and the
	// current percentile; -1 until hedgeMinSamples are recorded.
	n       atomic.Uint64
	window  [hedgeWindow]atomic.Int64
	current atomic.Int64
	mu      sync.Mutex // the sort's; TryLock, so a recorder never waits
	scratch [hedgeWindow]int64
}

// The percentile's window: its size, the samples needed before the first
// hedge, and how often (in samples) it is recomputed.
const (
	hedgeWindow     = 1024
	hedgeMinSamples = 128
	hedgeRecompute  = 64
)

// HedgeStats counts what a Hedging has done since it was made.
type HedgeStats struct {
	Sent uint64 // hedges sent
	// Won counts the requests a hedge ended with an answer from its
	// peer (answered first): not one whose Verdict was Abandoned.
	Won     uint64
	Refused uint64 // hedges the budget refused
	// Delay is the delay a hedge waits now; -1 while a Percentile
	// has too few latencies to hedge.
	Delay time.Duration
}

// NewHedging returns a Hedging following p. A MaxAttempts outside
// [MinHedgeAttempts, MaxHedgeAttempts], a negative Delay, a Percentile
// outside [0, 1) or NaN, or a nil Budget is ErrInvalidConfig, naming the
// value.
func NewHedging(p HedgePolicy) (*Hedging, error) {
	switch {
	case p.MaxAttempts < MinHedgeAttempts || p.MaxAttempts > MaxHedgeAttempts:
		return nil, fmt.Errorf("balancer: NewHedging: MaxAttempts %d out of range [%d, %d]: %w", p.MaxAttempts, MinHedgeAttempts, MaxHedgeAttempts, ErrInvalidConfig)
	case p.Delay < 0:
		return nil, fmt.Errorf("balancer: NewHedging: Delay %v is negative: %w", p.Delay, ErrInvalidConfig)
	case !(p.Percentile >= 0 && p.Percentile < 1):
		return nil, fmt.Errorf("balancer: NewHedging: Percentile %v out of range [0, 1): %w", p.Percentile, ErrInvalidConfig)
	case nilBudget(p.Budget):
		return nil, fmt.Errorf("balancer: NewHedging: Budget is nil (%T): %w", p.Budget, ErrInvalidConfig)
	}
	h := &Hedging{max: p.MaxAttempts, delay: p.Delay, q: p.Percentile, budget: p.Budget, timer: p.Timer, events: p.Events}
	if h.timer == nil {
		h.timer = func(d time.Duration) (<-chan time.Time, func() bool) {
			t := time.NewTimer(d)
			return t.C, t.Stop
		}
	}
	h.current.Store(-1)
	return h, nil
}

// nilBudget reports whether b is nil or holds a nil pointer (a nil
// *retrybudget.Budget is no budget at all, which a Hedging may not have).
func nilBudget(b Budget) bool {
	if b == nil {
		return true
	}
	v := reflect.ValueOf(b)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// sameBudget reports whether a and b are one budget, without comparing
// values whose type cannot be compared (== would panic).
func sameBudget(a, b Budget) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.TypeOf(a).Comparable() {
		return false
	}
	return a == b
}

// Stats returns the Hedging's counters, each read atomically.
func (h *Hedging) Stats() HedgeStats {
	d, ok := h.wait()
	if !ok {
		d = -1
	}
	return HedgeStats{Sent: h.sent.Load(), Won: h.won.Load(), Refused: h.refused.Load(), Delay: d}
}

// wait returns the delay before the next hedge, and false while a
// percentile has too few latencies to hedge.
func (h *Hedging) wait() (time.Duration, bool) {
	if h.q == 0 {
		return h.delay, true
	}
	c := h.current.Load()
	if c < 0 {
		return 0, false
	}
	return max(time.Duration(c), h.delay), true
}

// record adds a first attempt's latency to the window, and recomputes the
// percentile every hedgeRecompute samples from hedgeMinSamples on.
func (h *Hedging) record(d time.Duration) {
	if h.q == 0 {
		return
	}
	i := h.n.Add(1)
	h.window[(i-1)%hedgeWindow].Store(int64(max(d, 0)))
	if i < hedgeMinSamples || i%hedgeRecompute != 0 || !h.mu.TryLock() {
		return
	}
	defer h.mu.Unlock()
	n := min(h.n.Load(), hedgeWindow)
	s := h.scratch[:n]
	for j := range s {
		s[j] = h.window[j].Load()
	}
	slices.Sort(s)
	// The q-quantile by the nearest rank: the smallest sample with at
	// least q of the samples at or below it.
	k := int(math.Ceil(h.q*float64(n))) - 1
	h.current.Store(s[max(k, 0)])
}

// event reports an event of kind to the policy's hook, if any.
func (h *Hedging) event(kind EventKind, peer *Peer, at time.Time) {
	if h.events != nil {
		h.events(Event{Kind: kind, Peer: peer, Time: at})
	}
}
