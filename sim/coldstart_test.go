package sim

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// coldSeeds are the seeds the cold start's tests run.
var coldSeeds = []uint64{1, 2, 3, 4, 5}

// coldRuns returns each policy's runs of the cold start over coldSeeds, by
// name. The runs are on the virtual clock, so the same every time: they
// are made once for TestColdStart and TestColdStartControl, which read
// them and do not change them (each made its own, twice the time).
func coldRuns(t *testing.T) map[string][]*Result {
	t.Helper()
	_, out := scenarioRuns(t, coldStartName, coldSeeds)
	for _, p := range []string{"LeastConn", "SmoothWRR", "ReportedWRR", "ReportedWRR" + a58Suffix} {
		require.Len(t, out[p], len(coldSeeds), "the cold start runs %s", p)
	}
	return out
}

// TestColdStart is the cold start's target: over the 30 s of a client's
// start on servers of speeds 1, 1, 1, 1, 2, 2, 4, 4, ReportedWRR's p99,
// with A58's periods (a 10 s blackout) and with the simulator's short
// ones, stays within 1.5× LeastConn's in every seed, and each server's
// share of the attempts after 15 s (the weights counting since 10 s) is
// within 8 points of its share of the capacity, its speed over 16.
func TestColdStart(t *testing.T) {
	runs := coldRuns(t)
	from := int(15 * time.Second / Bucket)
	for _, p := range []string{"ReportedWRR", "ReportedWRR" + a58Suffix} {
		var ratios []float64
		for k, seed := range coldSeeds {
			r, lc := runs[p][k], runs["LeastConn"][k]
			ratio := float64(r.P99) / float64(lc.P99)
			ratios = append(ratios, ratio)
			assert.LessOrEqual(t, ratio, 1.5, "%s seed %d: p99 %v, LeastConn's %v", p, seed, r.P99, lc.P99)
			for i, v := range coldStartSpeeds {
				share, _ := r.Share(i, from, r.Buckets())
				assert.InDelta(t, v/16, share, 0.08, "%s seed %d: backend %d (speed %v)'s steady share", p, seed, i, v)
			}
			t.Logf("%s seed %d: p99 %v (LeastConn %v, %.2fx); steady shares %s", p, seed, r.P99.Round(time.Millisecond), lc.P99.Round(time.Millisecond), ratio, shares(r, from))
		}
		slices.Sort(ratios)
		t.Logf("%s: p99 over LeastConn's, median %.2f, range %.2f-%.2f over %d seeds", p, ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], len(ratios))
	}
}

// TestColdStartControl: the scenario can fail. Round robin (SmoothWRR over
// the equal weights) gives each slow server 1.36 times what it serves for
// the whole run, and its p99 is many times LeastConn's.
func TestColdStartControl(t *testing.T) {
	runs := coldRuns(t)
	for k, seed := range coldSeeds {
		r, lc := runs["SmoothWRR"][k], runs["LeastConn"][k]
		assert.Greater(t, float64(r.P99)/float64(lc.P99), 10.0, "SmoothWRR seed %d: p99 %v, LeastConn's %v", seed, r.P99, lc.P99)
	}
}

// shares formats r's share of attempts per backend from bucket from on.
func shares(r *Result, from int) string {
	var out []string
	for i := range r.Backends {
		s, _ := r.Share(i, from, r.Buckets())
		out = append(out, fmt.Sprintf("%.3f", s))
	}
	return strings.Join(out, " ")
}
