package balancer

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// An Option configures a picker at construction. Every picker rejects, with
// ErrInvalidConfig naming the option, an option it would ignore, a nil
// option and a value out of the option's range. The options every picker
// shares (WithClock, WithRand, WithEvents) are declared here; an
// algorithm's own options are declared in its file.
type Option interface {
	optionName() string // the option's function name, as errors and declarations spell it
	apply(*config)
}

// config holds the shared options' settings and the algorithm options
// given, which the picker's constructor applies to its own settings with
// applyOwn.
type config struct {
	now    func() time.Time
	src    rand.Source
	events func(Event)
	budget *RetryBudget // Do's, WithRetryBudget
	guards guardConfig  // WithPanicThreshold, WithMaxEjectionPercent (guard_panic.go)
	set    optionSet    // the shared options given
	spec   pickerSpec   // the picker's declaration, for its peer set
	own    []any        // the algorithm options' setters (func(*T)), in the order given
}

// optionSet has one bit per shared option.
type optionSet uint8

const (
	optClock optionSet = 1 << iota
	optRand
	optEvents
	optBudget
)

// option is an Option: its name and what it sets.
type option struct {
	name string
	set  func(*config)
}

func (o option) optionName() string { return o.name }
func (o option) apply(c *config)    { o.set(c) }

// ownOption returns the algorithm option called name, whose setter changes
// the algorithm's settings, a T. The algorithm's file declares it; its
// constructor applies it with applyOwn after newConfig has checked that the
// picker's declaration (pickerSpec.options) names it.
func ownOption[T any](name string, set func(*T)) Option {
	return option{name, func(c *config) { c.own = append(c.own, set) }}
}

// applyOwn applies to s, in order, the options given whose settings are a
// T.
func applyOwn[T any](c *config, s *T) {
	for _, f := range c.own {
		if set, ok := f.(func(*T)); ok {
			set(s)
		}
	}
}

// newConfig applies opts for the picker declared by spec, refusing a nil
// option and one spec does not name, and checks the shared options'
// values. The algorithm's own options are then the constructor's to apply
// (applyOwn) and check.
func newConfig(spec pickerSpec, opts []Option) (config, error) {
	c, err := applyOptions(spec.name, spec.accepts, opts)
	c.spec = spec
	return c, err
}

// applyOptions is newConfig for a caller named name that accepts the
// options accepts reports true for.
func applyOptions(name string, accepts func(option string) bool, opts []Option) (config, error) {
	c := config{now: time.Now}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("balancer: %s: opts[%d] is nil: %w", name, i, ErrInvalidConfig)
		}
		if !accepts(o.optionName()) {
			if why := refusedWhy(name, o.optionName()); why != "" {
				return c, fmt.Errorf("balancer: %s does not use %s: %s: %w", name, o.optionName(), why, ErrInvalidConfig)
			}
			return c, fmt.Errorf("balancer: %s does not use %s: %w", name, o.optionName(), ErrInvalidConfig)
		}
		o.apply(&c)
	}
	switch {
	case c.now == nil:
		return c, fmt.Errorf("balancer: %s: WithClock(nil): %w", name, ErrInvalidConfig)
	case c.set&optEvents != 0 && c.events == nil:
		return c, fmt.Errorf("balancer: %s: WithEvents(nil): %w", name, ErrInvalidConfig)
	case c.set&optBudget != 0 && c.budget == nil:
		return c, fmt.Errorf("balancer: %s: WithRetryBudget(nil): %w", name, ErrInvalidConfig)
	case c.set&optRand != 0 && c.src == nil:
		return c, fmt.Errorf("balancer: %s: WithRand(nil): %w", name, ErrInvalidConfig)
	}
	return c, c.guards.check(name)
}

// WithClock makes the picker read the time from now instead of time.Now.
// The fail_timeout window, warm-up and latency decay all use it, so tests and
// simulations can drive a picker on a virtual clock. Every picker accepts
// it. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return option{"WithClock", func(c *config) { c.now = now; c.set |= optClock }}
}

// WithRand makes a randomized picker (one whose Algorithm.Random is true)
// draw from src. The picker serializes its use of src, so src itself need
// not be safe for concurrent use. Default: the runtime's per-thread
// generators, with no shared state, which no seed can reproduce.
func WithRand(src rand.Source) Option {
	return option{"WithRand", func(c *config) { c.src = src; c.set |= optRand }}
}
