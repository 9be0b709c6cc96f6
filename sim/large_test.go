package sim

import (
	"testing"
	"time"
)

// TestLarge_sampledFastestFirst runs FastestFirst in its sampled mode (more
// than 32 peers: three peers drawn by derived weight, lock-free), which the
// built-in scenarios, all of 16 backends or fewer, never reach: 40 M/M/1
// backends of hetero's four speeds, one of the fastest ten times slower for
// its first 5 s, load 0.7. Its p99 must stay within 10% of P2CPeakEWMA's and
// LeastConn's (the exact O(n) least_conn scan), seed by seed, and far below
// SmoothWRR's static weights.
func TestLarge_sampledFastestFirst(t *testing.T) {
	if testing.Short() {
		t.Skip("a long simulation")
	}
	sc := Scenario{
		Name:     "hetero40",
		Title:    "40 M/M/1 backends, hetero's speeds four times over",
		Load:     0.7,
		Duration: 20 * time.Second,
		Watch:    9,
		Steady:   10 * time.Second,
	}
	for range 4 {
		for _, m := range []int{1, 1, 1, 1, 1, 1, 2, 2, 3, 4} {
			sc.Backends = append(sc.Backends, mm1(float64(m)*100, m))
		}
	}
	sc.Backends[9].Phases = []Phase{{From: 0, To: 5 * time.Second, Factor: 10}}
	p99 := map[string]time.Duration{}
	for _, seed := range []uint64{1, 2} {
		for _, name := range []string{"FastestFirst", "P2CPeakEWMA", "LeastConn", "SmoothWRR"} {
			pol, ok := PolicyByName(name)
			if !ok {
				t.Fatalf("no policy %s", name)
			}
			res, err := Run(&sc, pol, seed)
			if err != nil {
				t.Fatal(err)
			}
			if res.Failed != 0 {
				t.Errorf("seed %d, %s: %d of %d requests failed", seed, name, res.Failed, res.Requests)
			}
			p99[name] = res.P99
		}
		t.Logf("seed %d: p99 FastestFirst %v, P2CPeakEWMA %v, LeastConn %v, SmoothWRR %v",
			seed, p99["FastestFirst"], p99["P2CPeakEWMA"], p99["LeastConn"], p99["SmoothWRR"])
		for _, other := range []string{"P2CPeakEWMA", "LeastConn"} {
			if float64(p99["FastestFirst"]) > 1.1*float64(p99[other]) {
				t.Errorf("seed %d: FastestFirst's p99 %v is more than 10%% above %s's %v", seed, p99["FastestFirst"], other, p99[other])
			}
		}
		if 2*p99["FastestFirst"] > p99["SmoothWRR"] {
			t.Errorf("seed %d: FastestFirst's p99 %v is not below half of SmoothWRR's %v", seed, p99["FastestFirst"], p99["SmoothWRR"])
		}
	}
}
