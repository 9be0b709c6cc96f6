package sim

import (
	"math/rand/v2"
	"slices"
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

// ProbedFactory builds the picker of one simulated client that balances by
// probes: as a Factory, with the client's prober, whose probes are events
// on the virtual clock (see Run). The picker may call the prober from its
// Pick, Done and Answer only: a run is one goroutine.
type ProbedFactory func(peers []*balancer.Peer, now func() time.Time, src rand.Source, prober balancer.Prober) (balancer.Picker, error)

// Policy is a named way to choose a backend for each attempt: a picker under
// test, built by New for every client, or an oracle, which reads the
// simulator's true state and so is not a Picker a real client could run.
//
// The zero value is not usable. A Policy is a plain value and is safe to
// share between runs.
type Policy struct {
	Name string
	New  Factory
	// Probed, when set, builds a picker that balances by probes, each
	// client's with its own prober; Run and Compare use it in place of
	// New, which then builds the same picker without a prober.
	Probed ProbedFactory

	// oracle builds an oracle's picker for one client of a run; nil for
	// ordinary pickers.
	oracle func(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker
	// fleet, when set, is the factory for a run with the given number of
	// clients, in place of New: for the pickers told how many clients
	// share the backends.
	fleet func(clients int) Factory
	// budget, when set, gives each client its own retry budget (a
	// guard's variant, see Guard).
	budget *Budget
	// hedge, when set, makes the policy's attempts hedged (hedge.go).
	hedge *Hedge
}

// IsOracle reports whether p is an oracle rather than a picker.
func (p Policy) IsOracle() bool { return p.oracle != nil }

// Pickers returns the library's pickers (balancer.Algorithms, in its
// order, but for the keyed ones: the simulated requests carry no key), each
// configured as an operator would: the scenario's weights on every peer,
// nginx's failure defaults, and the picker's own defaults otherwise, but
// for ReportedWRR, which gets the short settings of fastWRR. Each gets the
// simulation's clock, and its random source if it draws random numbers.
// A picker that balances by probes (it accepts a Prober, as Prequal's
// balancer.PrequalSettings) probes through each client's prober (see Probed).
// Then, for every picker that accepts balancer.WithReportedLoad, a variant
// named with ReportedSuffix that weighs the backends' reported requests in
// flight, with a window of ReportedLoadWindow and the scenario's true
// number of clients.
func Pickers() []Policy {
	var ps, aware []Policy
	for _, a := range balancer.Algorithms() {
		if a.Keyed {
			continue // the simulated requests carry no key
		}
		if slices.Contains(a.Options, "WithProber") {
			ps = append(ps, Probed(a, tuned[a.Name]...))
			continue
		}
		ps = append(ps, Policy{Name: a.Name, New: factory(a, tuned[a.Name]...)})
		if p, ok := reported(a, ReportedLoadWindow); ok {
			aware = append(aware, p)
		}
	}
	return append(ps, aware...)
}

// Reported returns the variant of the picker called base (as
// balancer.AlgorithmNamed finds it) that weighs the backends' reported
// requests in flight over the given window, told the scenario's number of
// clients (balancer.WithReportedLoad(window, clients)), named base +
// ReportedSuffix; false if base takes no WithReportedLoad. It returns an
// error for a window that is not positive.
func Reported(base string, window time.Duration) (Policy, bool, error) {
	if window <= 0 {
		return Policy{}, false, invalid("sim: reported-load window %v is not positive", window)
	}
	a, err := balancer.AlgorithmNamed(base)
	if err != nil {
		return Policy{}, false, nil
	}
	p, ok := reported(a, window)
	return p, ok, nil
}

func reported(a balancer.Algorithm, window time.Duration) (Policy, bool) {
	if a.Keyed || !slices.Contains(a.Options, "WithReportedLoad") {
		return Policy{}, false
	}
	with := func(clients int) Factory {
		return factory(a, balancer.WithReportedLoad(window, clients))
	}
	return Policy{Name: a.Name + ReportedSuffix, New: with(1), fleet: with}, true
}

// ReportedSuffix ends the name of a picker's variant that weighs the
// backends' reported requests in flight (balancer.WithReportedLoad):
// "LeastConn+rif".
const ReportedSuffix = "+rif"

// ReportedLoadWindow is the window the +rif variants fade a report over:
// 10 s, the window WithReportedLoad's doc gives for the fleet scenarios
// (many times their 10-30 ms latencies, longer than any of their speeds
// lasts). balance sim's -rif-window measures others.
const ReportedLoadWindow = 10 * time.Second

// fastWRR are ReportedWRR's settings in the simulator, the short ones its
// doc gives for capacities that change within seconds with a report on
// every reply (A58's blackout of 10 s and update period of 1 s would hold
// a weight over several redraws of a fleet's speeds): a report counts at
// once (no blackout), weights are recomputed every 100 ms (a tenth of the
// mean time between redraws, and of ReportWindow, the span the reports
// describe), and a weight expires 2 s after its peer's last report, long
// enough for a peer picked rarely to reply again.
var fastWRR = []balancer.Option{balancer.ReportedWRRSettings{
	BlackoutPeriod:         -1, // none
	WeightUpdatePeriod:     100 * time.Millisecond,
	WeightExpirationPeriod: 2 * time.Second,
}.Option()}

// tuned holds the options the simulator gives a picker beyond its clock
// and random source.
var tuned = map[string][]balancer.Option{"ReportedWRR": fastWRR}

// Oracles returns the reference policies: the clairvoyant
// shortest-expected-delay policy (the practical bound for every latency
// metric), the full-information one (the true requests in flight and
// current speeds at the pick, no clairvoyance: what server-side knowledge
// could reach) and the square-root split of the true current capacities
// (T*, the best any random split with fixed weights can do while nothing
// changes), and the full-information choice among the few backends a
// client probed at its previous pick, as they were then (what exact probe
// answers sent with the picks, as Prequal's are, would reach).
func Oracles() []Policy {
	return []Policy{
		{Name: OracleSED, oracle: newSED},
		{Name: OracleInfo, oracle: newInformed},
		{Name: OracleSplit, oracle: newSplit},
		{Name: OracleProbe, oracle: newProbed},
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
	return hedgeByName(name)
}

// Probed returns the policy of algorithm a, one that balances by probes:
// each client's picker gets the simulation's clock, its random source if
// it draws random numbers, the client's prober (balancer.PrequalSettings),
// whose probes are events on the virtual clock (see Run), and then extra.
// Its New builds the picker without a prober.
func Probed(a balancer.Algorithm, extra ...balancer.Option) Policy {
	return Policy{Name: a.Name, New: factory(a, extra...), Probed: func(peers []*balancer.Peer, now func() time.Time, src rand.Source, pr balancer.Prober) (balancer.Picker, error) {
		opts := []balancer.Option{balancer.WithClock(now), balancer.PrequalSettings{Prober: pr}.Option()}
		if a.Random {
			opts = append(opts, balancer.WithRand(src))
		}
		return a.New(peers, append(opts, extra...)...)
	}}
}

// factory adapts an algorithm's constructor to a Factory, with extra
// options after the clock and the random source.
func factory(a balancer.Algorithm, extra ...balancer.Option) Factory {
	return func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
		opts := []balancer.Option{balancer.WithClock(now)}
		if a.Random {
			opts = append(opts, balancer.WithRand(src))
		}
		return a.New(peers, append(opts, extra...)...)
	}
}
