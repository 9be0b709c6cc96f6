package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"math"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/metrics/metricstest"
)

// start runs the example with args on a loopback metrics port and returns
// its output and the parsed scrape taken once the requests are done; the
// run is stopped at the test's end.
func start(t *testing.T, args ...string) (string, metricstest.Families) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append(args, "-metrics-listen", "127.0.0.1:0"), &out, func(a net.Addr) { ready <- a })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("run did not return once cancelled")
		}
	})
	select {
	case a := <-ready:
		client := &http.Client{Timeout: 10 * time.Second}
		// run wrote its output before calling ready: out is settled.
		return out.String(), metricstest.Scrape(t, client, fmt.Sprintf("http://%s/metrics", a))
	case err := <-done:
		t.Fatalf("run returned before serving: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatal("the requests did not finish in 30 s")
	}
	return "", nil
}

var backendsLine = regexp.MustCompile(`backends: (\S+) (\S+) (\S+) \(`)

// TestRun_metrics runs the example with every picker of the registry and
// scrapes /metrics after the requests. What the backends do fixes the
// counts: the flaky backend's answers alternate 200, 503, ..., so its
// failures are half its attempts, rounded down; a 503 takes it out for
// fail_timeout (10 s, longer than the test), so it has at most 2 attempts
// and 1 failure, and is in the failed state if it failed; each 503 sends
// its GET on to a good backend, which answers 200, so the attempts add up
// to the requests plus the failures. The good backends never fail, so no
// pick finds no live peer. Transport reports an attempt when its response
// headers arrive, before Get returns: nothing is in flight. RoundRobin
// visits the flaky backend twice within its first 6 picks whatever its
// starting point, so with 30 requests it has exactly 2 attempts and 1
// failure, and the attempts add up to 31.
func TestRun_metrics(t *testing.T) {
	const requests = 30
	for _, a := range balancer.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			out, mfs := start(t, "-algo", a.Name, "-requests", fmt.Sprint(requests))
			if !strings.Contains(out, a.Name+", 30 requests, all 200") {
				t.Fatalf("output:\n%s", out)
			}
			m := backendsLine.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("no backends line in\n%s", out)
			}
			flaky := m[3]
			at := func(name, peer string) float64 {
				return mfs.Value(t, name, map[string]string{"picker": "client", "peer": peer})
			}
			attempts, failures := at("balancer_peer_attempts_total", flaky), at("balancer_peer_failures_total", flaky)
			if want := math.Floor(attempts / 2); failures != want || attempts > 2 {
				t.Errorf("flaky: %v attempts, %v failures; want at most 2 attempts and half as many failures, rounded down", attempts, failures)
			}
			failed := mfs.Value(t, "balancer_peer_health", map[string]string{"peer": flaky, "state": "failed"})
			if want := failures; failed != want {
				t.Errorf("flaky in the failed state: %v, want %v", failed, want)
			}
			for _, good := range m[1:3] {
				if got := at("balancer_peer_failures_total", good); got != 0 {
					t.Errorf("good %s: %v failures, want 0", good, got)
				}
			}
			if got, want := mfs.Sum("balancer_peer_attempts_total", nil), requests+failures; got != want {
				t.Errorf("attempts in all %v, want %d requests + %v failures", got, requests, failures)
			}
			if got := mfs.Sum("balancer_peer_in_flight", nil); got != 0 {
				t.Errorf("in flight %v, want 0", got)
			}
			if got := mfs.Value(t, "balancer_no_live_peer_total", map[string]string{"picker": "client"}); got != 0 {
				t.Errorf("no live peer %v, want 0", got)
			}
			if a.Name == "RoundRobin" && (attempts != 2 || failures != 1) {
				t.Errorf("RoundRobin: flaky %v attempts, %v failures; want 2, 1", attempts, failures)
			}
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
		{"negative requests", []string{"-requests", "-1"}, "-requests -1"},
		{"bad metrics address", []string{"-metrics-listen", "256.0.0.1:1"}, "256.0.0.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), tt.args, &bytes.Buffer{}, nil)
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
	hook := logBlind(log.New(&out, "httpclient: ", 0), "Prequal")
	p := balancer.NewPeer("127.0.0.1:9001")
	hook(balancer.Event{Kind: balancer.EventPeerBlind, Peer: p, Misses: 4, Err: errors.New("probe of 127.0.0.1:9001: status 404 Not Found")})
	hook(balancer.Event{Kind: balancer.EventPeerOut, Peer: p})
	hook(balancer.Event{Kind: balancer.EventPeerSeen, Peer: p, Misses: 4})
	want := "httpclient: Prequal is blind to backend 127.0.0.1:9001: 4 misses in a row, the last: probe of 127.0.0.1:9001: status 404 Not Found\n" +
		"httpclient: Prequal sees backend 127.0.0.1:9001's load again\n"
	if out.String() != want {
		t.Errorf("logged\n%s\nwant\n%s", out.String(), want)
	}
}
