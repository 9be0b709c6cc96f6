package balancer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Picker chooses an upstream peer for each attempt of a request and learns
// from the outcome of every attempt.
//
// The caller brackets each attempt: Pick returns a peer, the caller talks to
// it, then reports what happened with Done. Pick counts the attempt as in
// flight until Done.
type Picker interface {
	// Pick chooses the peer for the next attempt of r. A nil r is a request
	// that will not be retried. Pick never returns a nil peer with a nil
	// error.
	Pick(r *Request) (*Peer, error)

	// Done reports the outcome of one attempt on p, a peer Pick returned.
	// It returns ErrUnknownPeer for a peer this picker does not hold and
	// ErrNotInFlight when p has no attempt waiting for a report; both leave
	// the picker unchanged.
	Done(p *Peer, o Outcome) error
}

// Outcome is what the caller observed on one attempt.
type Outcome struct {
	// Failed reports whether the attempt counts as a failure of the peer,
	// as nginx counts a connection error, a timeout or a listed 5xx
	// (proxy_next_upstream). A 404 is usually not a failure.
	Failed bool

	// Latency is how long the attempt took. Only the latency-aware pickers
	// use it, but every picker rejects a negative value with
	// ErrInvalidLatency, so that a caller's bug shows whichever picker it
	// runs.
	Latency time.Duration
}

// Errors returned by pickers. Each is wrapped with details that name the
// offending value; test for them with errors.Is.
var (
	// ErrNoPeers is returned by Pick when the picker holds no peers.
	ErrNoPeers = errors.New("balancer: no peers configured")

	// ErrNoLivePeer is returned by Pick when every peer is down, inside its
	// fail window, at its max_conns limit or already tried by the request:
	// nginx's "no live upstreams".
	ErrNoLivePeer = errors.New("balancer: no live peer")

	// ErrTriesExhausted is returned by Pick when a request has already made
	// as many attempts as the picker has peers that are not down, the bound
	// nginx puts on proxy_next_upstream retries.
	ErrTriesExhausted = errors.New("balancer: tries exhausted")

	// ErrInvalidConfig is returned for a peer or option whose value is out
	// of range: an empty address, a negative weight, max_fails or
	// fail_timeout, weights whose sum overflows.
	ErrInvalidConfig = errors.New("balancer: invalid configuration")

	// ErrDuplicatePeer is returned when two peers share an address.
	ErrDuplicatePeer = errors.New("balancer: duplicate peer")

	// ErrPeerInUse is returned when a peer that belongs to a picker is
	// given to another one: balancing state is per picker.
	ErrPeerInUse = errors.New("balancer: peer belongs to another picker")

	// ErrUnknownPeer is returned for a peer the picker does not hold
	// (removed, never added, or belonging to another picker).
	ErrUnknownPeer = errors.New("balancer: unknown peer")

	// ErrNotInFlight is returned by Done when the peer has no attempt
	// waiting for a report, as for an outcome reported twice.
	ErrNotInFlight = errors.New("balancer: no attempt in flight")

	// ErrInvalidLatency is returned by Done for a negative latency.
	ErrInvalidLatency = errors.New("balancer: invalid latency")
)

// MaxWeightSum bounds the sum of the weights of one picker's peers. Smooth
// round-robin keeps current weights within a few multiples of the sum, and
// least-connections multiplies weights by connection counts, so the bound
// keeps all of that arithmetic far from overflow.
const MaxWeightSum = 1 << 30

// An Option configures a picker at construction. Every picker rejects, with
// ErrInvalidConfig, an option it would ignore.
type Option interface {
	apply(*config)
}

// config holds every picker's optional settings; defaultConfig has the
// defaults each option's doc states.
type config struct {
	now    func() time.Time
	src    rand.Source
	warmup time.Duration
	lat    latencyConfig // latency-aware pickers' tuning; see latency.go
	bound  float64       // ConsistentHash's bounded-load factor; 0: off
	set    optionSet
}

type optionSet uint8

const (
	optClock optionSet = 1 << iota
	optRand
	optWarmup
	optLatency // WithDecay, WithFailurePenalty
	optFastest // WithBand, WithExponent, WithFloor, WithTolerance
	optBounded // WithBoundedLoad
)

func (s optionSet) String() string {
	switch s {
	case optClock:
		return "WithClock"
	case optRand:
		return "WithRand"
	case optWarmup:
		return "WithWarmup"
	case optLatency:
		return "WithDecay/WithFailurePenalty"
	case optFastest:
		return "WithBand/WithExponent/WithFloor/WithTolerance"
	case optBounded:
		return "WithBoundedLoad"
	}
	return fmt.Sprintf("option(%d)", uint8(s))
}

func defaultConfig() config {
	return config{now: time.Now}
}

// newConfig applies opts and checks that each one is in allowed.
func newConfig(picker string, allowed optionSet, opts []Option) (config, error) {
	c := defaultConfig()
	for _, o := range opts {
		if o == nil {
			continue
		}
		o.apply(&c)
	}
	for bit := optionSet(1); bit != 0 && bit <= optBounded; bit <<= 1 {
		if c.set&bit != 0 && allowed&bit == 0 {
			return c, fmt.Errorf("balancer: %s does not use %v: %w", picker, bit, ErrInvalidConfig)
		}
	}
	if c.now == nil {
		return c, fmt.Errorf("balancer: WithClock(nil): %w", ErrInvalidConfig)
	}
	if c.set&optRand != 0 && c.src == nil {
		return c, fmt.Errorf("balancer: WithRand(nil): %w", ErrInvalidConfig)
	}
	if c.warmup < 0 {
		return c, fmt.Errorf("balancer: WithWarmup(%v): negative: %w", c.warmup, ErrInvalidConfig)
	}
	return c, nil
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithClock makes the picker read the time from now instead of time.Now.
// The fail_timeout window, warm-up and latency decay all use it, so tests and
// simulations can drive a picker on a virtual clock. Default: time.Now.
func WithClock(now func() time.Time) Option {
	return optionFunc(func(c *config) { c.now = now; c.set |= optClock })
}

// WithRand makes a randomized picker draw from src. The picker serializes its
// use of src, so src itself need not be safe for concurrent use. Default: a
// per-goroutine runtime generator with no shared state (math/rand/v2's
// top-level functions), which no seed can reproduce.
func WithRand(src rand.Source) Option {
	return optionFunc(func(c *config) { c.src = src; c.set |= optRand })
}

// WithWarmup makes RandomWeighted ramp a new peer's weight up linearly over
// d, as Dubbo does: weight·uptime/d, clamped to [1, weight]. Default: 0, no
// warm-up.
func WithWarmup(d time.Duration) Option {
	return optionFunc(func(c *config) { c.warmup = d; c.set |= optWarmup })
}
