package main

import (
	"bytes"
	"flag"
	"io"
	"log"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/flagtest"
	"github.com/lbgo/balancer/loadreport"
)

var (
	answers = regexp.MustCompile(`(\d+)×(\d+)`)
	users   = regexp.MustCompile(`, (\d+) users\n`)
)

// TestRun runs the example with every picker of the registry and small
// counts, over backends with loadreport's Middleware and without: every
// request ends in a 200 (the 503s went on to the next backend), so the
// backends' 200s add up to the requests.
func TestRun(t *testing.T) {
	const requests = 40
	for _, a := range balancer.Algorithms() {
		for _, middleware := range []bool{true, false} {
			t.Run(a.Name+"/middleware="+strconv.FormatBool(middleware), func(t *testing.T) {
				args := []string{"-algo", strings.ToLower(a.Name), "-backends", "3", "-requests", strconv.Itoa(requests), "-middleware=" + strconv.FormatBool(middleware)}
				if a.Name == "Hash" || a.Name == "ConsistentHash" {
					args = append(args, "-hash-key", "$http_x_user")
				}
				var out bytes.Buffer
				require.NoError(t, run(args, &out, io.Discard))
				first, _, _ := strings.Cut(out.String(), "\n")
				assert.True(t, strings.HasPrefix(first, a.Name), "first line %q", first)
				assert.Equal(t, !middleware, strings.Contains(first, "(the backends run no middleware)"), first)
				assert.Contains(t, out.String(), "\n40 requests over 3 backends, all 200:\n")
				ok := 0
				for _, m := range answers.FindAllStringSubmatch(out.String(), -1) {
					if m[2] == "200" {
						n, _ := strconv.Atoi(m[1])
						ok += n
					}
				}
				assert.Equal(t, requests, ok, "answers 200 in\n%s", out.String())
				assert.Equal(t, 3, strings.Count(out.String(), "\n  backend "), out.String())
			})
		}
	}
}

// TestRun_hashKey: with -hash-key each user's requests go to one backend,
// and the users spread over more than one; without a key, a picker that
// rotates serves every user on every backend.
func TestRun_hashKey(t *testing.T) {
	tests := []struct {
		args    []string
		perUser int // backends serving each user
	}{
		{[]string{"-algo", "ConsistentHash", "-hash-key", "$http_x_user"}, 1},
		{[]string{"-algo", "Hash", "-hash-key", "$uri"}, 1},
		{[]string{"-algo", "hash", "-hash-key", "user ${http_x_user}"}, 1},
		{[]string{"-algo", "RoundRobin"}, 3},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out bytes.Buffer
			// 13 users in turn over 130 requests: user u sends requests
			// u, u+13, u+26, ..., which RoundRobin, taking 3 backends in
			// turn, sends to every backend (13 and 3 are coprime).
			args := append([]string{"-flaky=false", "-backends", "3", "-users", "13", "-requests", "130"}, tt.args...)
			require.NoError(t, run(args, &out, io.Discard))
			total, busy := 0, 0
			for _, m := range users.FindAllStringSubmatch(out.String(), -1) {
				n, _ := strconv.Atoi(m[1])
				total += n
				if n > 0 {
					busy++
				}
			}
			assert.Equal(t, 13*tt.perUser, total, "users per backend in\n%s", out.String())
			assert.Greater(t, busy, 1, "every user on one backend:\n%s", out.String())
		})
	}
}

func TestRun_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", []string{"-backends", "0"}, "-backends 0: want 1 to 100"},
		{"too many backends", []string{"-backends", "101"}, "-backends 101: want 1 to 100"},
		{"negative requests", []string{"-requests", "-1"}, "-requests -1: want 0 or more"},
		{"no users", []string{"-users", "0"}, "-users 0: want 1 or more"},
		{"stray argument", []string{"LeastConn"}, `unexpected argument "LeastConn"`},
		{"backends not a number", []string{"-backends", "x"}, `invalid value "x" for flag -backends`},
		{"middleware not a bool", []string{"-middleware=maybe"}, `invalid boolean value "maybe" for -middleware`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(tt.args, &bytes.Buffer{}, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// The picker's flags, refused as every command on balancerflag
	// refuses them.
	flagtest.RunBadFlags(t, build)
}

// build is configure for flagtest: the summary, and the picker and the
// backends to close.
func build(args []string) (string, func(), error) {
	c, err := configure(append([]string{"-backends", "2"}, args...), io.Discard)
	if err != nil {
		return "", nil, err
	}
	return c.summary, c.close, nil
}

// TestConfigure_optionFlags: each option flag builds every picker that
// takes its option with a good value and is refused, by the picker, with a
// bad one.
func TestConfigure_optionFlags(t *testing.T) {
	flagtest.OptionFlags(t, build)
}

// TestConfigure_needs: the summary says what the picker needs from the
// servers.
func TestConfigure_needs(t *testing.T) {
	flagtest.Needs(t, build)
}

// TestUsage: -h lists the example's flags, every picker with the option
// flags it takes and what it needs from the servers.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	err := run([]string{"-h"}, io.Discard, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.True(t, strings.HasPrefix(out.String(), "Usage: httpclient "), out.String())
	for _, f := range []string{"-backends", "-requests", "-users", "-middleware", "-flaky"} {
		assert.Regexp(t, "\n  "+f+"[ \n]", out.String())
	}
	assert.Contains(t, out.String(), `(default "FastestFirst")`)
	flagtest.Usage(t, out.String())
}

// TestCopyBuilds: this directory, copied into a module of its own that
// requires the library, builds; so the example imports nothing internal to
// this repository.
func TestCopyBuilds(t *testing.T) {
	flagtest.CopyBuilds(t, "example.com/myclient")
}

// TestConfigure_middleware: with -middleware (the default) every answer
// carries loadreport's report and the backends answer probes; with
// -middleware=false neither.
func TestConfigure_middleware(t *testing.T) {
	for _, on := range []bool{true, false} {
		c, err := configure([]string{"-flaky=false", "-middleware=" + strconv.FormatBool(on)}, io.Discard)
		require.NoError(t, err)
		resp, err := c.client.Get("http://backends/users/u1")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, http.StatusOK, resp.StatusCode)
		assert.Equal(t, on, resp.Header.Get(loadreport.HeaderName) != "", "-middleware=%v: report %q", on, resp.Header.Get(loadreport.HeaderName))
		probe, err := http.Get("http://" + c.backends.addrs[0] + loadreport.DefaultProbePath)
		require.NoError(t, err)
		probe.Body.Close()
		if on {
			assert.Equal(t, http.StatusOK, probe.StatusCode)
		} else {
			assert.Equal(t, http.StatusNotFound, probe.StatusCode)
		}
		c.close()
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
