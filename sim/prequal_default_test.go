package sim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrequalDefault is issue 27's bar for Prequal as the one fleet
// default, with its defaults, over seeds 1-3 (the mean of each seed's
// number, as balance sim prints it):
//
//   - no worse than P2CPeakEWMA's p99 and mean in every fleet scenario, the
//     two-zone ones (zones16, zones1) included;
//   - a p99 within 1.1× the best library picker's in fleet1, fleet16 and
//     fleet64 (every picker a client can run; the oracles are not);
//   - against the clairvoyant oracle (Oracle SED), what it reaches, as a
//     guard against regressions: under 2.2× in fleet16 and 3× in fleet64
//     (issue 27's targets of 1.5× and 2× are not met, see Prequal in
//     detail).
func TestPrequalDefault(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("255 runs of 60 s simulated: skipped with -short and -race")
	}
	names := []string{"fleet1", "fleet16", "fleet64", "zones16", "zones1"}
	var scs []Scenario
	for _, n := range names {
		scs = append(scs, mustLookup(t, n))
	}
	pols := append(Pickers(), policy(t, OracleSED))
	rep, err := Compare(scs, pols, Options{Seeds: 3, Seed: 1})
	require.NoError(t, err)
	for _, n := range names {
		pq, ok := rep.Find(n, "Prequal")
		require.True(t, ok)
		p2c, ok := rep.Find(n, "P2CPeakEWMA")
		require.True(t, ok)
		sed, ok := rep.Find(n, OracleSED)
		require.True(t, ok)
		best, bestP99 := "", math.Inf(1)
		for _, m := range rep.Summaries[slicesIndexOf(names, n)] {
			if !m.Oracle && m.P99.Mean < bestP99 {
				best, bestP99 = m.Policy, m.P99.Mean
			}
		}
		t.Logf("%s: Prequal mean %.2f p99 %.2f ms; P2CPeakEWMA %.2f, %.2f; best %s p99 %.2f (Prequal %.3f×); Oracle SED p99 %.2f (Prequal %.2f×)",
			n, pq.Mean.Mean, pq.P99.Mean, p2c.Mean.Mean, p2c.P99.Mean, best, bestP99, pq.P99.Mean/bestP99, sed.P99.Mean, pq.P99.Mean/sed.P99.Mean)
		assert.LessOrEqual(t, pq.P99.Mean, p2c.P99.Mean, "%s: p99 against P2CPeakEWMA", n)
		assert.LessOrEqual(t, pq.Mean.Mean, p2c.Mean.Mean, "%s: mean against P2CPeakEWMA", n)
		switch n {
		case "fleet1", "fleet16", "fleet64":
			assert.LessOrEqual(t, pq.P99.Mean, 1.1*bestP99, "%s: p99 against %s", n, best)
		}
		switch n {
		case "fleet16":
			assert.Less(t, pq.P99.Mean/sed.P99.Mean, 2.2, n)
		case "fleet64":
			assert.Less(t, pq.P99.Mean/sed.P99.Mean, 3.0, n)
		}
	}
}

// TestReportedWRRShiftingCapacities pins what docs/algorithms.md says of
// ReportedWRR where capacities change within seconds: in fleet16 and
// fleet64 (speeds redrawn every 0.25-1.75 s), with the simulator's short
// settings (fastWRR), its p99 is above RoundRobin's (seeds 1-3), while
// Prequal's is below both.
func TestReportedWRRShiftingCapacities(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("18 runs of 60 s simulated: skipped with -short and -race")
	}
	scs := []Scenario{mustLookup(t, "fleet16"), mustLookup(t, "fleet64")}
	pols := []Policy{policy(t, "ReportedWRR"), policy(t, "RoundRobin"), policy(t, "Prequal")}
	rep, err := Compare(scs, pols, Options{Seeds: 3, Seed: 1})
	require.NoError(t, err)
	for _, sc := range scs {
		wrr, _ := rep.Find(sc.Name, "ReportedWRR")
		rr, _ := rep.Find(sc.Name, "RoundRobin")
		pq, _ := rep.Find(sc.Name, "Prequal")
		var seeds []float64
		for _, r := range wrr.Runs {
			seeds = append(seeds, float64(r.P99)/1e6)
		}
		t.Logf("%s: ReportedWRR p99 %.0f ms (seeds %.0f), %.1f× RoundRobin's %.0f; Prequal %.0f",
			sc.Name, wrr.P99.Mean, seeds, wrr.P99.Mean/rr.P99.Mean, rr.P99.Mean, pq.P99.Mean)
		assert.Greater(t, wrr.P99.Mean, rr.P99.Mean, sc.Name)
		assert.Less(t, pq.P99.Mean, rr.P99.Mean/2, sc.Name)
	}
}

func slicesIndexOf(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}
