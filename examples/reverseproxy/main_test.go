package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
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
		{"unknown algo", []string{"-backends", "a:1", "-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever" (want one of RoundRobin, SmoothWRR`},
		{"algo in any case", []string{"-backends", "a:1=-3", "-algo", "fastestfirst"}, "weight -3 out of range"},
		{"weight not a number", []string{"-backends", "a:1=x"}, `-backends: "a:1=x": weight "x" is not a number`},
		{"negative weight", []string{"-backends", "a:1=-2"}, "weight -2 out of range"},
		{"empty backend", []string{"-backends", "a:1,,b:2"}, "empty peer address"},
		{"backend without a port", []string{"-backends", "a:1,b"}, `-backends: "b": want host:port`},
		{"backend as a URL", []string{"-backends", "http://a:1"}, `-backends: "http://a:1": want host:port`},
		{"stray argument", []string{"-backends", "a:1", "LeastConn"}, `unexpected argument "LeastConn"`},
		{"negative connect timeout", []string{"-backends", "a:1", "-connect-timeout", "-1s"}, "-connect-timeout -1s: want 0 or more"},
		{"negative read timeout", []string{"-backends", "a:1", "-read-timeout", "-5ms"}, "-read-timeout -5ms: want 0 or more"},
		{"probe path", []string{"-backends", "a:1", "-algo", "prequal", "-probe-path", "probe"}, `-probe-path, -probe-timeout: balancer: invalid configuration: balancerhttp: WithProbePath("probe"): does not start with "/"`},
		{"probe timeout", []string{"-backends", "a:1", "-algo", "Prequal", "-probe-timeout", "0s"}, "WithProbeTimeout(0s): out of (0, 1h0m0s]"},
		{"probe flags without probes", []string{"-backends", "a:1", "-algo", "LeastConn", "-probe-timeout", "1s"}, "-probe-path, -probe-timeout: -algo LeastConn sends no probes (Prequal does)"},
		{"hash without key", []string{"-backends", "a:1", "-algo", "hash"}, "-hash-key is required with -algo Hash"},
		{"key without hash", []string{"-backends", "a:1", "-algo", "IPHash", "-hash-key", "$host"}, "-hash-key: -algo IPHash takes no key"},
		{"unknown variable", []string{"-backends", "a:1", "-algo", "ConsistentHash", "-hash-key", "$http_x_user$server_name"}, "-hash-key: unknown variable $server_name"},
		{"unclosed variable", []string{"-backends", "a:1", "-algo", "ConsistentHash", "-hash-key", "${host"}, "-hash-key: the variable ${host lacks its closing }"},
		{"option of another picker", []string{"-backends", "a:1", "-algo", "SmoothWRR", "-hot-quantile", "0.5"}, "-hot-quantile: -algo SmoothWRR does not take WithHotQuantile (Prequal do)"},
		{"too few values", []string{"-backends", "a:1", "-algo", "LeastConn", "-reported-load", "10s"}, `-reported-load "10s": too few values (want WINDOW,CLIENTS)`},
		{"too many values", []string{"-backends", "a:1", "-algo", "LeastConn", "-reported-load", "10s,16,3"}, `-reported-load "10s,16,3": too many values`},
		{"not a duration", []string{"-backends", "a:1", "-algo", "LeastConn", "-reported-load", "10,16"}, `-reported-load "10,16": "10" is not a duration`},
		{"not a whole number", []string{"-backends", "a:1", "-algo", "LeastConn", "-reported-load", "10s,1.5"}, `"1.5" is not a whole number`},
		{"not a number", []string{"-backends", "a:1", "-algo", "ConsistentHash", "-hash-key", "$uri", "-bounded-load", "x"}, `-bounded-load "x": "x" is not a number (want C)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := configure(tt.args, io.Discard)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// optionValues gives each option flag a value its picker takes and one it
// refuses, with what the library's refusal says: the refusal comes from the
// picker's constructor naming its option and the value, so the flag reached
// that option with that value.
var optionValues = map[string]struct{ good, bad, refusal string }{
	"reported-load":             {"10s,16", "10s,0", "WithReportedLoad(10s, 0)"},
	"probe-rate":                {"2,500", "17,500", "WithProbeRate(17"},
	"probe-pool":                {"8,500ms", "0,1s", "WithProbePool(0"},
	"hot-quantile":              {"0.5", "1.5", "WithHotQuantile(1.5)"},
	"blackout":                  {"1s", "-1s", "WithBlackoutPeriod(-1s)"},
	"weight-update-period":      {"100ms", "1us", "WithWeightUpdatePeriod(1µs)"},
	"weight-expiration":         {"1m", "0s", "WithWeightExpirationPeriod(0s)"},
	"error-utilization-penalty": {"0.5", "-1", "WithErrorUtilizationPenalty(-1)"},
	"bounded-load":              {"1.25", "0.5", "WithBoundedLoad(0.5)"},
	"decay":                     {"5s", "0s", "WithDecay(0s)"},
	"failure-penalty":           {"200ms", "0s", "WithFailurePenalty(0s)"},
	"band":                      {"2", "1", "WithBand(1)"},
	"exponent":                  {"2", "9", "WithExponent(9)"},
	"floor":                     {"5", "0", "WithFloor(0)"},
	"tolerance":                 {"2", "0.5", "WithTolerance(0.5)"},
	"warmup":                    {"10s", "-1s", "WithWarmup(-1s)"},
	"slow-start":                {"30s,1,10", "30s,1,101", "WithSlowStart"},
	"panic-threshold":           {"50", "101", "WithPanicThreshold(101)"},
	"max-ejection-percent":      {"20", "-1", "WithMaxEjectionPercent(-1)"},
	"ejection-backoff":          {"1m", "-1s", "WithEjectionBackoff(-1s)"},
}

// TestConfigure_optionFlags: each option flag builds every picker that
// takes its option with a good value and is refused, by the picker, with a
// bad one; and every option flag has its row above.
func TestConfigure_optionFlags(t *testing.T) {
	for _, f := range optionFlags {
		v, ok := optionValues[f.name]
		if !assert.True(t, ok, "-%s has no row in optionValues", f.name) {
			continue
		}
		for _, a := range balancer.Algorithms() {
			if !takes(a, f.option) {
				continue
			}
			base := []string{"-backends", "127.0.0.1:1,127.0.0.1:2", "-algo", a.Name}
			if a.Name == "Hash" || a.Name == "ConsistentHash" {
				base = append(base, "-hash-key", "$uri")
			}
			if a.Name == "RandomWeighted" && f.name == "slow-start" {
				continue // without WithWarmup it takes slow start; tested below
			}
			t.Run(f.name+"/"+a.Name, func(t *testing.T) {
				c, err := configure(append(base, "-"+f.name, v.good), io.Discard)
				require.NoError(t, err)
				assert.Contains(t, c.summary, "-"+f.name+" "+v.good)
				c.close()
				_, err = configure(append(base, "-"+f.name, v.bad), io.Discard)
				require.Error(t, err)
				assert.Contains(t, err.Error(), v.refusal)
				assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			})
		}
	}
	c, err := configure([]string{"-backends", "127.0.0.1:1", "-algo", "RandomWeighted", "-slow-start", "30s,1,10"}, io.Discard)
	require.NoError(t, err)
	c.close()
}

// TestConfigure_everyOption: every option a picker of the registry takes
// has its flag, but those a flag cannot give: WithRand (the picker seeds
// itself), WithProber (built from -probe-path and -probe-timeout),
// WithClock and WithEvents (a program's), and WithSuccessRateEjection (a
// struct of settings; a program sets it).
func TestConfigure_everyOption(t *testing.T) {
	flagged := map[string]bool{"WithRand": true, "WithProber": true}
	for _, f := range optionFlags {
		flagged[f.option] = true
	}
	for _, a := range balancer.Algorithms() {
		for _, o := range a.Options {
			assert.True(t, flagged[o], "%s takes %s, which no flag sets", a.Name, o)
		}
	}
}

// TestConfigure_needs: the start line says what the picker needs from the
// servers: probes for Prequal, reports for ReportedWRR and for a picker
// given -reported-load, nothing otherwise.
func TestConfigure_needs(t *testing.T) {
	tests := []struct {
		args []string
		want string // "" for nothing
	}{
		{[]string{"-algo", "Prequal"}, "it needs probes: each backend answers GET -probe-path"},
		{[]string{"-algo", "ReportedWRR"}, "it needs load reports"},
		{[]string{"-algo", "LeastConn", "-reported-load", "10s,16"}, "it needs with -reported-load, load reports"},
		{[]string{"-algo", "LeastConn"}, ""},
		{[]string{"-algo", "SmoothWRR"}, ""},
	}
	for _, tt := range tests {
		c, err := configure(append([]string{"-backends", "127.0.0.1:1"}, tt.args...), io.Discard)
		require.NoError(t, err, "%v", tt.args)
		if tt.want == "" {
			assert.NotContains(t, c.summary, "needs", "%v", tt.args)
		} else {
			assert.Contains(t, c.summary, tt.want, "%v", tt.args)
		}
		c.close()
	}
}

// TestUsage: -h lists every picker, with the option flags it takes and
// what it needs from the servers.
func TestUsage(t *testing.T) {
	var out bytes.Buffer
	_, err := configure([]string{"-h"}, &out)
	require.ErrorIs(t, err, errHelp())
	for _, a := range balancer.Algorithms() {
		assert.Contains(t, out.String(), "\n  "+a.Name, "-h does not list %s", a.Name)
	}
	for _, want := range []string{
		"  Prequal: -probe-rate -probe-pool -hot-quantile -decay -failure-penalty -probe-path -probe-timeout\n      needs probes",
		"  ReportedWRR: -blackout -weight-update-period -weight-expiration -error-utilization-penalty -slow-start\n      needs load reports",
		"  LeastConn: -reported-load -slow-start\n      needs with -reported-load, load reports",
		"  ConsistentHash: -bounded-load -hash-key (required)\n",
		"  -reported-load WINDOW,CLIENTS\n    \tWINDOW,CLIENTS of balancer.WithReportedLoad: ",
		"(LeastConn, P2CPeakEWMA, FastestFirst, RandomTwo)\n",
		"at once (every picker)\n",
	} {
		assert.Contains(t, out.String(), want)
	}
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

// TestParseKey: each variable's value, read from the request by hand.
func TestParseKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://svc.example/a/b?id=7&x=y", nil)
	r.RemoteAddr = "192.0.2.9:5555"
	r.Header.Set("X-User", "ann")
	r.AddCookie(&http.Cookie{Name: "Sess", Value: "s1"})
	tests := map[string]string{
		"$http_x_user":            "ann",
		"$HTTP_X_USER":            "ann",
		"$http_x_missing":         "",
		"$cookie_Sess":            "s1",
		"$arg_id":                 "7",
		"$remote_addr":            "192.0.2.9",
		"$host":                   "svc.example",
		"$uri":                    "/a/b",
		"$request_uri":            "/a/b?id=7&x=y",
		"$args":                   "id=7&x=y",
		"$host$request_uri":       "svc.example/a/b?id=7&x=y",
		"u:${http_x_user}:$arg_x": "u:ann:y",
		"fixed":                   "fixed",
	}
	for key, want := range tests {
		f, err := parseKey(key)
		require.NoError(t, err, key)
		assert.Equal(t, want, f(r), key)
	}

	// As nginx: $host without its port, in lower case; $cookie_ and $arg_
	// names matched without regard to case, their values as sent (not
	// decoded, nor dropped for characters Go's cookie parser refuses).
	r = httptest.NewRequest(http.MethodGet, "http://Svc.Example:8080/?ID=a%20b&id2=no&x=1", nil)
	r.Header.Add("Cookie", `session=a b"c; other=1`)
	r.Header.Add("Cookie", "Token=t1")
	for key, want := range map[string]string{
		"$host":           "svc.example",
		"$arg_id":         "a%20b",
		"$arg_x":          "1",
		"$arg_nope":       "",
		"$cookie_SESSION": `a b"c`,
		"$cookie_token":   "t1",
		"$cookie_other":   "1",
		"$cookie_sess":    "",
	} {
		f, err := parseKey(key)
		require.NoError(t, err, key)
		assert.Equal(t, want, f(r), key)
	}

	for _, bad := range []string{"", "$", "$http_", "$cookie_", "$nope"} {
		_, err := parseKey(bad)
		assert.Error(t, err, "%q", bad)
	}
}

// TestCopyBuilds: this directory, copied into a module of its own that
// requires the library, builds; so the example imports nothing internal to
// this repository. The library comes from this checkout (a replace
// directive) and the build uses only the module cache.
func TestCopyBuilds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module: skipped under -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	dir := t.TempDir()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	mod := "module example.com/myproxy\n\ngo 1.26\n\nrequire github.com/lbgo/balancer v0.0.0\n\nreplace github.com/lbgo/balancer => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	run := func(args ...string) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	run("mod", "tidy")
	run("build", "-o", filepath.Join(dir, "proxy"), ".")
}

func errHelp() error { return flag.ErrHelp }

// TestParseKey_host: $host as nginx has it, an IPv6 address in brackets.
func TestParseKey_host(t *testing.T) {
	f, err := parseKey("$host")
	require.NoError(t, err)
	for h, want := range map[string]string{"[::1]:8080": "[::1]", "[::1]": "[::1]", "Example.COM.": "example.com", "a.b:1": "a.b"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = h
		assert.Equal(t, want, f(r), h)
	}
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
