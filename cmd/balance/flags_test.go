package main

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/sim"
)

// TestBadFlagValues gives every flag of both commands values it must
// refuse: out of range, NaN and infinite floats, and values whose run would
// need more memory or requests than the simulator's bounds. Each must exit 2
// at once, before a run starts, naming the flag and the value as given.
func TestBadFlagValues(t *testing.T) {
	const block = "upstream u { server a weight=3; server b; }\n"
	tests := []struct {
		args  []string
		stdin string
		flag  string // the flag stderr must name, with its value: the last argument
		also  string // more stderr must contain
	}{
		// Out of range: these ran the defaults.
		{args: []string{"sim", "-duration", "-5s"}, flag: "-duration"},
		{args: []string{"sim", "-duration", "0"}, flag: "-duration"},
		{args: []string{"sim", "-clients", "0"}, flag: "-clients"},
		{args: []string{"sim", "-clients", "-3"}, flag: "-clients"},
		{args: []string{"sim", "-load", "-1"}, flag: "-load"},
		{args: []string{"sim", "-load", "0"}, flag: "-load"},
		{args: []string{"sim", "-load", "NaN"}, flag: "-load"},
		{args: []string{"sim", "-load", "Inf"}, flag: "-load"},
		{args: []string{"sim", "-load", "-Inf"}, flag: "-load"},
		{args: []string{"sim", "-timeout", "-1s"}, flag: "-timeout"},
		{args: []string{"sim", "-timeout", "0"}, flag: "-timeout"},
		{args: []string{"sim", "-jitter-every", "-1s"}, flag: "-jitter-every"},
		{args: []string{"sim", "-jitter-every", "0"}, flag: "-jitter-every"},
		{args: []string{"sim", "-j", "-4"}, flag: "-j"},
		{args: []string{"sim", "-j", "0"}, flag: "-j"},
		{args: []string{"sim", "-check", "-tau", "-1s"}, flag: "-tau"},
		{args: []string{"sim", "-check", "-tau", "0"}, flag: "-tau"},
		{args: []string{"sim", "-seeds", "0"}, flag: "-seeds"},
		{args: []string{"sim", "-seeds", "-2"}, flag: "-seeds"},
		{args: []string{"sim", "-tries", "-1"}, flag: "-tries"},
		{args: []string{"sim", "-max-fails", "-1"}, flag: "-max-fails"},
		{args: []string{"sim", "-fail-timeout", "-1s"}, flag: "-fail-timeout"},
		{args: []string{"sim", "-seed", "-1"}, flag: "-seed"},
		{args: []string{"sim", "-format", "csv"}, flag: "-format"},
		{args: []string{"sim", "-scenario", "nope"}, flag: "-scenario"},
		{args: []string{"sim", "-pickers", "Nope"}, flag: "-pickers"},
		{args: []string{"sim", "-check", "-candidate", "Nope"}, flag: "-candidate"},
		{args: []string{"sim", "-check", "-baseline", "Nope"}, flag: "-baseline"},
		{args: []string{"sim", "-svg", ""}, flag: "-svg"},
		// Overrides that no chosen scenario reads: they were ignored.
		{args: []string{"sim", "-scenario", "linkerd", "-load", "0.5"}, flag: "-load", also: "fixed rate"},
		{args: []string{"sim", "-scenario", "uniform", "-jitter-every", "1s"}, flag: "-jitter-every", also: "no chosen scenario has jitter"},
		// Flags that only -check reads, without it: they were ignored.
		{args: []string{"sim", "-candidate", "SmoothWRR"}, flag: "-candidate", also: "-check"},
		{args: []string{"sim", "-baseline", "SmoothWRR"}, flag: "-baseline", also: "-check"},
		{args: []string{"sim", "-tau", "1s"}, flag: "-tau", also: "-check"},
		// Flags the output they go with would ignore.
		{args: []string{"sim", "-check", "-series"}, flag: "-series", also: "choose one"},
		{args: []string{"sim", "-check", "-format", "markdown"}, flag: "-format"},
		{args: []string{"sim", "-series", "-format", "markdown"}, flag: "-format"},
		{args: []string{"sim", "-series", "-seeds", "5"}, flag: "-seeds", also: "first seed only"},
		// Past the bounds: these ran out of memory, ran for minutes or
		// overflowed the virtual clock.
		{args: []string{"sim", "-duration", "100000h"}, flag: "-duration", also: "requests expected"},
		{args: []string{"sim", "-scenario", "uniform", "-duration", "1000000h"}, flag: "-duration", also: "requests expected"},
		{args: []string{"sim", "-scenario", "uniform", "-duration", "2000000h"}, flag: "-duration", also: "virtual clock"},
		{args: []string{"sim", "-load", "1e9"}, flag: "-load", also: "in (0, 1)"},
		{args: []string{"sim", "-load", "1"}, flag: "-load", also: "in (0, 1)"},
		{args: []string{"sim", "-load", "5"}, flag: "-load", also: "in (0, 1)"},
		{args: []string{"sim", "-clients", "100000000"}, flag: "-clients", also: "bytes expected"},
		{args: []string{"sim", "-scenario", "jitter", "-jitter-every", "1ns"}, flag: "-jitter-every", also: "bytes expected"},
		{args: []string{"sim", "-seeds", "1000000000"}, flag: "-seeds", also: "requests expected"},
		{args: []string{"sim", "-timeout", "2000000h"}, flag: "-timeout"},
		{args: []string{"sim", "-tries", "99999999999"}, flag: "-tries"},
		{args: []string{"sim", "-duration", "9999999999h"}, flag: "-duration"},
		// trace.
		{args: []string{"trace", "-n", "-1"}, stdin: block, flag: "-n"},
		{args: []string{"trace", "-n", "x"}, stdin: block, flag: "-n"},
		{args: []string{"trace", "-n", "99999999999999999999"}, stdin: block, flag: "-n"},
		{args: []string{"trace", "-algo", "nope"}, stdin: block, flag: "-algo"},
		{args: []string{"trace", "-seed", "-1"}, stdin: block, flag: "-seed"},
		{args: []string{"trace", "-fail", "zz"}, stdin: block, flag: "-fail"},
		{args: []string{"trace", "-upstream", "w"}, stdin: block, flag: "-upstream"},
	}
	for _, tt := range tests {
		value := tt.args[len(tt.args)-1]
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errOut := exec(tt.args, tt.stdin)
			assert.Equal(t, 2, code, errOut)
			assert.Empty(t, out)
			assert.Contains(t, errOut, tt.flag)
			assert.Contains(t, errOut, value)
			assert.Contains(t, errOut, tt.also)
			// One line points at -h; the usage itself is not repeated.
			assert.NotContains(t, errOut, "usage:")
			assert.Contains(t, errOut, `Run "balance `+tt.args[0]+` -h" for usage.`)
			assert.LessOrEqual(t, strings.Count(errOut, "\n"), 3, errOut)
		})
	}
}

