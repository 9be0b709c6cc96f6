package sim

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// guardSeeds are the seeds the done-when tests run.
var guardSeeds = []uint64{1, 2, 3}

// guardRuns runs scenario name's policies (its pickers and their guard
// variants) over guardSeeds and returns each policy's runs by name, made
// once for every test that reads them (scenarioRuns).
func guardRuns(t *testing.T, name string) (Scenario, map[string][]*Result) {
	t.Helper()
	sc, out := scenarioRuns(t, name, guardSeeds)
	for _, p := range GuardPickers {
		require.Contains(t, out, p, "the guard scenarios run %s", p)
	}
	return sc, out
}

// erlangB returns the probability that an M/M/c/c loss system turns an
// arrival away at offered load a (in Erlangs): B(c, a) by the recurrence
// B(0) = 1, B(k) = a·B(k−1) / (k + a·B(k−1)).
func erlangB(c int, a float64) float64 {
	b := 1.0
	for k := 1; k <= c; k++ {
		b = a * b / (float64(k) + a*b)
	}
	return b
}

// TestShedErlangB: a backend of c workers shedding at c jobs is an
// M/M/c/c loss system; with no retry, the share of requests that fail is
// Erlang's B, whatever the service-time distribution (B is insensitive to
// it).
func TestShedErlangB(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		backend Backend
		rate    float64
	}{
		{"M/M/1/1 at a=0.5", Backend{Workers: 1, Mean: 10 * ms, ShedAbove: 1}, 50},
		{"M/M/4/4 at a=3", Backend{Workers: 4, Mean: 40 * ms, ShedAbove: 4}, 75},
		{"lognormal M/G/4/4 at a=3", Backend{Workers: 4, Mean: 40 * ms, Dist: LogNormal, Sigma: 1, ShedAbove: 4}, 75},
	}
	p := policy(t, "SmoothWRR")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := single(tt.backend, tt.rate, 100*time.Second)
			sc.Tries = 1
			a := tt.rate * tt.backend.Mean.Seconds()
			want := erlangB(tt.backend.Workers, a)
			v := make([]float64, seeds)
			for i := range v {
				r, err := Run(&sc, p, uint64(i+1))
				require.NoError(t, err)
				v[i] = r.ErrorRate()
			}
			s := stat(v)
			ci := s.CI / tq(seeds-1) * t995
			assert.InDelta(t, want, s.Mean, ci, "shed share %v ± %v, Erlang B %v", s.Mean, ci, want)
		})
	}
}

// TestJoinAndWarmUp: a backend that joins at 1 s gets no attempt before
// it and its share after; a cold one serves at its warm-up's speed, Mean
// over Cold + (1 − Cold)(k + ½)/100 in step k.
func TestJoinAndWarmUp(t *testing.T) {
	ms := time.Millisecond
	// Unlimited workers and a nearly constant service time: a request's
	// latency is the mean service time when it arrives.
	b := Backend{Mean: 10 * ms, Dist: LogNormal, Sigma: 1e-6}
	late := b
	late.Join, late.Cold, late.WarmUp = time.Second, 0.1, 10*time.Second
	sc := Scenario{
		Name: "join", Backends: []Backend{b, late}, Rate: 400, Duration: 12 * time.Second,
		PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)}, Watch: -1,
		Measure: WindowP99,
		// The first step of the warm-up and the last.
		Window: Window{time.Second, time.Second + 100*ms},
		Before: Window{time.Second + 9900*ms, 11 * time.Second},
	}
	r, err := Run(&sc, policy(t, "RoundRobin"), 1)
	require.NoError(t, err)
	before, _ := r.Share(1, 0, 10)  // the first second, in buckets
	after, n := r.Share(1, 10, 120) // from the join on
	assert.Zero(t, before, "no attempt before the join")
	assert.InDelta(t, 0.5, after, 0.01, "round robin's half of %d attempts after it", n)
	step := func(k int) time.Duration {
		return time.Duration(float64(b.Mean) / (0.1 + 0.9*(float64(k)+0.5)/100))
	}
	assert.InDelta(t, float64(step(0)), float64(r.WindowP99), float64(ms)/10, "first step: %v", step(0))
	assert.InDelta(t, float64(step(99)), float64(r.BeforeP99), float64(ms)/10, "last step: %v", step(99))
}

