package balancer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lbgo/balancer/internal/retrywindow"
)

// ErrRetryBudget is matched (errors.Is) by the error of a request whose
// retry or hedge the Budget refused; the same error matches the last
// attempt's error too.
var ErrRetryBudget = errors.New("balancer: retry refused by the retry budget")

// This file keeps the retry budget's old names, moved to package
// retrybudget (github.com/lbgo/balancer/retrybudget), for one release.
// Package retrybudget imports this one, so these cannot be aliases of its
// names: they are thin wrappers of the implementation both share
// (internal/retrywindow).

// Finagle's RetryBudget defaults.
//
// Deprecated: use retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond
// and retrybudget.DefaultWindow.
const (
	DefaultRetryRatio        = retrywindow.DefaultRatio
	DefaultRetryMinPerSecond = retrywindow.DefaultMinPerSecond
	DefaultRetryWindow       = retrywindow.DefaultWindow
)

// The bounds NewRetryBudget accepts.
//
// Deprecated: use retrybudget.MinWindow, retrybudget.MaxWindow,
// retrybudget.MaxRatio and retrybudget.MaxMinPerSecond.
const (
	MinRetryWindow       = retrywindow.MinWindow
	MaxRetryWindow       = retrywindow.MaxWindow
	MaxRetryRatio        = retrywindow.MaxRatio
	MaxRetryMinPerSecond = retrywindow.MaxMinPerSecond
)

// RetryBudget is Finagle's retry budget; it implements Budget. The zero
// value refuses every retry; a nil *RetryBudget is no budget.
//
// Deprecated: use retrybudget.Budget, made by retrybudget.New.
type RetryBudget struct {
	w retrywindow.Window
}

var _ Budget = (*RetryBudget)(nil)

// RetryBudgetStats counts what a RetryBudget has done since it was made.
//
// Deprecated: use retrybudget.Stats.
type RetryBudgetStats struct {
	Deposits uint64 // requests counted (Deposit)
	Retries  uint64 // retries allowed and made (TryWithdraw true, less Refund)
	Refused  uint64 // retries refused (TryWithdraw false)
}

// NewRetryBudget returns a budget allowing, over any window, ratio retries
// per request plus minPerSecond × window. It accepts WithClock.
//
// Deprecated: use retrybudget.New, with retrybudget.WithClock.
func NewRetryBudget(ratio, minPerSecond float64, window time.Duration, opts ...Option) (*RetryBudget, error) {
	cfg, err := applyOptions("NewRetryBudget", func(name string) bool { return name == "WithClock" }, opts)
	if err != nil {
		return nil, err
	}
	if err := retrywindow.Check(ratio, minPerSecond, window); err != nil {
		return nil, fmt.Errorf("balancer: NewRetryBudget: %v: %w", err, ErrInvalidConfig)
	}
	b := new(RetryBudget)
	b.w.Init(ratio, minPerSecond, window, cfg.now)
	return b, nil
}

// Deposit counts one request.
func (b *RetryBudget) Deposit() {
	if b != nil {
		b.w.Deposit()
	}
}

// TryWithdraw takes one retry from the budget, reporting whether it was
// allowed.
func (b *RetryBudget) TryWithdraw() bool { return b == nil || b.w.TryWithdraw() }

// Refund gives back one retry TryWithdraw allowed (see
// retrybudget.Budget.Refund).
func (b *RetryBudget) Refund() {
	if b != nil {
		b.w.Refund()
	}
}

// PickRetry picks the peer of a retry of r from p if the budget allows the
// retry, and returns ErrRetryBudget if it does not, as Attempts does for
// a retry (see Attempts.Next).
//
// Deprecated: use Attempts, whose Budget field takes the budget.
func (b *RetryBudget) PickRetry(p Picker, r *Request) (*Peer, error) {
	a := Attempts{Picker: p, Budget: b}
	return a.pickNext(context.Background(), r, 1, b)
}

// Stats returns the budget's counters.
func (b *RetryBudget) Stats() RetryBudgetStats {
	if b == nil {
		return RetryBudgetStats{}
	}
	return RetryBudgetStats(b.w.Stats())
}

// WithRetryBudget makes Do take each retry from b. Only Do accepts it;
// WithRetryBudget(nil) is refused.
//
// Deprecated: use Attempts.Do with b as its Budget. As an Option, a
// budget could be handed to a picker's constructor, which refuses it only
// at run time; as Attempts' field it cannot.
func WithRetryBudget(b *RetryBudget) Option {
	return option{"WithRetryBudget", func(c *config) { c.budget = b; c.set |= optBudget }}
}
