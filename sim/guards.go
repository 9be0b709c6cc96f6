package sim

import (
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// Measure is the guard metric a scenario's table shows over its Window.
//
// The zero value is none. A Measure is a plain value, safe to share.
type Measure uint8

const (
	// NoMeasure shows no guard metric.
	NoMeasure Measure = iota
	// Amplification is the load at the backends over the offered load:
	// the attempts sent during the window over the requests arriving in
	// it, each also as a rate per second.
	Amplification
	// FailedShare is the share of the requests arriving in the window that
	// failed, and of those the picker refused at once (no live peer).
	FailedShare
	// WindowP99 is the p99 latency of the requests arriving in the window
	// beside that of the requests arriving in the scenario's Before
	// window, and their ratio.
	WindowP99
)

// Window is the interval [From, To) of arrival times a metric counts.
//
// The zero value is empty. A Window is a plain value, safe to share.
type Window struct {
	From, To time.Duration
}

// contains reports whether t (ns since the start) is inside the window.
func (w Window) contains(t int64) bool { return t >= int64(w.From) && t < int64(w.To) }

// seconds returns the window's length in seconds.
func (w Window) seconds() float64 { return (w.To - w.From).Seconds() }

// Budget is a retry budget each client of a run gets its own of,
// retrybudget.New's ratio, minimum per second and window, on the
// virtual clock: every request deposits, and a retry the budget refuses
// fails the request with the failed attempt's outcome, as balancerhttp's
// Transport and balancer.Attempts do.
//
// The zero value refuses every retry. A Budget is a plain value, safe to
// share.
type Budget struct {
	Ratio, MinPerSecond float64
	Window              time.Duration
}

// FinagleBudget is Finagle's RetryBudget defaults: 20% of the requests
// plus 10 retries a second, over 10 s.
var FinagleBudget = Budget{retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow}

// Bound returns the most attempts per request the budget allows a client
// sending rate requests a second, over a failure that lasts longer than
// the window: each request and ratio retries of it, plus MinPerSecond
// retries a second shared by rate requests, 1 + Ratio + MinPerSecond /
// rate.
func (b Budget) Bound(rate float64) float64 { return 1 + b.Ratio + b.MinPerSecond/rate }

// Guard is a variant of a picker that a guard scenario runs beside it:
// the picker named with Suffix appended, with Options after its own (a
// panic threshold, slow start) or each client with its own retry Budget.
//
// The zero value is no variant. A Guard is a plain value, safe to share
// between runs, which only read it.
type Guard struct {
	Suffix  string
	Options []balancer.Option
	Budget  *Budget
}

// Policies returns the policies Compare runs in s out of pols: all of
// them for a scenario that names no Pickers; otherwise those it names, in
// pols' order, each followed by its Guards' variants (a guard with picker
// options has none for an oracle or a +rif variant); a hedged variant of
// one it names (Hedged) runs too, without the guards.
func (s *Scenario) Policies(pols []Policy) []Policy {
	if s.Pickers == nil {
		return pols
	}
	var out []Policy
	for _, p := range pols {
		name, hedged := p.HedgeBase()
		if !hedged {
			name = p.Name
		}
		if !slices.ContainsFunc(s.Pickers, func(n string) bool { return strings.EqualFold(n, name) }) {
			continue
		}
		out = append(out, p)
		if hedged {
			continue // a hedged picker runs beside its plain one, unguarded
		}
		for _, g := range s.Guards {
			if v, ok := p.guarded(g); ok {
				out = append(out, v)
			}
		}
	}
	return out
}

// guarded returns p's variant under g, and false if g's options cannot
// be given to p (an oracle, a picker the library does not name, or one
// that refuses them: RoundRobin ignores weights, so takes no slow start).
func (p Policy) guarded(g Guard) (Policy, bool) {
	v := p
	v.Name = p.Name + g.Suffix
	if g.Budget != nil {
		b := *g.Budget
		v.budget = &b
	}
	if len(g.Options) == 0 {
		return v, true
	}
	a, err := balancer.AlgorithmNamed(p.Name)
	if err != nil || p.oracle != nil || p.fleet != nil {
		return Policy{}, false
	}
	extra := append(slices.Clip(tuned[a.Name]), g.Options...)
	if p.Probed != nil {
		q := Probed(a, extra...)
		q.Name, q.budget = v.Name, v.budget
		v = q
	} else {
		v.New = factory(a, extra...)
	}
	// A picker refuses an option it would ignore: try one.
	now := func() time.Time { return epoch }
	if _, err := v.New([]*balancer.Peer{balancer.NewPeer("try")}, now, rand.NewPCG(1, 1)); err != nil {
		return Policy{}, false
	}
	return v, true
}

// validateGuarded checks backend i's shedding, joining and warm-up.
func (s *Scenario) validateGuarded(i int) error {
	b := s.Backends[i]
	switch {
	case b.ShedAbove < 0 || b.ShedAbove > 0 && b.RTT > 0:
		return invalid("sim: scenario %q: backend %d: shedding above %d jobs (only positive, and only with no RTT: %v)", s.Name, i, b.ShedAbove, b.RTT)
	case b.Join < 0 || b.Join >= s.Duration && b.Join > 0:
		return invalid("sim: scenario %q: backend %d: joins at %v, outside the run's %v", s.Name, i, b.Join, s.Duration)
	case !(b.Cold >= 0 && b.Cold <= 1) || b.WarmUp < 0 || (b.Cold > 0) != (b.WarmUp > 0):
		return invalid("sim: scenario %q: backend %d: warm-up from %v of its speed over %v (need a speed in (0, 1] and a positive warm-up, or neither)", s.Name, i, b.Cold, b.WarmUp)
	}
	return nil
}

// validateGuards checks the scenario's joins, guards and measure.
func (s *Scenario) validateGuards() error {
	if !slices.ContainsFunc(s.Backends, func(b Backend) bool { return b.Join == 0 }) {
		return invalid("sim: scenario %q: every backend joins late: the pickers need one from the start", s.Name)
	}
	for _, g := range s.Guards {
		if g.Suffix == "" {
			return invalid("sim: scenario %q: a guard with no suffix", s.Name)
		}
		if b := g.Budget; b != nil {
			if _, err := retrybudget.New(b.Ratio, b.MinPerSecond, b.Window); err != nil {
				return invalid("sim: scenario %q: guard %s: %v", s.Name, g.Suffix, err)
			}
		}
	}
	bad := func(w Window) bool { return w.From < 0 || w.To <= w.From || w.To > s.Duration }
	switch {
	case s.Measure > WindowP99:
		return invalid("sim: scenario %q: unknown measure %d", s.Name, s.Measure)
	case s.Measure != NoMeasure && bad(s.Window):
		return invalid("sim: scenario %q: window %+v is empty or outside the run's %v", s.Name, s.Window, s.Duration)
	case s.Measure == WindowP99 && bad(s.Before):
		return invalid("sim: scenario %q: before-window %+v is empty or outside the run's %v", s.Name, s.Before, s.Duration)
	}
	return nil
}

// guardColumns returns the columns of s's guard metric, ci formatting a
// Stat with its interval.
func guardColumns(s *Scenario, ci func(Stat, int) string) []column {
	switch s.Measure {
	case Amplification:
		return []column{
			{"offered/s", func(m *Summary) string { return num(m.Offered.Mean, 0) }},
			{"attempts/s", func(m *Summary) string { return num(m.AttemptRate.Mean, 0) }},
			{"amplification", func(m *Summary) string { return ci(m.Amplification, 3) }},
		}
	case FailedShare:
		return []column{
			{"failed % in window", func(m *Summary) string { return ci(Stat{100 * m.WindowErrors.Mean, 100 * m.WindowErrors.CI}, 2) }},
			{"no live peer %", func(m *Summary) string { return num(100*m.WindowRefused.Mean, 2) }},
		}
	case WindowP99:
		return []column{
			{"p99 before ms", func(m *Summary) string { return ci(m.BeforeP99, 1) }},
			{"p99 window ms", func(m *Summary) string { return ci(m.WindowP99, 1) }},
			{"window/before", func(m *Summary) string { return ci(m.WindowP99Ratio, 2) }},
		}
	}
	return nil
}

// guardLegend explains s's guard columns, or is empty.
func guardLegend(s *Scenario) string {
	var what string
	switch s.Measure {
	case Amplification:
		what = "offered/s: requests arriving in the window per second; attempts/s: attempts sent to the backends during it per second; amplification: their ratio, the load at the backends over the offered load."
	case FailedShare:
		what = "failed % in window: the requests arriving in the window that failed; no live peer %: those the picker refused at once, every peer being out for failures."
	case WindowP99:
		what = "p99 before, p99 window ms: the p99 latency of the requests arriving before the change and in the window after it; window/before: their ratio."
	}
	return what
}

// guardSuffixes explains the names of the guards' variants.
const guardSuffixes = "A name's suffix is a guard: +budget gives each client a retry budget with Finagle's defaults (20% of the requests plus 10 retries a second over 10 s), +tightbudget one of 10% plus 5 a second; +panic a panic threshold of 50% (WithPanicThreshold), +ejectcap an ejection cap of 50% (WithMaxEjectionPercent); +slowstart slow start over 10 s (WithSlowStart, aggression 1, 10% of the weight at least); +a58 ReportedWRR with A58's periods (a blackout of 10 s, an update period of 1 s)."

// GuardPickers are the pickers the guard scenarios compare with and
// without each guard: nginx's default, the two latency-blind and
// latency-aware ones most used, and plain round robin.
var GuardPickers = []string{"SmoothWRR", "LeastConn", "P2CPeakEWMA", "RoundRobin"}

// TightBudget is a retry budget that keeps a retry storm's amplification
// within 1.2 for a client sending 50 requests a second or more (Bound:
// 1 + 0.1 + 5/50): 10% of the requests plus 5 retries a second, over
// 10 s.
var TightBudget = Budget{0.1, 5, 10 * time.Second}

// guardClients is the number of clients in the guard scenarios.
const guardClients = 10

// retryStorm is the fleet of the brownout (ten M/M/4 backends of 40 ms)
// shedding load above 8 jobs (4 in service, 4 waiting) when every backend
// runs 2× slower during [10 s, 40 s): 700 requests a second on 500 of
// capacity. nginx's failure accounting is off (max_fails=0: nginx does not
// count a 503 as a peer's failure unless told to), and every failed
// attempt is retried on another peer, up to one per backend: each shed
// request knocks on every door. Window: the slowdown.
func retryStorm() Scenario {
	s := Scenario{
		Name:        "retrystorm",
		Title:       "10 M/M/4 backends (40 ms) shedding at 8 jobs (fast errors), all 2× slower during [10 s, 40 s): 1.4× their capacity; retries on, max_fails=0; K=10",
		Backends:    tenWorkers(10),
		Load:        0.7,
		Clients:     guardClients,
		Duration:    50 * time.Second,
		PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)},
		Watch:       -1,
		Pickers:     GuardPickers,
		Guards: []Guard{
			{Suffix: "+budget", Budget: &FinagleBudget},
			{Suffix: "+tightbudget", Budget: &TightBudget},
		},
		Measure: Amplification,
		Window:  Window{10 * time.Second, 40 * time.Second},
	}
	for i := range s.Backends {
		s.Backends[i].ShedAbove = 8
		s.Backends[i].Phases = []Phase{{From: 10 * time.Second, To: 40 * time.Second, Factor: 2}}
	}
	return s
}

