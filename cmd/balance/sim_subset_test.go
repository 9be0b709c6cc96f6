package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// balance sim -scenario subset300 prints the subsetting comparison: one row
// per subsetting, the same bytes on every run.
func TestSimSubset(t *testing.T) {
	skipFullRuns(t)
	args := []string{"sim", "-scenario", "subset300", "-seeds", "1", "-format", "markdown"}
	code, out, errOut := exec(args, "")
	require.Equal(t, 0, code, errOut)
	for _, row := range []string{"| none |", "| deterministic |", "| ring |", "| rendezvous |", "| random |"} {
		assert.Contains(t, out, row)
	}
	_, again, _ := exec(args, "")
	assert.Equal(t, out, again)
	code, list, _ := exec([]string{"sim", "-list"}, "")
	require.Equal(t, 0, code)
	assert.Contains(t, list, "subset300")
}

// The flags the subsetting comparison does not read are refused, naming
// them, as is subset300 among other scenarios.
func TestSimSubsetBadUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", "-scenario", "subset300,hetero"}, "-scenario subset300,hetero: subset300 runs alone"},
		{[]string{"sim", "-scenario", "subset300", "-check"}, "-check: does not apply to subset300"},
		{[]string{"sim", "-scenario", "subset300", "-pickers", "SmoothWRR"}, "-pickers SmoothWRR: does not apply to subset300"},
		{[]string{"sim", "-scenario", "subset300", "-load", "0.5"}, "-load 0.5: does not apply to subset300"},
	} {
		code, _, errOut := exec(tc.args, "")
		assert.Equal(t, 2, code, strings.Join(tc.args, " "))
		assert.Contains(t, errOut, tc.want)
	}
}
