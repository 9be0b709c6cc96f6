package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// An Option configures a picker at construction. Every picker rejects, with
// ErrInvalidConfig naming the option, an option it would ignore, a nil
// option and a value out of the option's range.
type Option interface {
	apply(*config)
}

// config holds every picker's optional settings. An option sets its field
// and its bit in set; a field whose bit is clear takes the picker's default.
type config struct {
	now      func() time.Time
	src      rand.Source
	warmup   time.Duration
	decay    time.Duration
	penalty  time.Duration
	band     float64
	exponent float64
	floor    int
	tol      float64
	bound    float64 // ConsistentHash's bounded-load factor; 0: off
	events   func(Event)
	set      optionSet
}

// optionSet has one bit per option; a picker's constructor names the bits
// it accepts and newConfig rejects every other bit that is set.
type optionSet uint16

const (
	optClock optionSet = 1 << iota
	optRand
	optWarmup
	optDecay
	optPenalty
	optBand
	optExponent
	optFloor
	optTolerance
	optBounded
	optEvents
	optEnd // one past the last bit: newConfig checks every bit below it
)

// optionNames names each bit's option, for error messages.
var optionNames = [...]string{
	"WithClock", "WithRand", "WithWarmup", "WithDecay", "WithFailurePenalty",
	"WithBand", "WithExponent", "WithFloor", "WithTolerance", "WithBoundedLoad",
	"WithEvents",
}

func (s optionSet) String() string {
	for i, name := range optionNames {
		if s == 1<<i {
			return name
		}
	}
	return fmt.Sprintf("option(%#x)", uint16(s))
}

// optPicker is what every picker accepts: a clock and an events hook.
const optPicker = optClock | optEvents

// latencyOptions and fastestOptions are the bits the latency-aware pickers
// accept besides the clock.
const (
	latencyOptions = optDecay | optPenalty
	fastestOptions = latencyOptions | optBand | optExponent | optFloor | optTolerance
)

// newConfig applies opts for picker, which accepts the options in allowed,
// and checks the values every picker reads the same way. The latency
// options' ranges depend on the picker: see checkLatency and checkFastest.
func newConfig(picker string, allowed optionSet, opts []Option) (config, error) {
	c := config{now: time.Now}
	for i, o := range opts {
		if o == nil {
			return c, fmt.Errorf("balancer: %s: opts[%d] is nil: %w", picker, i, ErrInvalidConfig)
		}
		o.apply(&c)
	}
	for bit := optionSet(1); bit < optEnd; bit <<= 1 {
		if c.set&bit != 0 && allowed&bit == 0 {
			return c, fmt.Errorf("balancer: %s does not use %v: %w", picker, bit, ErrInvalidConfig)
		}
	}
	switch {
	case c.now == nil:
		return c, fmt.Errorf("balancer: %s: WithClock(nil): %w", picker, ErrInvalidConfig)
	case c.set&optEvents != 0 && c.events == nil:
		return c, fmt.Errorf("balancer: %s: WithEvents(nil): %w", picker, ErrInvalidConfig)
	case c.set&optRand != 0 && c.src == nil:
		return c, fmt.Errorf("balancer: %s: WithRand(nil): %w", picker, ErrInvalidConfig)
	case c.warmup < 0:
		return c, fmt.Errorf("balancer: %s: WithWarmup(%v): negative: %w", picker, c.warmup, ErrInvalidConfig)
	case c.set&optBounded != 0 && !(c.bound >= 1 && !math.IsInf(c.bound, 1)):
		return c, fmt.Errorf("balancer: %s: WithBoundedLoad(%v): the factor must be finite and at least 1: %w", picker, c.bound, ErrInvalidConfig)
	}
	return c, nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock makes the picker read the time from now instead of time.Now.
// The fail_timeout window, warm-up and latency decay all use it, so tests and
// simulations can drive a picker on a virtual clock. Every picker accepts
// it. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now; c.set |= optClock })
}

// WithRand makes a randomized picker (RoundRobin's starting point,
// RandomWeighted, P2CPeakEWMA, FastestFirst above 32 peers, Random,
// RandomTwo; see Algorithm.Random) draw from src. The picker serializes its use
// of src, so src itself need not be safe for concurrent use. Default: the
// runtime's per-thread generators, with no shared state, which no seed can
// reproduce.
func WithRand(src rand.Source) Option {
	return optionFunc(func(c *config) { c.src = src; c.set |= optRand })
}

// WithWarmup makes RandomWeighted ramp a new peer's weight up linearly over
// d, as Dubbo does: weight·uptime/d, clamped to [1, weight]. Default: 0, no
// warm-up.
func WithWarmup(d time.Duration) Option {
	return optionFunc(func(c *config) { c.warmup = d; c.set |= optWarmup })
}

// WithDecay sets the decay time τ of the peak EWMA of latency: a sample
// older by Δt weighs exp(−Δt/τ) as much as a new one, so an estimate
// forgets a peak in a few τ. A shorter τ follows changes faster and
// readmits a recovered peer sooner; a longer one is steadier. It must be
// positive. Default: DefaultDecay for P2CPeakEWMA, DefaultFastestDecay for
// FastestFirst, the two pickers that accept it.
func WithDecay(d time.Duration) Option {
	return optionFunc(func(c *config) { c.decay = d; c.set |= optDecay })
}