// TestGuardScenarioPolicies: a guard scenario runs its pickers, each
// followed by its guards' variants, and only them; the others run every
// policy given.
func TestGuardScenarioPolicies(t *testing.T) {
	sc, ok := Lookup("retrystorm")
	require.True(t, ok)
	var names []string
	for _, p := range sc.Policies(Policies()) {
		names = append(names, p.Name)
	}
	assert.Equal(t, []string{
		"RoundRobin", "RoundRobin+budget", "RoundRobin+tightbudget",
		"SmoothWRR", "SmoothWRR+budget", "SmoothWRR+tightbudget",
		"LeastConn", "LeastConn+budget", "LeastConn+tightbudget",
		"P2CPeakEWMA", "P2CPeakEWMA+budget", "P2CPeakEWMA+tightbudget",
	}, names)
	u, _ := Lookup("uniform")
	assert.Len(t, u.Policies(Policies()), len(Policies()))
}

// TestRetryStorm is the retry storm's done-when: with each client's retry
// budget the load at the backends over the offered load stays within the
// budget's bound, 1 + ratio + minPerSecond / rate at each client's rate
// (retrybudget.Budget's derivation), where retrying on every peer multiplies it
// several times. Finagle's defaults at 70 requests a second per client
// allow 1.343, above the 1.2; TightBudget (10% + 5/s) allows
// 1.171 and stays within 1.2.
func TestRetryStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenario: skipped with -short")
	}
	sc, runs := guardRuns(t, "retrystorm")
	rate := sc.ArrivalRate() / float64(sc.Clients) // per client
	for _, p := range GuardPickers {
		for i, seed := range guardSeeds {
			plain, finagle, tight := runs[p][i], runs[p+"+budget"][i], runs[p+"+tightbudget"][i]
			// Without: a shed request knocks on several doors.
			assert.Greater(t, plain.Amplification(), 3.0, "%s seed %d: the storm", p, seed)
			assert.Zero(t, plain.BudgetRefused)
			for _, c := range []struct {
				r *Result
				b Budget
			}{{finagle, FinagleBudget}, {tight, TightBudget}} {
				bound := c.b.Bound(rate)
				// A window counts between 0.9 and 1 of its length
				// (retrybudget.Budget's tenths): at most a tenth of a
				// window's minimum more.
				slack := c.b.MinPerSecond * c.b.Window.Seconds() / 10 / (rate * sc.Window.seconds())
				assert.LessOrEqual(t, c.r.Amplification(), bound+slack, "%s seed %d: %v within the bound %.3f", c.r.Policy, seed, c.b, bound)
				// The storm uses the whole budget: the bound is reached.
				assert.Greater(t, c.r.Amplification(), bound-0.02, "%s seed %d", c.r.Policy, seed)
				assert.Positive(t, c.r.BudgetRefused)
			}
			assert.Greater(t, finagle.Amplification(), 1.2, "%s seed %d: Finagle's defaults miss 1.2 at %.0f/s per client", p, seed, rate)
			assert.LessOrEqual(t, tight.Amplification(), 1.2, "%s seed %d", p, seed)
		}
	}
}

