package sim

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHedge_noHedgeIsPlain: a hedged run whose budget allows no hedge
// serves every attempt from its explicit queues exactly as the plain run
// serves it from the schedule drawn at the send: the same latencies,
// attempts, failures, picks and server time, bit for bit, across queueing
// backends, a network (zones16), shedding (retrystorm), stalls and faults,
// unlimited workers (linkerd), and the pickers that read the servers'
// reports and probes. The plain engine is the reference: the two share
// only the draws.
func TestHedge_noHedgeIsPlain(t *testing.T) {
	names := []string{"fleet16", "zones16", "retrystorm", "blackhole-stall", "blackhole-flaky", "linkerd"}
	if testing.Short() || raceEnabled {
		names = names[:2] // the run is one goroutine: -race finds nothing more
	}
	for _, name := range names {
		sc := mustLookup(t, name)
		sc.Duration = max(min(sc.Duration, 30*time.Second), sc.Window.To)
		for _, pn := range []string{"P2CPeakEWMA", "Prequal", "LeastConn+rif"} {
			p := policy(t, pn)
			off, err := Hedged(p, Hedge{Budget: 0})
			require.NoError(t, err)
			plain, err := Run(&sc, p, 7)
			require.NoError(t, err)
			h, err := Run(&sc, off, 7)
			require.NoError(t, err)
			assert.Equal(t, plain.Tail, h.Tail, "%s %s: latencies", name, pn)
			assert.Equal(t, plain.Mean, h.Mean, "%s %s: mean", name, pn)
			assert.Equal(t, [4]int{plain.Requests, plain.Failed, plain.Attempts, plain.FailedAttempts},
				[4]int{h.Requests, h.Failed, h.Attempts, h.FailedAttempts}, "%s %s: requests, failed, attempts, failed attempts", name, pn)
			assert.Equal(t, plain.ServiceTime, h.ServiceTime, "%s %s: server time", name, pn)
			assert.Equal(t, plain.Picks, h.Picks, "%s %s: picks", name, pn)
			assert.Equal(t, plain.Probes, h.Probes, "%s %s: probes", name, pn)
			assert.Zero(t, h.Hedges, "%s %s", name, pn)
		}
	}
}

// hedgePair is two backends of one worker each with nearly constant
// service times (a log-normal of shape 1e-9): backend 0 takes 1 s,
// backend 1 10 ms. SmoothWRR with weights 1 and 3 sends one request in
// four to backend 0 first; 4 requests a second make backend 0 busier
// than it can serve (1 a second at 1 s each) unless the hedges' cancels
// take its queue away.
func hedgePair() Scenario {
	return Scenario{
		Name: "hedgepair",
		Backends: []Backend{
			{Workers: 1, Mean: time.Second, Dist: LogNormal, Sigma: 1e-9, Weight: 1},
			{Workers: 1, Mean: 10 * time.Millisecond, Dist: LogNormal, Sigma: 1e-9, Weight: 3},
		},
		Rate:     4,
		Duration: 60 * time.Second,
		Timeout:  30 * time.Second,
		Watch:    -1,
	}
}