// TestTraceDefaultN traces a block whose one cycle is a billion requests:
// the default -n stops at 10,000, says so on stderr, and -n still gives
// more. The expected lines follow from the block: one server takes every
// request.
func TestTraceDefaultN(t *testing.T) {
	const block = "upstream big { server a weight=1073741824; }\n"
	code, out, errOut := exec([]string{"trace"}, block)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, strings.Repeat("a:80\n", 10000), out)
	assert.Equal(t, `balance trace: one cycle of upstream "big" is 1073741824 requests; tracing the first 10000 (-n N for more)`+"\n", errOut)

	code, out, errOut = exec([]string{"trace", "-n", "10001"}, block)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, 10001, strings.Count(out, "a:80\n"))
	assert.Empty(t, errOut)

	_, _, help := exec([]string{"trace", "-h"}, "")
	assert.Contains(t, help, "most 10000: -n gives more")
}

// TestBoundsDocumented checks that sim -h and docs/simulator.md state the bounds
// the simulator applies.
func TestBoundsDocumented(t *testing.T) {
	_, _, help := exec([]string{"sim", "-h"}, "")
	help = strings.Join(strings.Fields(help), " ")
	for _, want := range []string{
		fmt.Sprintf("more than %d requests (its arrival rate times -duration) or %d GiB of memory", sim.MaxRequests, sim.MaxBytes>>30),
		fmt.Sprintf("more than %d requests over every scenario", sim.MaxCompareRequests),
	} {
		assert.Contains(t, help, want)
	}
	raw, err := os.ReadFile("../../docs/simulator.md")
	require.NoError(t, err)
	readme := strings.Join(strings.Fields(string(raw)), " ")
	for _, want := range []string{
		fmt.Sprintf("more than %d million requests or %d GiB", sim.MaxRequests/1_000_000, sim.MaxBytes>>30),
		fmt.Sprintf("more than %d million requests in all", sim.MaxCompareRequests/1_000_000),
		"at most 10,000 lines",
	} {
		assert.True(t, strings.Contains(readme, want), "docs/simulator.md does not say %q", want)
	}
}
