package sim

import (
	"bytes"
	"fmt"
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
	assert.True(t, strings.HasSuffix(out, "\n- "+Legend[strings.LastIndex(Legend, "\n")+1:]+"\n- "+legendMore+"\n"))

	var table bytes.Buffer
	require.NoError(t, rep.Write(&table, false))
	assert.Contains(t, table.String(), "hetero: 10 M/M/1 backends")
	assert.NotContains(t, table.String(), "|")
}

// TestReportNotes: RoundRobin ignores the weights of the hetero scenario,
// so its slow backends' queues grow past the timeout, every peer ends up
// in its fail window and requests are refused at once. Its row gets a
// note with the refused fraction counted from the runs; rows without
// refusals get none.
func TestReportNotes(t *testing.T) {
	pols := []Policy{policy(t, "RoundRobin"), policy(t, "SmoothWRR")}
	rep := shortReport(t, []string{"hetero", "uniform"}, pols, 2)
	rr, ok := rep.Find("hetero", "RoundRobin")
	require.True(t, ok)
	var refused, requests int
	for _, r := range rr.Runs {
		refused += r.Refused
		requests += r.Requests
	}
	require.Positive(t, refused, "RoundRobin refused nothing in hetero")
	// Equal run lengths and arrivals: the mean of the per-run fractions is
	// close to the pooled fraction.
	pct := 100 * float64(refused) / float64(requests)

	for _, markdown := range []bool{true, false} {
		var b bytes.Buffer
		require.NoError(t, rep.Write(&b, markdown))
		out := b.String()
		assert.Contains(t, out, "RoundRobin [1]", "markdown=%v", markdown)
		assert.Equal(t, 1, strings.Count(out, "[1] RoundRobin: "), "markdown=%v", markdown)
		assert.NotContains(t, out, "[2]")
		assert.NotContains(t, out, "SmoothWRR [")
		i := strings.Index(out, "[1] RoundRobin: ")
		var got float64
		_, err := fmt.Sscanf(out[i:], "[1] RoundRobin: %f%%", &got)
		require.NoError(t, err)
		assert.InDelta(t, pct, got, 2, "refused %% in the note")
		// The note is under hetero's table, before uniform's.
		assert.Less(t, i, strings.Index(out, "uniform"))
	}
}

// TestReportTextLegend: every plain-text table is followed by a legend of
// its own columns, wrapped to textWidth.
func TestReportTextLegend(t *testing.T) {
	pols := append([]Policy{policy(t, "SmoothWRR")}, Oracles()...)
	rep := shortReport(t, []string{"hetero", "blackhole-stall", "uniform"}, pols, 2)
	var b bytes.Buffer
	require.NoError(t, rep.Write(&b, false))
	tables := strings.Split(b.String(), "\n\n")
	require.Len(t, tables, 3)
	for i, name := range []string{"hetero", "blackhole-stall", "uniform"} {
		tb := tables[i]
		require.True(t, strings.HasPrefix(tb, name+": "), tb)
		head := strings.Split(tb, "\n")[2]
		for _, col := range []string{"divert s", "readmit s", "peak share", "steady ms"} {
			legend := strings.Contains(tb, "\n  "+strings.TrimSuffix(col, " ms")+":") ||
				strings.Contains(tb, "; "+col+":")
			assert.Equal(t, strings.Contains(head, col), legend, "%s: column %q and its legend", name, col)
		}
		for _, entry := range []string{"\n  mean, p50, p99, p99.9 ms:", "\n  errors %:", "\n  herd:", "\n  churn:", "\n  Oracle SED"} {
			assert.Contains(t, tb, entry, name)
		}
		legend := tb[strings.Index(tb, "\n  mean, p50")+1:]
		for _, l := range strings.Split(strings.TrimSpace(legend), "\n") {
			assert.LessOrEqual(t, len(l), textWidth, "%q", l)
		}
	}
	assert.Contains(t, tables[1], "divert s: seconds from 15 s, when backend 4 is degraded")
	assert.Contains(t, tables[0], "readmit s: seconds from 5 s, when backend 9 recovers")
	assert.Contains(t, tables[0], "half its fair share of 23.5%") // weight 4 of 17
}

func TestWrap(t *testing.T) {
	var b bytes.Buffer
	wrap(&b, "aa bb cc dd", "> ", "  ", 8)
	assert.Equal(t, "> aa bb\n  cc dd\n", b.String())
	b.Reset()
	wrap(&b, "averyveryverylongword x", "", "", 5)
	assert.Equal(t, "averyveryverylongword\nx\n", b.String(), "a word longer than the width has a line of its own")
}
