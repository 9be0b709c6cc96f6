package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/flagtest"
)

// TestConfigure_badFlags: every refusal names the flag (or the option the
// picker refused), and nothing is served.
func TestConfigure_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", []string{}, "-backends is required"},
		{"algo in any case", []string{"-backends", "a:1=-3", "-algo", "fastestfirst"}, "weight -3 out of range"},
		{"weight not a number", []string{"-backends", "a:1=x"}, `-backends: "a:1=x": weight "x" is not a number`},
		{"negative weight", []string{"-backends", "a:1=-2"}, "weight -2 out of range"},
		{"empty backend", []string{"-backends", "a:1,,b:2"}, "empty peer address"},
		{"backend without a port", []string{"-backends", "a:1,b"}, `-backends: "b": want host:port`},
		{"backend as a URL", []string{"-backends", "http://a:1"}, `-backends: "http://a:1": want host:port`},
		{"stray argument", []string{"-backends", "a:1", "LeastConn"}, `unexpected argument "LeastConn"`},
		{"negative connect timeout", []string{"-backends", "a:1", "-connect-timeout", "-1s"}, "-connect-timeout -1s: want 0 or more"},
		{"negative read timeout", []string{"-backends", "a:1", "-read-timeout", "-5ms"}, "-read-timeout -5ms: want 0 or more"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := configure(tt.args, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
	// The picker's flags, refused as every command on balancerflag
	// refuses them.
	flagtest.RunBadFlags(t, build, "-backends", "a:1")
}

// build is configure for flagtest: the start line, and the picker to close.
func build(args []string) (string, func(), error) {
	c, err := configure(args, io.Discard)
	if err != nil {
		return "", nil, err
	}
	return c.summary, c.close, nil
}

// TestConfigure_optionFlags: each option flag builds every picker that
// takes its option with a good value and is refused, by the picker, with a
// bad one.
func TestConfigure_optionFlags(t *testing.T) {
	flagtest.OptionFlags(t, build, "-backends", "127.0.0.1:1,127.0.0.1:2")
}

// TestConfigure_needs: the start line says what the picker needs from the
// servers: probes for Prequal, reports for ReportedWRR and for a picker
// given -reported-load, nothing otherwise.
func TestConfigure_needs(t *testing.T) {
	flagtest.Needs(t, build, "-backends", "127.0.0.1:1")
}

// TestUsage: -h lists every picker, with the option flags it takes and
// what it needs from the servers.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	_, err := configure([]string{"-h"}, &out)
	require.ErrorIs(t, err, flag.ErrHelp)
	assert.True(t, strings.HasPrefix(out.String(), "Usage: reverseproxy -backends"), out.String())
	for _, f := range []string{"-listen", "-backends", "-max-fails", "-fail-timeout", "-max-tries", "-connect-timeout", "-read-timeout", "-quiet"} {
		assert.Regexp(t, "\n  "+f+"[ \n]", out.String())
	}
	flagtest.Usage(t, out.String())
}

// TestProxy_hashKey: -hash-key routes each user to one backend through
// the proxy over three real backends, and the users spread over more than
// one; a request without the header has the empty key, as in nginx.
func TestProxy_hashKey(t *testing.T) {
	var addrs []string
	for i := range 3 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprint(w, i)
		}))
		defer srv.Close()
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	for _, key := range []string{"$http_x_user", "user=${cookie_u}"} {
		t.Run(key, func(t *testing.T) {
			c, err := configure([]string{"-backends", strings.Join(addrs, ","), "-algo", "ConsistentHash", "-hash-key", key, "-quiet"}, io.Discard)
			require.NoError(t, err)
			defer c.close()
			front := httptest.NewServer(c.proxy)
			defer front.Close()
			get := func(user string) string {
				req, err := http.NewRequest(http.MethodGet, front.URL+"/x", nil)
				require.NoError(t, err)
				req.Header.Set("X-User", user)
				req.AddCookie(&http.Cookie{Name: "u", Value: user})
				resp, err := front.Client().Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return string(b)
			}
			seen := map[string]bool{}
			for u := range 12 {
				user := fmt.Sprint("u", u)
				first := get(user)
				for range 3 {
					assert.Equal(t, first, get(user), "user %s moved", user)
				}
				seen[first] = true
			}
			assert.Greater(t, len(seen), 1, "12 users on one backend")
		})
	}
}

// TestCopyBuilds: this directory, copied into a module of its own that
// requires the library, builds; so the example imports nothing internal to
// this repository. The library comes from this checkout (a replace
// directive) and the build uses only the module cache.
func TestCopyBuilds(t *testing.T) {
	flagtest.CopyBuilds(t, "example.com/myproxy")
}

// TestLogBlind: the log line of each blind picker's event. LeastConn with
// -reported-load in front of a real server without loadreport's
// Middleware, on a clock the test moves 100 ms a request: at the 11th
// reply (8 in a row, the first 1 s before) the log names the backend, the
// count and the cause; the cause of a report without what the picker
// reads and the seen event have lines of their own.
func TestLogBlind(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var out bytes.Buffer
	hook := logBlind(log.New(&out, "", 0), "LeastConn")
	var ns atomic.Int64
	clock := func() time.Time { return time.Unix(0, ns.Load()) }
	picker, err := balancer.NewLeastConn([]*balancer.Peer{balancer.NewPeer(addr)},
		balancer.WithClock(clock), balancer.WithEvents(hook), balancer.WithReportedLoad(10*time.Second, 1))
	require.NoError(t, err)
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}}
	for i := 1; i <= 11; i++ {
		assert.Empty(t, out.String(), "before reply %d", i)
		resp, err := client.Get("http://backend/")
		require.NoError(t, err)
		resp.Body.Close()
		ns.Add(int64(100 * time.Millisecond))
	}
	assert.Equal(t, "reverseproxy: LeastConn is blind to backend "+addr+": 11 misses in a row, the last: balancer: replies carry no load report; it balances it without its load (run loadreport's Middleware there)\n", out.String())

	out.Reset()
	p := balancer.NewPeer("10.0.0.1:80")
	hook(balancer.Event{Kind: balancer.EventPeerBlind, Peer: p, Misses: 8, Err: balancer.ErrUnusableLoadReport})
	hook(balancer.Event{Kind: balancer.EventPeerSeen, Peer: p, Misses: 8})
	hook(balancer.Event{Kind: balancer.EventPeerOut, Peer: p})
	assert.Equal(t, "reverseproxy: LeastConn is blind to backend 10.0.0.1:80: 8 misses in a row, the last: balancer: load reports lack what the picker reads; it balances it without its load (ReportedWRR needs a utilization in them: loadreport.WithUtilization)\n"+
		"reverseproxy: LeastConn sees backend 10.0.0.1:80's load again\n", out.String())
}
