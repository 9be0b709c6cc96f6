package main

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/metrics/metricstest"
)

// backend is a loopback HTTP server answering 200, or 500 while failing
// is set.
func backend(t *testing.T, failing *atomic.Bool) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if failing.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// scrape fetches /metrics and parses the text exposition.
func scrape(t *testing.T, c *http.Client, addr string) metricstest.Families {
	t.Helper()
	return metricstest.Scrape(t, c, "http://"+addr+"/metrics")
}

// value returns the value of the series of family name whose labels
// include want.
func value(t *testing.T, mfs metricstest.Families, name string, want map[string]string) float64 {
	t.Helper()
	return mfs.Value(t, name, want)
}

// TestRun_metrics runs the proxy over two loopback backends, good then bad
// (bad answering 500), with max_fails 1 and a fail_timeout of an hour, and
// scrapes /metrics on its own listener. The expected counts follow from
// nginx's rules: SmoothWRR with equal weights picks good, then bad; bad's
// 500 is a failure (proxy_next_upstream http_500), which takes it out for
// the hour, and the GET is retried on good. So 10 requests make 10
// attempts on good, 1 on bad. Then good fails too: request 11 fails on
// good, and its retry finds no live peer (good tried, bad out): one
// ErrNoLivePeer, and the client gets 502.
func TestRun_metrics(t *testing.T) {
	var goodFails, badFails atomic.Bool
	badFails.Store(true)
	good, bad := backend(t, &goodFails), backend(t, &badFails)

	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan [2]string, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{
			"-listen", "127.0.0.1:0", "-metrics-listen", "127.0.0.1:0", "-quiet",
			"-backends", good + "," + bad, "-algo", "SmoothWRR",
			"-max-fails", "1", "-fail-timeout", "1h",
		}, func(proxy, metrics net.Addr) { addrs <- [2]string{proxy.String(), metrics.String()} })
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	var proxy, metricsAddr string
	select {
	case a := <-addrs:
		proxy, metricsAddr = a[0], a[1]
	case err := <-done:
		t.Fatal(err)
	case <-time.After(10 * time.Second):
		t.Fatal("the proxy did not start")
	}

	client := &http.Client{Timeout: 10 * time.Second}
	get := func(want int) {
		t.Helper()
		resp, err := client.Get("http://" + proxy + "/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("status %d, want %d", resp.StatusCode, want)
		}
	}
	// settled scrapes until nothing is in flight: the proxy reports a
	// response's end once it has copied the body, which may be just after
	// the client has read it. Bounded: 5 s.
	settled := func() metricstest.Families {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			mfs := scrape(t, client, metricsAddr)
			busy := value(t, mfs, "balancer_peer_in_flight", map[string]string{"peer": good}) +
				value(t, mfs, "balancer_peer_in_flight", map[string]string{"peer": bad})
			if busy == 0 {
				return mfs
			}
			if time.Now().After(deadline) {
				t.Fatalf("%v attempts still in flight", busy)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	for range 10 {
		get(http.StatusOK)
	}
	mfs := settled()
	for _, c := range []struct {
		name, peer string
		want       float64
	}{
		{"balancer_peer_attempts_total", good, 10},
		{"balancer_peer_attempts_total", bad, 1},
		{"balancer_peer_failures_total", good, 0},
		{"balancer_peer_failures_total", bad, 1},
		{"balancer_peer_fails", bad, 1},
		{"balancer_peer_effective_weight", bad, 0}, // weight - weight/max_fails
	} {
		if got := value(t, mfs, c.name, map[string]string{"peer": c.peer, "picker": "proxy"}); got != c.want {
			t.Errorf("%s{peer=%s} = %v, want %v", c.name, c.peer, got, c.want)
		}
	}
	if got := value(t, mfs, "balancer_peer_health", map[string]string{"peer": bad, "state": "failed"}); got != 1 {
		t.Errorf("bad failed = %v, want 1", got)
	}
	if got := value(t, mfs, "balancer_peer_health", map[string]string{"peer": good, "state": "healthy"}); got != 1 {
		t.Errorf("good healthy = %v, want 1", got)
	}
	if got := value(t, mfs, "balancer_no_live_peer_total", nil); got != 0 {
		t.Errorf("no live peer = %v, want 0", got)
	}

	goodFails.Store(true)
	get(http.StatusBadGateway)
	mfs = settled()
	for _, c := range []struct {
		name, peer string
		want       float64
	}{
		{"balancer_peer_attempts_total", good, 11},
		{"balancer_peer_failures_total", good, 1},
		{"balancer_peer_attempts_total", bad, 1},
	} {
		if got := value(t, mfs, c.name, map[string]string{"peer": c.peer}); got != c.want {
			t.Errorf("%s{peer=%s} = %v, want %v", c.name, c.peer, got, c.want)
		}
	}
	if got := value(t, mfs, "balancer_no_live_peer_total", map[string]string{"picker": "proxy"}); got != 1 {
		t.Errorf("no live peer = %v, want 1", got)
	}
}

func TestRun_badFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no backends", []string{}, "-backends is required"},
		{"unknown algo", []string{"-backends", "a:1", "-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever"`},
		{"weight not a number", []string{"-backends", "a:1=x"}, `weight "x" is not a number`},
		{"bad metrics address", []string{"-backends", "a:1", "-listen", "127.0.0.1:0", "-metrics-listen", "256.0.0.1:1"}, "256.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("run(%q) = %v, want an error containing %q", tt.args, err, tt.want)
			}
		})
	}
}

// TestLogBlind: the log lines of the blind and seen events, and nothing
// for the others.
func TestLogBlind(t *testing.T) {
	var out strings.Builder
	hook := logBlind(log.New(&out, "reverseproxy: ", 0), "Prequal")
	p := balancer.NewPeer("127.0.0.1:9001")
	hook(balancer.Event{Kind: balancer.EventPeerBlind, Peer: p, Misses: 4, Err: errors.New("probe of 127.0.0.1:9001: status 404 Not Found")})
	hook(balancer.Event{Kind: balancer.EventPeerOut, Peer: p})
	hook(balancer.Event{Kind: balancer.EventPeerSeen, Peer: p, Misses: 4})
	want := "reverseproxy: Prequal is blind to backend 127.0.0.1:9001: 4 misses in a row, the last: probe of 127.0.0.1:9001: status 404 Not Found\n" +
		"reverseproxy: Prequal sees backend 127.0.0.1:9001's load again\n"
	if out.String() != want {
		t.Errorf("logged\n%s\nwant\n%s", out.String(), want)
	}
}
