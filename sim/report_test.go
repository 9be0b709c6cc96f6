package sim

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func shortReport(t *testing.T, names []string, pols []Policy, seeds int) *Report {
	t.Helper()
	var scs []Scenario
	for _, n := range names {
		s := mustLookup(t, n)
		s.Duration = 20 * time.Second
		scs = append(scs, s)
	}
	rep, err := Compare(scs, pols, Options{Seeds: seeds, Seed: 1})
	require.NoError(t, err)
	return rep
}

func TestChecks(t *testing.T) {
	wrr := policy(t, "SmoothWRR")
	rep := shortReport(t, []string{"hetero", "uniform", "brownout", "blackhole-fast", "herd"}, []Policy{wrr}, 2)
	// A picker against itself: every paired difference is exactly 0.
	checks, err := rep.Checks("SmoothWRR", "SmoothWRR", 10*time.Second)
	require.NoError(t, err)
	verdicts := map[string]bool{}
	for _, c := range checks {
		verdicts[c.Scenario+": "+c.Target] = c.Pass
	}
	want := map[string]bool{
		// Smooth round robin spreads arrivals more evenly than a random
		// split, so it beats T* on identical backends.
		"uniform: steady mean below T*":        true,
		"uniform: p99 no worse than SmoothWRR": true,
		// Equal is not better.
		"brownout: p99 better than SmoothWRR":       false,
		"blackhole-fast: p99 better than SmoothWRR": false,
		"herd: p99 no worse than SmoothWRR":         true,
		"herd: herding no worse than SmoothWRR":     true,
	}
	for k, v := range want {
		got, ok := verdicts[k]
		if assert.True(t, ok, "missing check %q", k) {
			assert.Equal(t, v, got, k)
		}
	}
	for _, k := range []string{"blackhole-fast: no sinkhole", "blackhole-fast: probe floor", "hetero: readmission within 3τ (τ=10s)"} {
		_, ok := verdicts[k]
		assert.True(t, ok, "missing check %q", k)
	}
	// The 20 s runs end before the brownout's recovery at 45 s: nothing
	// to readmit.
	_, ok := verdicts["brownout: readmission within 3τ (τ=10s)"]
	assert.False(t, ok, "readmission checked before the recovery")

	var b bytes.Buffer
	require.NoError(t, WriteChecks(&b, checks))
	assert.Contains(t, b.String(), "FAIL")
	assert.Contains(t, b.String(), "PASS")
	assert.True(t, strings.HasSuffix(b.String(), " checks pass\n"))

	_, err = rep.Checks("FastestFirstMissing", "SmoothWRR", time.Second)
	assert.Error(t, err)
}

func TestReportWrite(t *testing.T) {
	pols := append([]Policy{policy(t, "SmoothWRR")}, Oracles()...)
	rep := shortReport(t, []string{"hetero", "blackhole-stall"}, pols, 2)

	var md bytes.Buffer
	require.NoError(t, rep.Write(&md, true))
	out := md.String()
	assert.Contains(t, out, "### hetero\n")
	assert.Contains(t, out, "### blackhole-stall\n")
	assert.Contains(t, out, "| policy | mean ms | steady ms | p50 ms | p99 ms | p99.9 ms | errors % | readmit s | peak share | herd | churn |\n")
	assert.Contains(t, out, "| policy | mean ms | p50 ms | p99 ms | p99.9 ms | errors % | divert s | readmit s | peak share | herd | churn |\n")
	assert.Contains(t, out, "T* = 17.59 ms")
	for _, p := range pols {
		assert.Contains(t, out, "| "+p.Name+" | ")
	}
	assert.True(t, strings.HasSuffix(out, strings.Split(Legend, "\n")[5]+"\n"))

	var table bytes.Buffer
	require.NoError(t, rep.Write(&table, false))
	assert.Contains(t, table.String(), "hetero: 10 M/M/1 backends")
	assert.NotContains(t, table.String(), "|")
}
