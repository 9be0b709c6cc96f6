package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// quick are flags that keep a sim run small.
var quick = []string{"sim", "-duration", "20s", "-seeds", "2"}

func simArgs(extra ...string) []string { return append(append([]string{}, quick...), extra...) }

func TestSimMarkdownStable(t *testing.T) {
	args := simArgs("-scenario", "uniform,blackhole-fast", "-pickers", "SmoothWRR,Oracle SED", "-format", "markdown")
	code, out, errOut := exec(args, "")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "### uniform\n")
	assert.Contains(t, out, "### blackhole-fast\n")
	assert.Contains(t, out, "| SmoothWRR | ")
	assert.Contains(t, out, "| Oracle SED | ")
	code, again, _ := exec(args, "")
	require.Equal(t, 0, code)
	assert.Equal(t, out, again, "same flags, different bytes")
	code, parallel, _ := exec(append(args, "-j", "1"), "")
	require.Equal(t, 0, code)
	assert.Equal(t, out, parallel, "output depends on -j")
}

func TestSimCheck(t *testing.T) {
	code, out, errOut := exec(simArgs("-check", "-scenario", "uniform,brownout",
		"-candidate", "SmoothWRR", "-baseline", "SmoothWRR"), "")
	// SmoothWRR is not better than itself in the brownout: one check fails.
	assert.Equal(t, 1, code, errOut)
	assert.Contains(t, out, "candidate SmoothWRR, baseline SmoothWRR, 2 seeds\n")
	assert.Contains(t, out, "PASS  uniform")
	assert.Contains(t, out, "FAIL  brownout")
	assert.True(t, strings.HasSuffix(out, " checks pass\n"), out)
}

func TestSimSeries(t *testing.T) {
	code, out, errOut := exec([]string{"sim", "-duration", "20s", "-series", "-scenario", "brownout", "-pickers", "SmoothWRR"}, "")
	require.Equal(t, 0, code, errOut)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A header, the column names and one line per 500 ms window.
	require.Len(t, lines, 2+40)
	assert.Equal(t, "# brownout, SmoothWRR, seed 1: share of attempts per backend, by window start", lines[0])
	assert.True(t, strings.HasPrefix(lines[2], "0.0\t"), lines[2])
}

func TestSimList(t *testing.T) {
	code, out, _ := exec([]string{"sim", "-list"}, "")
	require.Equal(t, 0, code)
	for _, name := range []string{"hetero", "brownout", "blackhole-stall", "herd", "SmoothWRR", "Oracle split", "Prequal+hedge"} {
		assert.Contains(t, out, name)
	}
}

func TestSimBadUsage(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown scenario", []string{"sim", "-scenario", "nope"}, `unknown scenario "nope"`},
		{"unknown picker", []string{"sim", "-pickers", "Nope"}, `unknown picker "Nope"`},
		{"keyed picker", []string{"sim", "-pickers", "consistenthash"}, `ConsistentHash routes by key, and the simulated requests carry none`},
		{"unknown format", []string{"sim", "-format", "csv"}, `unknown format "csv"`},
		{"no seeds", []string{"sim", "-seeds", "0"}, "-seeds 0"},
		{"argument", []string{"sim", "extra"}, `unexpected argument "extra"`},
		{"bad flag", []string{"sim", "-nope"}, "flag provided but not defined"},
		{"rif window 0", []string{"sim", "-rif-window", "0s"}, "-rif-window 0s: the window must be positive"},
		{"rif window unused", []string{"sim", "-pickers", "LeastConn", "-rif-window", "1s"}, "no chosen picker reads reported counts"},
		{"hedge without variant", []string{"sim", "-pickers", "SmoothWRR", "-hedge"}, "none of the chosen pickers has a +hedge variant"},
		{"hedge budget", []string{"sim", "-hedge", "-hedge-budget", "0.6"}, "-hedge-budget 0.6: the share of requests hedged must be in [0, 0.5]"},
		{"hedge budget NaN", []string{"sim", "-hedge", "-hedge-budget", "NaN"}, "-hedge-budget NaN"},
		{"hedge delay 0", []string{"sim", "-hedge", "-hedge-delay", "0s"}, "-hedge-delay 0s: the delay must be positive"},
		{"hedge delay unused", []string{"sim", "-pickers", "P2CPeakEWMA", "-hedge-delay", "10ms"}, "-hedge-delay 10ms: no chosen picker hedges"},
		{"hedge abort unused", []string{"sim", "-pickers", "P2CPeakEWMA", "-hedge-abort"}, "-hedge-abort: no chosen picker hedges"},
		{"unknown hedged picker", []string{"sim", "-pickers", "SmoothWRR+hedgex"}, `unknown picker "SmoothWRR+hedgex"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errOut := exec(tt.args, "")
			assert.Equal(t, 2, code)
			assert.Contains(t, errOut, tt.want)
		})
	}
}

// TestSimNoReports: without load reports, ReportedWRR runs as SmoothWRR
// and a +rif variant as its picker (their contracts), row for row; with
// them, the fleet's rows differ.
func TestSimNoReports(t *testing.T) {
	rows := func(extra ...string) map[string]string {
		code, out, errOut := exec(simArgs(append([]string{"-scenario", "fleet16", "-format", "markdown",
			"-pickers", "SmoothWRR,ReportedWRR,LeastConn,LeastConn+rif"}, extra...)...), "")
		require.Equal(t, 0, code, errOut)
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if name, rest, ok := strings.Cut(strings.TrimPrefix(l, "| "), " | "); ok && strings.HasPrefix(l, "| ") {
				m[name] = rest
			}
		}
		return m
	}
	off := rows("-no-reports")
	assert.Equal(t, off["SmoothWRR"], off["ReportedWRR"])
	assert.Equal(t, off["LeastConn"], off["LeastConn+rif"])
	on := rows()
	assert.NotEqual(t, on["SmoothWRR"], on["ReportedWRR"])
	assert.NotEqual(t, on["LeastConn"], on["LeastConn+rif"])
	assert.Equal(t, off["LeastConn"], on["LeastConn"], "LeastConn reads no report")
}

// TestSimCheckProbing: -check with a candidate that balances by probes
// adds its own targets (the oracle's factor, FastestFirst's share of a
// fast-failing backend, probes per request), running the policies they
// compare with.
func TestSimCheckProbing(t *testing.T) {
	code, out, errOut := exec(simArgs("-check", "-scenario", "fleet16,fastfail16", "-candidate", "Prequal"), "")
	require.Contains(t, []int{0, 1}, code, errOut)
	assert.Contains(t, out, "candidate Prequal, baseline P2CPeakEWMA, 2 seeds\n")
	assert.Regexp(t, `(PASS|FAIL)  fleet16 +p99 within 1\.5× Oracle SED +[0-9.]+ vs [0-9.]+ ms`, out)
	assert.Regexp(t, `(PASS|FAIL)  fastfail16 +fast-failing backend's share no more than under FastestFirst +backend 4: `, out)
	assert.Regexp(t, `(PASS|FAIL)  fleet16 +at most 3 probes per request`, out)
	assert.NotContains(t, out, "fastfail16  p99 within")
}

// TestSimGuardScenario: a guard scenario's table has its measure's
// columns and each picker's guard variants beside it, and only its
// pickers.
func TestSimGuardScenario(t *testing.T) {
	code, out, errOut := exec([]string{"sim", "-scenario", "outage1s", "-seeds", "1", "-pickers", "SmoothWRR,FastestFirst", "-format", "markdown"}, "")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "| policy | mean ms | p50 ms | p99 ms | p99.9 ms | errors % | failed % in window | no live peer % |")
	assert.Contains(t, out, "| SmoothWRR [1] | ")
	assert.NotContains(t, out, "FastestFirst")
	code, _, errOut = exec([]string{"sim", "-scenario", "outage1s", "-pickers", "FastestFirst"}, "")
	assert.Equal(t, 2, code)
	assert.Contains(t, errOut, "scenario outage1s runs only SmoothWRR, LeastConn, P2CPeakEWMA, RoundRobin")
	code, _, errOut = exec([]string{"sim", "-duration", "15s", "-seeds", "1", "-pickers", "SmoothWRR"}, "")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "left out outage1s: its window ends at 16s, after -duration 15s")
}

