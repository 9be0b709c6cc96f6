package balancer

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// An Option configures a picker at construction: WithClock, WithEvents and
// the guards' options, which every picker takes, and WithRand, WithDecay,
// WithFailurePenalty, WithReportedLoad and WithSlowStart, which several
// take (Algorithm.Options names a picker's). A setting only one picker has
// is a field of its settings type (FastestFirstSettings, PrequalSettings,
// ReportedWRRSettings, ConsistentHashSettings, RandomWeightedSettings),
// which cannot be handed to another picker's constructor. Every picker
// rejects, with ErrInvalidConfig naming the option, an option it does not
// take, a nil option and a value out of the option's range.
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
// picker's declaration names it (pickerSpec.options, or .settings for its
// settings type's Option).
func ownOption[T any](name string, set func(*T)) Option {
	return option{name, func(c *config) { c.own = append(c.own, set) }}
}

// own is one of a picker's own settings: its value, and how it was given,
// for an error naming it: the deprecated option ("WithBand(0.5)") or the
// settings field ("FastestFirstSettings.Band(0.5)"); "" for the default.
type own[T any] struct {
	v  T
	by string
}

// give sets o to v, given by the option or field called name.
func (o *own[T]) give(name string, v T) { o.v, o.by = v, fmt.Sprintf("%s(%v)", name, v) }

// field gives o the value v of the settings field called name
// ("FastestFirstSettings.Band"), unless v is 0: the field's default. With
// minusOne, -1 stands for 0, for a field whose 0 is itself a meaningful
// value, which a field cannot tell from unset.
func field[T ~int | ~int64 | ~float64](o *own[T], name string, v T, minusOne bool) {
	switch {
	case v == 0:
	case minusOne && v == -1:
		o.v, o.by = 0, fmt.Sprintf("%s(%v)", name, v)
	default:
		o.give(name, v)
	}
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
