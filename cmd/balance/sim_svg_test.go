package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSimSVG: -svg writes three charts per scenario when FastestFirst runs
// (two otherwise) and leaves the tables on standard output unchanged.
func TestSimSVG(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "charts")
	args := []string{"sim", "-duration", "10s", "-seeds", "1", "-scenario", "brownout,uniform", "-pickers", "SmoothWRR,FastestFirst"}
	code, plain, errOut := exec(args, "")
	require.Equal(t, 0, code, errOut)
	code, out, errOut := exec(append(args, "-svg", dir), "")
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, plain, out, "-svg changes the tables")
	assert.Contains(t, errOut, "wrote 6 charts to "+dir)
	for _, name := range []string{"brownout-share.svg", "brownout-latency.svg", "brownout-weights.svg", "uniform-share.svg", "uniform-latency.svg", "uniform-weights.svg"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		assert.True(t, strings.HasPrefix(string(b), "<svg "), name)
		assert.True(t, strings.HasSuffix(string(b), "</svg>\n"), name)
	}

	code, _, errOut = exec([]string{"sim", "-duration", "5s", "-seeds", "1", "-scenario", "uniform", "-pickers", "SmoothWRR", "-svg", t.TempDir()}, "")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, errOut, "wrote 2 charts", "no weights chart without FastestFirst")
}

func TestSimSVGBadDir(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	code, _, errOut := exec([]string{"sim", "-duration", "2s", "-seeds", "1", "-scenario", "uniform", "-pickers", "SmoothWRR", "-svg", file}, "")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "balance sim: ")
	assert.Contains(t, errOut, "file")
}

// TestSimHelpDefaults: -h states the built-in scenarios' own values (see
// their definitions in package sim, and nginx's max_fails=1 and
// fail_timeout=10s) instead of the sentinels the flags use internally.
func TestSimHelpDefaults(t *testing.T) {
	code, out, errOut := exec([]string{"sim", "-h"}, "")
	require.Equal(t, 0, code)
	help := out + errOut
	for _, bad := range []string{"default -1", "-1ns", "(default 0)"} {
		assert.NotContains(t, help, bad)
	}
	for _, want := range []string{
		"simulated time per run (default: the scenario's, 60s; 50s in retrystorm; 20s in outage1s; 40s in scaleup; 30s in coldstart)",
		"attempt timeout (default: the scenario's, 1s; 5s in coldstart)",
		"(default: the scenario's, 0; 1 in linkerd; 2 in coldstart)",                         // tries
		"disables failure accounting (default: the scenario's, 1; 0 in linkerd, retrystorm)", // max-fails
		"fail_timeout, a duration (default: the scenario's, 10s in all)",
		"clients K (default: the scenario's, 1; 16 in herd, fleet16, zones16, fastfail16; 10 in retrystorm, outage1s, scaleup; 64 in fleet64)",
		"(default: the scenario's, 0.7; 0.75 in fleet1, fleet16, fleet64, zones16, zones1, fastfail16; none, a fixed 1000 requests/s, in linkerd; none, a fixed 700 requests/s, in scaleup; 0.68 in coldstart)",
		"(default: the scenario's, no jitter; 1s in fleet1, fleet16, fleet64, zones16, zones1, fastfail16; 500ms in jitter, herd)",
		"(default its own: 5s for FastestFirst, 10s otherwise)",
		"-svg DIR",
	} {
		assert.Contains(t, help, want)
	}
}

func TestSimBadOverrides(t *testing.T) {
	for _, args := range [][]string{
		{"-tries", "-1"}, {"-tries", "x"}, {"-max-fails", "-2"}, {"-fail-timeout", "-1s"}, {"-fail-timeout", "soon"},
	} {
		code, _, errOut := exec(append([]string{"sim"}, args...), "")
		assert.Equal(t, 2, code, "%v", args)
		assert.Contains(t, errOut, "invalid value", "%v", args)
	}
	// A set override applies: -tries 1 turns the retries off, so the
	// description says "no retry".
	code, out, errOut := exec([]string{"sim", "-duration", "2s", "-seeds", "1", "-scenario", "uniform", "-pickers", "SmoothWRR", "-tries", "1", "-max-fails", "0", "-fail-timeout", "0s"}, "")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "no retry")
}
