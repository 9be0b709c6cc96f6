package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRun_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", []string{}, "-backends is required"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever" (want one of RoundRobin, SmoothWRR`},
		{"algo in any case", []string{"-backends", "a:1=-3", "-algo", "fastestfirst"}, "weight -3 out of range"},
		{"weight not a number", []string{"-backends", "a:1=x"}, `weight "x" is not a number`},
		{"negative weight", []string{"-backends", "a:1=-2"}, "weight -2 out of range"},
		{"empty backend", []string{"-backends", "a:1,,b:2"}, "empty peer address"},
		{"negative connect timeout", []string{"-backends", "a:1", "-connect-timeout", "-1s"}, "-connect-timeout -1s: want 0 or more"},
		{"negative read timeout", []string{"-backends", "a:1", "-read-timeout", "-5ms"}, "-read-timeout -5ms: want 0 or more"},
		{"probe path", []string{"-backends", "a:1", "-algo", "prequal", "-probe-path", "probe"}, `-probe-path, -probe-timeout: balancer: invalid configuration: balancerhttp: WithProbePath("probe"): does not start with "/"`},
		{"probe timeout", []string{"-backends", "a:1", "-algo", "Prequal", "-probe-timeout", "0s"}, "WithProbeTimeout(0s): out of (0, 1h0m0s]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