// TestOutage is the 1 s outage's done-when: with a panic threshold of 50%
// under 1% of the requests arriving in the 10 s after the recovery fail;
// with an ejection cap of 50% none is refused for want of a live peer.
// The control, nginx's defaults: a client whose every peer failed within
// [5 s, 6 s) has none until the fail windows, 10 s from the failures,
// expire at about 15 s: of the window's 10 s, 9 refuse every request ("no
// live peer").
func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenario: skipped with -short")
	}
	_, runs := guardRuns(t, "outage1s")
	for _, p := range GuardPickers {
		for i, seed := range guardSeeds {
			r := runs[p][i]
			share := ratio(r.WindowFailed, r.WindowRequests)
			assert.InDelta(t, 0.9, share, 0.03, "%s seed %d: failed share after recovery", p, seed)
			assert.InDelta(t, share, ratio(r.WindowRefused, r.WindowRequests), 0.005, "%s seed %d: all of it refused", p, seed)
			g := runs[p+"+panic"][i]
			assert.Less(t, ratio(g.WindowFailed, g.WindowRequests), 0.01, "%s+panic seed %d: failed share after recovery", p, seed)
			// The outage itself fails as before: panic mode does not
			// hide a failure that is there.
			assert.Positive(t, g.Failed, "%s+panic seed %d", p, seed)
			// With at most half the peers out, a client always has one.
			assert.Zero(t, runs[p+"+ejectcap"][i].WindowRefused, "%s+ejectcap seed %d", p, seed)
		}
	}
}

// TestScaleUp is the scale-up's done-when: with slow start over the
// warm-up's 10 s (Envoy's formula, aggression 1: the weight rises
// linearly from 10%, as the cold backend's speed does) the p99 of the
// requests arriving during the warm-up stays within 1.2× the fleet's p99
// before the join, under every picker that takes slow start (RoundRobin
// ignores weights and refuses it), and below LeastConn's without it.
func TestScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenario: skipped with -short")
	}
	_, runs := guardRuns(t, "scaleup")
	assert.NotContains(t, runs, "RoundRobin+slowstart")
	for i, seed := range guardSeeds {
		for _, p := range []string{"SmoothWRR", "LeastConn", "P2CPeakEWMA"} {
			g := runs[p+"+slowstart"][i]
			assert.LessOrEqual(t, ratio64(g.WindowP99, g.BeforeP99), 1.2, "%s+slowstart seed %d: %v in the warm-up, %v before", p, seed, g.WindowP99, g.BeforeP99)
		}
		assert.Less(t, runs["LeastConn+slowstart"][i].WindowP99, runs["LeastConn"][i].WindowP99, "seed %d", seed)
	}
}

// TestScaleUpControl is the scale-up's control: without slow start the
// latency-blind pickers give the cold backend its full share at once, 70
// requests a second where it serves 10: its queue grows towards the 1 s
// timeout (which takes it out for fail_timeout) and the warm-up window's
// p99 is about twice the fleet's before the join or more, up to the
// timeout; LeastConn and P2CPeakEWMA, which send less to a slow peer,
// stay within 1.5×.
func TestScaleUpControl(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenario: skipped with -short")
	}
	_, runs := guardRuns(t, "scaleup")
	for i, seed := range guardSeeds {
		for _, p := range []string{"SmoothWRR", "RoundRobin"} {
			r := runs[p][i]
			assert.Greater(t, ratio64(r.WindowP99, r.BeforeP99), 1.8, "%s seed %d", p, seed)
		}
		for _, p := range []string{"LeastConn", "P2CPeakEWMA"} {
			r := runs[p][i]
			assert.Less(t, ratio64(r.WindowP99, r.BeforeP99), 1.5, "%s seed %d", p, seed)
		}
	}
}

// TestBudgetBound: the bound as retrybudget.Budget's doc derives it.
func TestBudgetBound(t *testing.T) {
	assert.InDelta(t, 1.2+10.0/70, FinagleBudget.Bound(70), 1e-12)
	assert.InDelta(t, 1.2, TightBudget.Bound(50), 1e-12)
	assert.True(t, math.IsInf(FinagleBudget.Bound(0), 1))
}