// TestHedge_cancel pins the cancellation model on hedgePair, where each
// outcome follows from the two service times: every request sent first to
// backend 0 is hedged 20 ms later to backend 1 while the budget (half the
// requests) allows, and the hedge wins, at 30 ms plus backend 1's short
// queue. The loser is cancelled then (no round trip): still waiting in
// backend 0's queue, it leaves it unserved (Cancelled); in service, it
// runs its whole second (HedgeWaste, 1 s each) unless Abort stops it at
// once.
func TestHedge_cancel(t *testing.T) {
	sc := hedgePair()
	for _, abort := range []bool{false, true} {
		pol, err := Hedged(policy(t, "SmoothWRR"), Hedge{Budget: 0.5, Delay: 20 * time.Millisecond, Abort: abort})
		require.NoError(t, err)
		r, err := Run(&sc, pol, 1)
		require.NoError(t, err)
		t.Logf("abort %v: %d requests, %d hedges (won %d, refused %d), %d losers left the queue, waste %v, p99 %v",
			abort, r.Requests, r.Hedges, r.HedgesWon, r.HedgesRefused, r.Cancelled, r.HedgeWaste, r.P99)
		// One in four goes to backend 0 first: about a quarter hedged
		// (the arrivals are Poisson: 3 standard deviations of a binomial
		// share over 240 requests, 0.084). A hedge loses only when the
		// first attempt went to backend 1 and waited there 20 ms.
		assert.InDelta(t, 0.25, float64(r.Hedges+r.HedgesRefused)/float64(r.Requests), 0.084, "abort %v: hedges asked for", abort)
		assert.LessOrEqual(t, r.Hedges-r.HedgesWon, 2, "abort %v: backend 1 answers before backend 0 almost every time", abort)
		assert.LessOrEqual(t, r.HedgesRefused, 2, "abort %v: refused only while the budget fills", abort)
		assert.Equal(t, r.Requests+r.Hedges, r.Attempts, "abort %v: no retry", abort)
		assert.Zero(t, r.Failed, "abort %v", abort)
		// Backend 0 serves only the refused ones to their end (1 s each),
		// and without Abort the losers in service when cancelled.
		served := time.Duration(r.Hedges-r.Cancelled) * time.Second
		if abort {
			// Stopped at the cancel, 30 ms after the send at most plus
			// backend 1's queue (at most a few of its 10 ms jobs).
			assert.LessOrEqual(t, r.HedgeWaste, time.Duration(r.Hedges)*60*time.Millisecond, "abort: waste")
			assert.Less(t, r.Cancelled, r.Hedges/10, "abort: backend 0 is free when the next request comes, most of the time")
		} else {
			assert.InDelta(t, float64(served), float64(r.HedgeWaste), float64(time.Millisecond), "waste: 1 s per loser in service")
			// Backend 0 holds a loser for 1 s after each request it
			// starts, and a request reaches it about every second: a
			// good share of them find it busy and leave its queue.
			assert.Greater(t, r.Cancelled, r.Hedges/4, "some requests find backend 0 busy with a loser and leave its queue")
		}
		// Every request hedged answers by 20 ms + backend 1's queue and
		// 10 ms: the p99 is far below backend 0's second.
		assert.Less(t, r.P99, 100*time.Millisecond, "abort %v: p99", abort)
	}
}

// TestHedge_budget: in the scenarios where hedging could amplify load (a
// fleet past its capacity and shedding, an outage, a brownout), the hedges
// stay within the default budget's 5% of the requests, and the error share
// does not rise (by more than 1% of itself); where the fleet sheds, the
// throttle holds hedges back and the attempts per request do not grow.
func TestHedge_budget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("60 runs of 20-60 s simulated")
	}
	var scs []Scenario
	for _, name := range []string{"retrystorm", "outage1s", "brownout", "fleet64", "blackhole-stall"} {
		scs = append(scs, mustLookup(t, name))
	}
	var pols []Policy
	for _, pn := range []string{"P2CPeakEWMA", "Prequal"} {
		p := policy(t, pn)
		h, err := Hedged(p, DefaultHedge)
		require.NoError(t, err)
		pols = append(pols, p, h)
	}
	rep, err := Compare(scs, pols, Options{Seeds: 3, Seed: 1})
	require.NoError(t, err)
	for si, sc := range rep.Scenarios {
		for _, m := range rep.Summaries[si] {
			if !m.Hedged {
				continue
			}
			plain, ok := rep.Find(sc.Name, strings.TrimSuffix(m.Policy, HedgeSuffix))
			require.True(t, ok)
			t.Logf("%s %s: hedges %.2f%% of requests, won %.1f%%; errors %.3f%% (plain %.3f%%); p99 %.1f ms (plain %.1f); attempts per request in the window %.3f (plain %.3f)",
				sc.Name, m.Policy, 100*m.HedgeShare.Mean, 100*m.HedgeWon.Mean, 100*m.ErrorRate.Mean, 100*plain.ErrorRate.Mean,
				m.P99.Mean, plain.P99.Mean, m.Amplification.Mean, plain.Amplification.Mean)
			for _, r := range m.Runs {
				assert.LessOrEqual(t, float64(r.Hedges)/float64(r.Requests), DefaultHedge.Budget, "%s %s seed %d: hedges per request", sc.Name, m.Policy, r.Seed)
				if sc.Measure == Amplification {
					assert.Positive(t, r.HedgesThrottled, "%s %s seed %d: throttled", sc.Name, m.Policy, r.Seed)
				}
			}
			assert.LessOrEqual(t, m.ErrorRate.Mean, plain.ErrorRate.Mean*1.01+0.0005, "%s %s: error share", sc.Name, m.Policy)
			assert.LessOrEqual(t, m.P99.Mean, plain.P99.Mean*1.01, "%s %s: p99", sc.Name, m.Policy)
			if sc.Measure == Amplification {
				// The fleet sheds: the throttle holds the hedges back,
				// and the load at the backends does not grow.
				assert.LessOrEqual(t, m.Amplification.Mean, plain.Amplification.Mean*1.01, "%s %s: amplification", sc.Name, m.Policy)
			}
		}
	}
}

