package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

func TestParseBackends(t *testing.T) {
	peers, err := parseBackends("127.0.0.1:9001, 127.0.0.1:9002=3", balancer.MaxFails(2))
	require.NoError(t, err)
	require.Len(t, peers, 2)
	assert.Equal(t, "127.0.0.1:9001", peers[0].Addr())
	assert.Equal(t, 1, peers[0].Weight())
	assert.Equal(t, "127.0.0.1:9002", peers[1].Addr())
	assert.Equal(t, 3, peers[1].Weight())
	assert.Equal(t, 2, peers[1].MaxFails())
}

func TestRun_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", []string{}, "-backends is required"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever" (want one of RoundRobin, SmoothWRR`},
		{"algo in any case", []string{"-backends", "a:1,a:1", "-algo", "fastestfirst"}, "duplicate peer"},
		{"weight not a number", []string{"-backends", "a:1=x"}, `weight "x" is not a number`},
		{"negative weight", []string{"-backends", "a:1=-2"}, "weight -2 out of range"},
		{"duplicate backend", []string{"-backends", "a:1,a:1"}, "duplicate peer"},
		{"empty backend", []string{"-backends", "a:1,,b:2"}, "empty peer address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}