// TestSimHedge: -hedge runs each chosen picker that has one beside its
// +hedge variant, and the tables add the hedge columns, which a run
// without a hedged picker does not have; a +hedge picker named alone
// takes -hedge-delay and -hedge-budget, and with a budget of 0 its row is
// its plain picker's but for the name and the hedge columns.
func TestSimHedge(t *testing.T) {
	rows := func(args ...string) (map[string]string, string) {
		code, out, errOut := exec(simArgs(append([]string{"-scenario", "fleet16", "-format", "markdown"}, args...)...), "")
		require.Equal(t, 0, code, errOut)
		m := map[string]string{}
		for _, l := range strings.Split(out, "\n") {
			if name, rest, ok := strings.Cut(strings.TrimPrefix(l, "| "), " | "); ok && strings.HasPrefix(l, "| ") {
				m[name] = rest
			}
		}
		return m, out
	}
	m, out := rows("-pickers", "P2CPeakEWMA,SmoothWRR", "-hedge")
	assert.Contains(t, m, "P2CPeakEWMA+hedge")
	assert.NotContains(t, m, "SmoothWRR+hedge")
	assert.Contains(t, out, "| hedges % | won % | wasted % |")
	assert.Contains(t, out, "+hedge: the picker with hedged attempts")
	_, plain := rows("-pickers", "P2CPeakEWMA,SmoothWRR")
	assert.NotContains(t, plain, "hedges %")

	off, _ := rows("-pickers", "P2CPeakEWMA,P2CPeakEWMA+hedge", "-hedge-budget", "0", "-hedge-delay", "5ms")
	hedged := strings.Split(off["P2CPeakEWMA+hedge"], " | ")
	base := strings.Split(off["P2CPeakEWMA"], " | ")
	require.Equal(t, len(base), len(hedged))
	// policy columns up to errors %, then the hedge columns, herd, churn.
	assert.Equal(t, base[:len(base)-5], hedged[:len(hedged)-5], "no hedge allowed: the plain picker's row")
	assert.Equal(t, []string{"0.00", "0.0", "0.00"}, hedged[len(hedged)-5:len(hedged)-2])

	// -rif-window reaches a +rif picker's hedged variant, named or added.
	short, _ := rows("-pickers", "LeastConn+rif,LeastConn+rif+hedge", "-rif-window", "100ms", "-hedge-budget", "0")
	added, _ := rows("-pickers", "LeastConn+rif", "-hedge", "-rif-window", "100ms", "-hedge-budget", "0")
	long, _ := rows("-pickers", "LeastConn+rif,LeastConn+rif+hedge", "-hedge-budget", "0")
	assert.Equal(t, short["LeastConn+rif"], short["LeastConn+rif+hedge"])
	assert.Equal(t, short["LeastConn+rif+hedge"], added["LeastConn+rif+hedge"])
	assert.NotEqual(t, short["LeastConn+rif+hedge"], long["LeastConn+rif+hedge"], "the window changes the run")
}
