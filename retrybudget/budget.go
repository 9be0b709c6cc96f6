// Package retrybudget bounds a client's retries and hedges with Finagle's
// retry budget: Budget, which balancer.Attempts, balancer.Do and
// balancerhttp's Transport and Proxy take as their balancer.Budget. It
// reaches package balancer through its exported API alone.
package retrybudget

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/retrywindow"
)

// Finagle's RetryBudget defaults, which Linkerd uses too: retries may add
// 20% to the requests, plus 10 retries a second, counted over 10 s.
const (
	DefaultRatio        = retrywindow.DefaultRatio
	DefaultMinPerSecond = retrywindow.DefaultMinPerSecond
	DefaultWindow       = retrywindow.DefaultWindow
)

// The bounds New accepts.
const (
	MinWindow       = retrywindow.MinWindow // Finagle's bounds on its ttl
	MaxWindow       = retrywindow.MaxWindow
	MaxRatio        = retrywindow.MaxRatio // Finagle's percentCanRetry bound, as a ratio
	MaxMinPerSecond = retrywindow.MaxMinPerSecond
)

// Budget bounds the retries of one client's requests, as Finagle's
// RetryBudget does: each request deposits one token (Deposit), each retry
// withdraws one (TryWithdraw), and a retry is allowed while the retries
// made in the last window, this one included, are at most ratio times the
// requests begun in it plus minPerSecond × window. A brownout at rate
// requests a second then costs a client at most 1 + ratio + minPerSecond /
// rate attempts a request once it lasts longer than the window, where
// retrying every failure on the next peer would cost up to one attempt per
// peer. Entries leave the window in tenths of it: one counts for between
// 0.9 and 1 window. A clock that steps back by more than a tenth moves the
// budget's time on from the newest tenth it has seen, so the window keeps
// sliding; a smaller step counts in the newest tenth.
//
// Give one Budget to every balancer.Attempts, Transport or Proxy of one
// client (their Budget fields). gRPC throttles its own retries, which
// grpcbalancer leaves to it, with the service config's retryThrottling: a
// token bucket per channel refilled by successes only, with no window.
// A Budget is safe for concurrent use; its methods take no lock and
// allocate nothing. The zero value refuses every retry; use New. A nil
// *Budget is no budget at all: Deposit and Refund do nothing and
// TryWithdraw allows every retry, so a nil *Budget in a balancer.Budget
// field bounds nothing, as a nil field does.
type Budget struct {
	w retrywindow.Window
}

var _ balancer.Budget = (*Budget)(nil)

// Stats counts what a Budget has done since it was made.
type Stats struct {
	Deposits uint64 // requests counted (Deposit)
	Retries  uint64 // retries allowed and kept (TryWithdraw true, less Refund)
	Refused  uint64 // retries refused (TryWithdraw false)
}

// New returns a budget allowing, over any window, ratio retries per
// request plus minPerSecond × window; Finagle's defaults are DefaultRatio,
// DefaultMinPerSecond and DefaultWindow. A ratio outside [0, MaxRatio], a
// minPerSecond outside [0, MaxMinPerSecond], NaN, a window outside
// [MinWindow, MaxWindow], a nil option or WithClock(nil) is
// balancer.ErrInvalidConfig, naming the value. Both ratio and minPerSecond
// 0 give a budget that refuses every retry.
func New(ratio, minPerSecond float64, window time.Duration, opts ...Option) (*Budget, error) {
	c := options{now: time.Now}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("retrybudget: New: opts[%d] is nil: %w", i, balancer.ErrInvalidConfig)
		}
		o(&c)
	}
	if c.now == nil {
		return nil, fmt.Errorf("retrybudget: New: WithClock(nil): %w", balancer.ErrInvalidConfig)
	}
	if err := retrywindow.Check(ratio, minPerSecond, window); err != nil {
		return nil, fmt.Errorf("retrybudget: New: %v: %w", err, balancer.ErrInvalidConfig)
	}
	b := new(Budget)
	b.w.Init(ratio, minPerSecond, window, c.now)
	return b, nil
}

// Deposit counts one request.
func (b *Budget) Deposit() {
	if b != nil {
		b.w.Deposit()
	}
}

// TryWithdraw takes one retry from the budget, reporting whether it was
// allowed.
func (b *Budget) TryWithdraw() bool {
	return b == nil || b.w.TryWithdraw()
}

// Refund gives back one retry TryWithdraw allowed and the caller did not
// make (balancer.Attempts refunds a retry whose pick found no peer). With
// no token to say which retry, it takes one off the newest tenth of the
// window that holds one: the withdrawal's own, unless another retry was
// withdrawn in a later tenth since, when the count stays exact until the
// withdrawal's tenth leaves the window and is then one short until the
// later one does. The window's count never goes below the retries kept
// nor wraps: a refund with no retry to give back changes nothing. Stats'
// Retries goes down by one, never below zero.
func (b *Budget) Refund() {
	if b != nil {
		b.w.Refund()
	}
}

// Stats returns the budget's counters, each read atomically; a nil
// budget's are zero.
func (b *Budget) Stats() Stats {
	if b == nil {
		return Stats{}
	}
	return Stats(b.w.Stats())
}

// An Option configures New.
type Option func(*options)

type options struct {
	now func() time.Time
}

// WithClock makes the budget read the time from now instead of time.Now,
// so that tests and simulations can drive its window on a virtual clock.
func WithClock(now func() time.Time) Option {
	return func(c *options) { c.now = now }
}
