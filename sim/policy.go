package sim

import (
	"math/rand/v2"
	"strings"
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

// Pickers returns the library's pickers (balancer.Algorithms, in its
// order, but for the keyed ones: the simulated requests carry no key), each configured as an operator would: the scenario's weights on
// every peer, nginx's failure defaults, and the picker's own defaults
// otherwise. Each gets the simulation's clock, and its random source if it
// draws random numbers.
func Pickers() []Policy {
	var ps []Policy
	for _, a := range balancer.Algorithms() {
		if a.Keyed {
			continue // the simulated requests carry no key
		}
		ps = append(ps, Policy{Name: a.Name, New: factory(a)})
	}
	return ps
}

// Oracles returns the reference policies: the clairvoyant
// shortest-expected-delay policy (the practical bound for every latency
// metric), the full-information one (the true requests in flight and
// current speeds at the pick, no clairvoyance: what server-side knowledge
// could reach) and the square-root split of the true current capacities
// (T*, the best any random split with fixed weights can do while nothing
// changes).
func Oracles() []Policy {
	return []Policy{
		{Name: OracleSED, oracle: newSED},
		{Name: OracleInfo, oracle: newInformed},
		{Name: OracleSplit, oracle: newSplit},
	}
}

// Policies returns the pickers followed by the oracles.
func Policies() []Policy { return append(Pickers(), Oracles()...) }

// PolicyByName returns the policy called name among Policies, matched
// without regard to case.
func PolicyByName(name string) (Policy, bool) {
	for _, p := range Policies() {
		if strings.EqualFold(p.Name, name) {
			return p, true
		}
	}
	return Policy{}, false
}

// factory adapts an algorithm's constructor to a Factory.
func factory(a balancer.Algorithm) Factory {
	return func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
		if a.Random {
			return a.New(peers, balancer.WithClock(now), balancer.WithRand(src))
		}
		return a.New(peers, balancer.WithClock(now))
	}
}