// TestHedge_invalid: a hedge the simulator cannot run is refused with
// ErrInvalid, naming the value.
func TestHedge_invalid(t *testing.T) {
	p2c := policy(t, "P2CPeakEWMA")
	hedged, err := Hedged(p2c, DefaultHedge)
	require.NoError(t, err)
	for _, c := range []struct {
		p    Policy
		h    Hedge
		want string
	}{
		{policy(t, OracleSED), DefaultHedge, "oracle"},
		{hedged, Hedge{Budget: 0.6}, "0.6"},
		{p2c, Hedge{Budget: -0.01}, "-0.01"},
		{p2c, Hedge{Budget: 0.51}, "0.51"},
		{p2c, Hedge{Budget: math.NaN()}, "NaN"},
		{p2c, Hedge{Budget: math.Inf(1)}, "+Inf"},
		{p2c, Hedge{Budget: 0.05, Delay: -time.Millisecond}, "-1ms"},
	} {
		_, err := Hedged(c.p, c.h)
		require.Error(t, err, "%+v", c.h)
		assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
		assert.Contains(t, err.Error(), c.want)
	}
}

// TestHedge_names: the +hedge variants are found by name, whatever the
// case, and only of policies that exist and are not oracles.
func TestHedge_names(t *testing.T) {
	var names []string
	for _, p := range HedgePolicies() {
		names = append(names, p.Name)
		base, ok := p.HedgeBase()
		assert.True(t, ok)
		assert.Equal(t, p.Name, base+HedgeSuffix)
	}
	assert.Equal(t, []string{"P2CPeakEWMA+hedge", "FastestFirst+hedge", "LeastConn+rif+hedge", "Prequal+hedge"}, names)
	p, ok := PolicyByName("prequal+HEDGE")
	require.True(t, ok)
	assert.Equal(t, "Prequal+hedge", p.Name)
	for _, bad := range []string{"+hedge", "Nope+hedge", OracleSED + "+hedge", "P2CPeakEWMA+hedge+hedge"} {
		_, ok := PolicyByName(bad)
		assert.False(t, ok, bad)
	}
	_, ok = policy(t, "P2CPeakEWMA").HedgeBase()
	assert.False(t, ok)
	// Hedging a hedged policy again changes its hedge, not its name.
	again, err := Hedged(p, Hedge{Budget: 0.1})
	require.NoError(t, err)
	assert.Equal(t, "Prequal+hedge", again.Name)
	assert.Equal(t, Hedge{Budget: 0.1}, *again.hedge)
	assert.Equal(t, DefaultHedge, *p.hedge, "the first variant is left as it was")
}