// WithFailurePenalty sets the least latency a failed attempt counts as, so
// that a peer that fails fast never looks fast: a failure enters the peak
// EWMA as max(its latency, d); FastestFirst raises it further, to a latency
// that puts the peer's weight at its floor. It must be positive. Default:
// DefaultFailurePenalty. P2CPeakEWMA and FastestFirst accept it.
func WithFailurePenalty(d time.Duration) Option {
	return optionFunc(func(c *config) { c.penalty = d; c.set |= optPenalty })
}

// WithBand sets FastestFirst's hysteresis factor h: a peer's weight is
// computed from its estimate e, and the weights are recomputed only when
// some estimate leaves its [e/h, e·h]. h must be in (1, 16]. Default:
// DefaultBand.
func WithBand(h float64) Option {
	return optionFunc(func(c *config) { c.band = h; c.set |= optBand })
}

// WithExponent sets α in FastestFirst's weight ∝ configured weight ×
// (tolerance·fastest/estimate)^α: 0 ignores latency, 1 weighs in inverse
// proportion to latency, higher values favor the fastest more. α must be in
// [0, 8]. Default: DefaultExponent.
func WithExponent(a float64) Option {
	return optionFunc(func(c *config) { c.exponent = a; c.set |= optExponent })
}

// WithFloor sets the least weight FastestFirst gives a peer configured with
// a weight, out of 100 for the best one. w must be in [1, 100]. Default:
// DefaultFloor.
func WithFloor(w int) Option {
	return optionFunc(func(c *config) { c.floor = w; c.set |= optFloor })
}

// WithTolerance sets how many times slower than the fastest peer a peer may
// look before FastestFirst lowers its weight. x must be in [1, 100].
// Default: DefaultTolerance.
func WithTolerance(x float64) Option {
	return optionFunc(func(c *config) { c.tol = x; c.set |= optTolerance })
}

// WithBoundedLoad makes ConsistentHash bound each peer's load, as in
// "Consistent Hashing with Bounded Loads" (Mirrokni, Thorup and
// Zadimoghaddam, 2016; HAProxy's hash-balance-factor, Envoy's
// hash_balance_factor): a peer of weight w takes an attempt only while it
// has fewer than ⌈c·(T+1)·w/L⌉ in flight, T the attempts in flight on the
// picker and L the weight of the peers not down (⌈c·(T+1)/n⌉ for equal
// weights), and a key whose point lands on a full peer walks on along the
// ring to the next point with room, without counting a try. So no peer
// holds more than c times its share (plus the rounding up), a hot key
// spills over to the next peers on its ring walk, and keys still move
// little when peers change. The bound does not apply to the round-robin
// fallback. c must be at least 1 and finite; default: no bound, nginx's
// behavior. ConsistentHash is the only picker that accepts it.
func WithBoundedLoad(c float64) Option {
	return optionFunc(func(cfg *config) { cfg.bound = c; cfg.set |= optBounded })
}

// checkLatency validates the options both latency-aware pickers accept and
// fills in their defaults, decay being the picker's own.
func (c *config) checkLatency(picker string, decay time.Duration) error {
	if c.set&optDecay == 0 {
		c.decay = decay
	} else if c.decay <= 0 {
		return fmt.Errorf("balancer: %s: WithDecay(%v): not positive: %w", picker, c.decay, ErrInvalidConfig)
	}
	if c.set&optPenalty == 0 {
		c.penalty = DefaultFailurePenalty
	} else if c.penalty <= 0 {
		return fmt.Errorf("balancer: %s: WithFailurePenalty(%v): not positive: %w", picker, c.penalty, ErrInvalidConfig)
	}
	return nil
}

// checkFastest validates FastestFirst's own options and fills in their
// defaults.
func (c *config) checkFastest() error {
	if c.set&optBand == 0 {
		c.band = DefaultBand
	} else if !(c.band > 1 && c.band <= 16) {
		return fmt.Errorf("balancer: FastestFirst: WithBand(%v): out of (1, 16]: %w", c.band, ErrInvalidConfig)
	}
	if c.set&optExponent == 0 {
		c.exponent = DefaultExponent
	} else if !(c.exponent >= 0 && c.exponent <= maxExponent) {
		return fmt.Errorf("balancer: FastestFirst: WithExponent(%v): out of [0, %d]: %w", c.exponent, maxExponent, ErrInvalidConfig)
	}
	if c.set&optFloor == 0 {
		c.floor = DefaultFloor
	} else if c.floor < 1 || c.floor > fastestScale {
		return fmt.Errorf("balancer: FastestFirst: WithFloor(%d): out of [1, %d]: %w", c.floor, fastestScale, ErrInvalidConfig)
	}
	if c.set&optTolerance == 0 {
		c.tol = DefaultTolerance
	} else if !(c.tol >= 1 && c.tol <= 100) {
		return fmt.Errorf("balancer: FastestFirst: WithTolerance(%v): out of [1, 100]: %w", c.tol, ErrInvalidConfig)
	}
	return nil
}