// outage is every backend of the brownout's fleet failing every attempt
// fast during [5 s, 6 s), under nginx's failure defaults (max_fails=1,
// fail_timeout=10 s): each client's every peer goes out, and stays out
// for its fail window after the backends recover. Window: the 10 s after
// the recovery.
func outage() Scenario {
	s := Scenario{
		Name:     "outage1s",
		Title:    "10 M/M/4 backends (40 ms), every one failing fast during [5 s, 6 s); nginx's max_fails=1, fail_timeout=10 s; K=10",
		Backends: tenWorkers(10),
		Load:     0.7,
		Clients:  guardClients,
		Duration: 20 * time.Second,
		Watch:    -1,
		Pickers:  GuardPickers,
		Guards:   outageGuards,
		Measure:  FailedShare,
		Window:   Window{6 * time.Second, 16 * time.Second},
	}
	for i := range s.Backends {
		s.Backends[i].Faults = []Fault{{From: 5 * time.Second, To: 6 * time.Second, Mode: FastError, Prob: 1}}
	}
	return s
}

// scaleUp is nine M/M/4 backends of 40 ms at 700 requests a second (load
// 0.78) joined at 20 s by a tenth, cold: at 10% of its speed, rising
// linearly to its full speed over 10 s. Before: [5 s, 20 s), the fleet
// without it; window: its warm-up, [20 s, 30 s).
func scaleUp() Scenario {
	s := Scenario{
		Name:     "scaleup",
		Title:    "9 M/M/4 backends (40 ms) at 700/s, joined at 20 s by a 10th at 10% of its speed rising linearly to 100% over 10 s; K=10",
		Backends: tenWorkers(10),
		Rate:     700,
		Clients:  guardClients,
		Duration: 40 * time.Second,
		Watch:    -1,
		Pickers:  GuardPickers,
		Guards:   scaleUpGuards,
		Measure:  WindowP99,
		Window:   Window{20 * time.Second, 30 * time.Second},
		Before:   Window{5 * time.Second, 20 * time.Second},
	}
	s.Backends[9].Join = 20 * time.Second
	s.Backends[9].Cold = 0.1
	s.Backends[9].WarmUp = 10 * time.Second
	return s
}

// The guards of the outage and the scale-up: a panic threshold of 50%
// (Envoy's default) or an ejection cap of 50% (at most half the peers out
// for failures), and slow start over 10 s (aggression 1, at least 10% of
// the weight: Envoy's defaults).
var (
	outageGuards = []Guard{
		{Suffix: "+panic", Options: []balancer.Option{balancer.WithPanicThreshold(50)}},
		{Suffix: "+ejectcap", Options: []balancer.Option{balancer.WithMaxEjectionPercent(50)}},
	}
	scaleUpGuards = []Guard{{Suffix: "+slowstart", Options: []balancer.Option{balancer.WithSlowStart(10*time.Second, 1, 10)}}}
)