// TestHedge_delayBound checks the hedging arithmetic where it is exact:
// backends without queues (unlimited workers) whose service times are
// exponential of mean m = 40 ms, every attempt hedged after a fixed d =
// 100 ms. A request then ends at min(S, d + S') for independent S, S', so
// past d its latency exceeds t with probability e^(−t/m)·e^(−(t−d)/m): its
// p99 is (m ln 100 + d)/2 = 142.1 ms against m ln 100 = 184.2 ms without
// hedging (1.30×, and 2× only with d = 0, every request sent twice). A
// share e^(−d/m) = 8.2% of the requests is hedged, and half the hedges
// win (S − d, given S > d, is again exponential of mean m).
func TestHedge_delayBound(t *testing.T) {
	const m, d = 40 * time.Millisecond, 100 * time.Millisecond
	sc := Scenario{Name: "nowait", Rate: 1000, Duration: 30 * time.Second, Watch: -1}
	for range 4 {
		sc.Backends = append(sc.Backends, Backend{Mean: m, Weight: 1})
	}
	pol, err := Hedged(policy(t, "RoundRobin"), Hedge{Budget: 0.5, Delay: d})
	require.NoError(t, err)
	plain, err := Run(&sc, policy(t, "RoundRobin"), 1)
	require.NoError(t, err)
	r, err := Run(&sc, pol, 1)
	require.NoError(t, err)
	ln100 := math.Log(100)
	wantPlain := time.Duration(float64(m) * ln100)
	want := time.Duration((float64(m)*ln100 + float64(d)) / 2)
	share := float64(r.Hedges) / float64(r.Requests)
	won := float64(r.HedgesWon) / float64(r.Hedges)
	t.Logf("p99 %v (derived %v), plain %v (derived %v); hedged %.2f%% (derived %.2f%%), won %.1f%%",
		r.P99, want, plain.P99, wantPlain, 100*share, 100*math.Exp(-2.5), 100*won)
	assert.InEpsilon(t, float64(wantPlain), float64(plain.P99), 0.05, "plain p99")
	assert.InEpsilon(t, float64(want), float64(r.P99), 0.05, "hedged p99")
	assert.InDelta(t, math.Exp(-float64(d)/float64(m)), share, 0.005, "hedged share")
	assert.InDelta(t, 0.5, won, 0.05, "won share")
	assert.Zero(t, r.HedgesRefused, "the budget of half the requests is never reached")
	assert.Zero(t, r.Cancelled, "nothing waits, so no loser leaves a queue")
}

