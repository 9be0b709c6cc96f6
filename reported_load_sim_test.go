package balancer_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/sim"
)

// reportedPolicy is the picker a with WithReportedLoad(window, clients),
// built as the simulator's own policies are (its clock, its source).
func reportedPolicy(a balancer.Algorithm, window time.Duration, clients int) sim.Policy {
	return sim.Policy{Name: a.Name + "+reported", New: func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
		opts := []balancer.Option{balancer.WithClock(now), balancer.WithReportedLoad(window, clients)}
		if a.Random {
			opts = append(opts, balancer.WithRand(src))
		}
		return a.New(peers, opts...)
	}}
}

// What the reports buy in the simulator's fleets (ten M/M/1 backends whose
// speeds are redrawn every 0.25-1.75 s; 1, 16 and 64 clients, each with
// its own picker, every backend reporting its requests in flight), over
// seeds 0-9: LeastConn with WithReportedLoad(10 s, 16) has a p99 at least
// 1.5 times lower than LeastConn's and P2CPeakEWMA's with 16 clients, and
// 1.4 times with 64, and with 16 clients a window of 200 ms, ten times
// the mean latency, does at least 1.3 times worse than 10 s; with one
// client, each of the four pickers with
// WithReportedLoad(10 s, 1) runs exactly as without it (same p99 and
// mean), the reports showing no other client.
func TestReportedLoad_fleets(t *testing.T) {
	if testing.Short() || raceEnabled {
		// 4 s, 90 under the race detector; a simulation is
		// single-threaded, and the pickers' concurrent tests run under
		// it.
		t.Skip("simulates 10 × 60 s of three fleets")
	}
	alg := map[string]balancer.Algorithm{}
	for _, a := range balancer.Algorithms() {
		alg[a.Name] = a
	}
	p99 := func(scenario string, pols ...sim.Policy) []float64 {
		sc, ok := sim.Lookup(scenario)
		require.True(t, ok, scenario)
		rep, err := sim.Compare([]sim.Scenario{sc}, pols, sim.Options{Seeds: 10})
		require.NoError(t, err)
		var out []float64
		for _, m := range rep.Summaries[0] {
			out = append(out, m.P99.Mean, m.Mean.Mean)
		}
		return out
	}
	lc, p2c := sim.Policy{}, sim.Policy{}
	for _, p := range sim.Pickers() {
		switch p.Name {
		case "LeastConn":
			lc = p
		case "P2CPeakEWMA":
			p2c = p
		}
	}
	for _, tt := range []struct {
		scenario string
		factor   float64
	}{{"fleet16", 1.5}, {"fleet64", 1.4}} {
		r := p99(tt.scenario, reportedPolicy(alg["LeastConn"], 10*time.Second, 16), lc, p2c)
		t.Logf("%s p99: reported %.1f ms, LeastConn %.1f, P2CPeakEWMA %.1f", tt.scenario, r[0], r[2], r[4])
		assert.LessOrEqual(t, r[0]*tt.factor, r[2], "%s: against LeastConn", tt.scenario)
		assert.LessOrEqual(t, r[0]*tt.factor, r[4], "%s: against P2CPeakEWMA", tt.scenario)
	}
	r := p99("fleet16", reportedPolicy(alg["LeastConn"], 10*time.Second, 16), reportedPolicy(alg["LeastConn"], 200*time.Millisecond, 16))
	t.Logf("fleet16 p99: window 10 s %.1f ms, 200 ms %.1f", r[0], r[2])
	assert.LessOrEqual(t, r[0]*1.3, r[2], "fleet16: window 10 s against 200 ms")
	for _, name := range []string{"LeastConn", "RandomTwo", "P2CPeakEWMA", "FastestFirst"} {
		var off sim.Policy
		for _, p := range sim.Pickers() {
			if p.Name == name {
				off = p
			}
		}
		r := p99("fleet1", reportedPolicy(alg[name], 10*time.Second, 1), off)
		assert.Equal(t, r[2:4], r[0:2], "fleet1 %s: p99 and mean with the option, without", name)
	}
}