// TestGuardScenariosRefused: the new fields' bad values are ErrInvalid.
func TestGuardScenariosRefused(t *testing.T) {
	base := func() Scenario {
		return Scenario{Name: "g", Backends: tenWorkers(2), Load: 0.5, Duration: 10 * time.Second, Watch: -1}
	}
	tests := []struct {
		name string
		edit func(*Scenario)
	}{
		{"negative shedding", func(s *Scenario) { s.Backends[0].ShedAbove = -1 }},
		{"shedding across a network", func(s *Scenario) { s.Backends[0].ShedAbove, s.Backends[0].RTT = 4, time.Millisecond }},
		{"negative join", func(s *Scenario) { s.Backends[0].Join = -time.Second }},
		{"join after the end", func(s *Scenario) { s.Backends[0].Join = 10 * time.Second }},
		{"every backend late", func(s *Scenario) { s.Backends[0].Join, s.Backends[1].Join = time.Second, time.Second }},
		{"cold without warm-up", func(s *Scenario) { s.Backends[0].Cold = 0.5 }},
		{"warm-up without cold", func(s *Scenario) { s.Backends[0].WarmUp = time.Second }},
		{"cold above 1", func(s *Scenario) { s.Backends[0].Cold, s.Backends[0].WarmUp = 1.5, time.Second }},
		{"cold NaN", func(s *Scenario) { s.Backends[0].Cold, s.Backends[0].WarmUp = math.NaN(), time.Second }},
		{"guard without suffix", func(s *Scenario) { s.Guards = []Guard{{Budget: &FinagleBudget}} }},
		{"bad budget", func(s *Scenario) { s.Guards = []Guard{{Suffix: "+b", Budget: &Budget{-1, 10, time.Second}}} }},
		{"empty window", func(s *Scenario) { s.Measure = FailedShare }},
		{"window past the end", func(s *Scenario) { s.Measure, s.Window = FailedShare, Window{0, 11 * time.Second} }},
		{"no before-window", func(s *Scenario) { s.Measure, s.Window = WindowP99, Window{0, time.Second} }},
		{"unknown measure", func(s *Scenario) { s.Measure, s.Window = WindowP99+1, Window{0, time.Second} }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base()
			tt.edit(&s)
			_, err := Run(&s, policy(t, "SmoothWRR"), 1)
			assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
		})
	}
}

// TestBudgetCounts: each client's budget allows what retrybudget.Budget's rule
// gives, counted exactly where every attempt fails. Three backends fail
// every attempt fast, retries on (up to three attempts), 100 requests a
// second for 9 s, within the budget's first window (no entry leaves it).
// A reserve of 10 retries (1 a second over 10 s, no ratio) gives the first
// five requests two retries each and refuses the first retry of every
// other; a ratio of 0.5 and no reserve, half a retry a request.
func TestBudgetCounts(t *testing.T) {
	sc := Scenario{
		Name: "budget", Backends: tenWorkers(3), Rate: 100, Duration: 9 * time.Second,
		PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)}, Watch: -1,
	}
	for i := range sc.Backends {
		sc.Backends[i].Faults = []Fault{{From: 0, To: sc.Duration, Mode: FastError, Prob: 1}}
	}
	base := policy(t, "RoundRobin")
	reserve, ok := base.guarded(Guard{Suffix: "+reserve", Budget: &Budget{0, 1, 10 * time.Second}})
	require.True(t, ok)
	r, err := Run(&sc, reserve, 1)
	require.NoError(t, err)
	assert.Equal(t, r.Requests, r.Failed)
	assert.Equal(t, 10, r.Attempts-r.Requests, "retries")
	assert.Equal(t, r.Requests-5, r.BudgetRefused, "refused: all but the five that used the reserve")

	half, ok := base.guarded(Guard{Suffix: "+half", Budget: &Budget{0.5, 0, 10 * time.Second}})
	require.True(t, ok)
	r, err = Run(&sc, half, 1)
	require.NoError(t, err)
	assert.InDelta(t, float64(r.Requests)/2, float64(r.Attempts-r.Requests), 1, "retries: half the %d requests", r.Requests)

	plain, err := Run(&sc, base, 1)
	require.NoError(t, err)
	assert.Equal(t, 3*plain.Requests, plain.Attempts, "without a budget: every peer")
	assert.Zero(t, plain.BudgetRefused)
}