// TestHedge_targets measures issue 28's simulator targets over 3 seeds:
// P2CPeakEWMA+hedge and Prequal+hedge against the same pickers in fleet16,
// fleet64 and brownout. What holds is pinned: hedging lowers the mean p99
// by at least minCut, within the 5% budget. The target of a 2× cut is not
// met (1.1-1.4×, logged): at a p95 delay the cut is bounded as
// TestHedge_delayBound derives (about 1.3× for exponential service), and
// queues and losers served to their end take part of that.
func TestHedge_targets(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("42 runs of 60 s simulated")
	}
	var scs []Scenario
	for _, name := range []string{"fleet16", "fleet64", "brownout"} {
		scs = append(scs, mustLookup(t, name))
	}
	var pols []Policy
	for _, name := range []string{"P2CPeakEWMA", "Prequal"} {
		p := policy(t, name)
		h, err := Hedged(p, DefaultHedge)
		require.NoError(t, err)
		a, err := Hedged(p, Hedge{Budget: DefaultHedge.Budget, Abort: true})
		require.NoError(t, err)
		a.Name += "/abort"
		pols = append(pols, p, h, a)
	}
	pols = append(pols, policy(t, OracleSED))
	rep, err := Compare(scs, pols, Options{Seeds: 3, Seed: 1})
	require.NoError(t, err)
	for _, c := range []struct {
		scenario, picker string
		minCut           float64
	}{
		{"fleet16", "P2CPeakEWMA", 1.15},
		{"fleet16", "Prequal", 1.05},
		{"fleet64", "P2CPeakEWMA", 1.15},
		{"fleet64", "Prequal", 1.05},
		{"brownout", "P2CPeakEWMA", 1.1},
		{"brownout", "Prequal", 1.1},
	} {
		plain, ok := rep.Find(c.scenario, c.picker)
		require.True(t, ok)
		h, ok := rep.Find(c.scenario, c.picker+HedgeSuffix)
		require.True(t, ok)
		sed, ok := rep.Find(c.scenario, OracleSED)
		require.True(t, ok)
		cut := plain.P99.Mean / h.P99.Mean
		t.Logf("%s %s: p99 %.1f ± %.1f ms, hedged %.1f ± %.1f ms: %.2f× cut; %.2f× Oracle SED's %.1f; hedges %.2f%%, won %.1f%%, wasted %.2f%%",
			c.scenario, c.picker, plain.P99.Mean, plain.P99.CI, h.P99.Mean, h.P99.CI, cut, h.P99.Mean/sed.P99.Mean, sed.P99.Mean,
			100*h.HedgeShare.Mean, 100*h.HedgeWon.Mean, 100*h.Waste.Mean)
		assert.GreaterOrEqual(t, cut, c.minCut, "%s %s: p99 cut", c.scenario, c.picker)
		// Servers that stop a loser in service (Abort) give the time back:
		// a little more of a cut, still short of 2×.
		abort, ok := rep.Find(c.scenario, c.picker+HedgeSuffix+"/abort")
		require.True(t, ok)
		t.Logf("%s %s: with Abort, hedged p99 %.1f ± %.1f ms: %.2f× cut, wasted %.2f%%",
			c.scenario, c.picker, abort.P99.Mean, abort.P99.CI, plain.P99.Mean/abort.P99.Mean, 100*abort.Waste.Mean)
		assert.LessOrEqual(t, abort.P99.Mean, h.P99.Mean*1.02, "%s %s: Abort's p99", c.scenario, c.picker)
		assert.Less(t, abort.Waste.Mean, h.Waste.Mean, "%s %s: Abort's waste", c.scenario, c.picker)
		for _, r := range h.Runs {
			assert.LessOrEqual(t, float64(r.Hedges)/float64(r.Requests), DefaultHedge.Budget, "%s %s seed %d: hedges", c.scenario, c.picker, r.Seed)
		}
	}
}

// TestHedge_fastestFirst: FastestFirst takes hedged losers for what they
// are (balancer.Outcome.Superseded), not for silence: hedging it raises
// neither the p99 nor the error share in the scenarios where, with each
// loser read as an abandoned attempt, three losses in a row floored
// healthy peers (uniform: p99 52 ms to 1.5 s, 23% of requests failed;
// brownout: 188 to 263 ms), and cuts the p99 of fleet16.
func TestHedge_fastestFirst(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("18 runs of 60 s simulated")
	}
	var scs []Scenario
	for _, name := range []string{"uniform", "brownout", "fleet16"} {
		scs = append(scs, mustLookup(t, name))
	}
	p := policy(t, "FastestFirst")
	h, err := Hedged(p, DefaultHedge)
	require.NoError(t, err)
	rep, err := Compare(scs, []Policy{p, h}, Options{Seeds: 3, Seed: 1})
	require.NoError(t, err)
	for _, sc := range rep.Scenarios {
		plain, ok := rep.Find(sc.Name, p.Name)
		require.True(t, ok)
		hedged, ok := rep.Find(sc.Name, h.Name)
		require.True(t, ok)
		t.Logf("%s: p99 %.1f ms, hedged %.1f (%.2fx cut); errors %.3f%%, hedged %.3f%%; hedges %.2f%%",
			sc.Name, plain.P99.Mean, hedged.P99.Mean, plain.P99.Mean/hedged.P99.Mean,
			100*plain.ErrorRate.Mean, 100*hedged.ErrorRate.Mean, 100*hedged.HedgeShare.Mean)
		assert.LessOrEqual(t, hedged.P99.Mean, plain.P99.Mean, "%s: p99", sc.Name)
		assert.LessOrEqual(t, hedged.ErrorRate.Mean, plain.ErrorRate.Mean, "%s: error share", sc.Name)
		assert.LessOrEqual(t, hedged.HedgeShare.Mean, DefaultHedge.Budget, "%s: hedges per request", sc.Name)
	}
}
