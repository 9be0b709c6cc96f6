package main

import (
	"bytes"
	"log"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// TestRun runs the example with every picker of the registry and small
// counts: every request ends in a 200 (the 503s went on to the next
// backend), so the backends' 200s add up to the requests.
func TestRun(t *testing.T) {
	const requests = 40
	count := regexp.MustCompile(`(\d+)×(\d+)`)
	for _, a := range balancer.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			var out bytes.Buffer
			require.NoError(t, run([]string{"-algo", strings.ToLower(a.Name), "-backends", "3", "-requests", strconv.Itoa(requests)}, &out))
			assert.Contains(t, out.String(), a.Name+", 40 requests, all 200:")
			ok := 0
			for _, m := range count.FindAllStringSubmatch(out.String(), -1) {
				if m[2] == "200" {
					n, _ := strconv.Atoi(m[1])
					ok += n
				}
			}
			assert.Equal(t, requests, ok, "answers 200 in\n%s", out.String())
			assert.Equal(t, 3, strings.Count(out.String(), "backend "), out.String())
		})
	}
}

func TestRun_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown algo", []string{"-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever"`},
		{"no backends", []string{"-backends", "0"}, "-backends 0"},
		{"negative requests", []string{"-requests", "-1"}, "-requests -1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, &bytes.Buffer{})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// TestLogBlind: the log lines of the blind and seen events, and nothing
// for the others.
func TestLogBlind(t *testing.T) {
	var out bytes.Buffer
	hook := logBlind(log.New(&out, "httpclient: ", 0), "ReportedWRR")
	p := balancer.NewPeer("127.0.0.1:9001")
	hook(balancer.Event{Kind: balancer.EventPeerBlind, Peer: p, Misses: 12, Err: balancer.ErrNoLoadReport})
	hook(balancer.Event{Kind: balancer.EventPeerOut, Peer: p})
	hook(balancer.Event{Kind: balancer.EventPeerSeen, Peer: p, Misses: 12})
	assert.Equal(t, "httpclient: ReportedWRR is blind to backend 127.0.0.1:9001: 12 misses in a row, the last: balancer: replies carry no load report\n"+
		"httpclient: ReportedWRR sees backend 127.0.0.1:9001's load again\n", out.String())
}
