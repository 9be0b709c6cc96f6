package sim

import (
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
)

// Factory builds the picker of one simulated client over its own peers. now
// is the simulation's virtual clock and src a random source seeded for this
// client, run and seed; a factory passes them on with balancer.WithClock and
// balancer.WithRand to the pickers that accept them (each picker rejects
// options it would ignore, so the factory knows which).
type Factory func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error)

// Policy is a named way to choose a backend for each attempt: a picker under
// test, built by New for every client, or an oracle, which reads the
// simulator's true state and so is not a Picker a real client could run.
//
// The zero value is not usable. A Policy is a plain value and is safe to
// share between runs.
type Policy struct {
	Name string
	New  Factory

	// oracle builds an oracle's picker for one client of a run; nil for
	// ordinary pickers.
	oracle func(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker
}

// IsOracle reports whether p is an oracle rather than a picker.
func (p Policy) IsOracle() bool { return p.oracle != nil }

// Pickers returns the library's pickers in the order the reports list them,
// each configured as an operator would: the scenario's weights on every
// peer, nginx's failure defaults, and the picker's own defaults otherwise.
func Pickers() []Policy {
	// One line per picker. The adapters pass on the clock, and the random
	// source where the picker takes one.
	return []Policy{
		{Name: "RoundRobin", New: clockedRand(balancer.NewRoundRobin)},
		{Name: "SmoothWRR", New: clocked(balancer.NewSmoothWRR)},
		{Name: "RandomWeighted", New: clockedRand(balancer.NewRandomWeighted)},
		{Name: "LeastConn", New: clocked(balancer.NewLeastConn)},
		{Name: "P2CPeakEWMA", New: clockedRand(balancer.NewP2CPeakEWMA)},
		{Name: "FastestFirst", New: clocked(balancer.NewFastestFirst)},
	}
}

// Oracles returns the two reference policies: the clairvoyant
// shortest-expected-delay policy (the practical bound for every latency
// metric) and the square-root split of the true current capacities (T*,
// the best any random split with fixed weights can do while nothing
// changes).
func Oracles() []Policy {
	return []Policy{
		{Name: OracleSED, oracle: newSED},
		{Name: OracleSplit, oracle: newSplit},
	}
}

// Policies returns the pickers followed by the oracles.
func Policies() []Policy { return append(Pickers(), Oracles()...) }

// PolicyByName returns the policy called name among Policies.
func PolicyByName(name string) (Policy, bool) {
	for _, p := range Policies() {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// ctor is the shape of every picker constructor in the library.
type ctor[T balancer.Picker] func(peers []*balancer.Peer, opts ...balancer.Option) (T, error)

// clocked adapts a constructor that accepts WithClock only.
func clocked[T balancer.Picker](c ctor[T]) Factory {
	return func(peers []*balancer.Peer, now func() time.Time, _ rand.Source) (balancer.Picker, error) {
		return c(peers, balancer.WithClock(now))
	}
}

// clockedRand adapts a constructor that accepts WithClock and WithRand.
func clockedRand[T balancer.Picker](c ctor[T]) Factory {
	return func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
		return c(peers, balancer.WithClock(now), balancer.WithRand(src))
	}
}
