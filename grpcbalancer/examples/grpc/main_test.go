package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/lbgo/balancer/metrics/metricstest"
)

// TestRun runs the example briefly: no RPC fails, the failing server is
// tried at most once per fail_timeout (1 s; the run is far shorter, so
// once, plus one per worker racing the first failure), and the slow one
// gets less than the fast one.
func TestRun(t *testing.T) {
	var out bytes.Buffer
	failed, err := run(context.Background(), &out, 200, "", nil)
	t.Log("\n" + out.String())
	if err != nil {
		t.Fatal(err)
	}
	if failed != 0 {
		t.Fatalf("%d RPCs failed", failed)
	}
	count := func(name string) (served, unavailable int) {
		m := regexp.MustCompile(regexp.QuoteMeta(name) + `.*served\s+(\d+)\s+answered UNAVAILABLE (\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no line for %q", name)
		}
		s, _ := strconv.Atoi(m[1])
		u, _ := strconv.Atoi(m[2])
		return s, u
	}
	fast, _ := count("fast")
	slow, _ := count("slow")
	_, bad := count("failing")
	if fast+slow != 200 {
		t.Errorf("fast %d + slow %d served, want 200", fast, slow)
	}
	if bad < 1 || bad > 1+4 {
		t.Errorf("the failing server answered %d attempts, want 1..5", bad)
	}
	if slow >= fast {
		t.Errorf("slow served %d, fast %d: want fewer on the slow one", slow, fast)
	}
}

// TestRun_metrics runs the example with -metrics-listen on a loopback
// port, scrapes /metrics once the RPCs are done and checks the picker's
// counts against what the servers themselves counted: each server's
// attempts are the RPCs it served plus those it answered UNAVAILABLE;
// only the failing server has failures, one per UNAVAILABLE; since no RPC
// fails, each UNAVAILABLE was retried once, so the attempts add up to the
// RPCs plus the UNAVAILABLEs. Nothing is in flight, no pick found no live
// peer (the run starts once all three are connected, and the failing
// server is the only one ever out), the weights are the resolver's, the
// slow server's latency estimate is at least its 20 ms delay (every
// attempt it served took that long), and only the failing server is out
// of the healthy state.
func TestRun_metrics(t *testing.T) {
	const rpcs = 200
	ctx, cancel := context.WithCancel(context.Background())
	var out bytes.Buffer
	ready := make(chan net.Addr, 1)
	type result struct {
		failed int64
		err    error
	}
	done := make(chan result, 1)
	go func() {
		f, err := run(ctx, &out, rpcs, "127.0.0.1:0", func(a net.Addr) { ready <- a })
		done <- result{f, err}
	}()
	var addr net.Addr
	select {
	case addr = <-ready:
	case r := <-done:
		t.Fatalf("run returned before serving: %d failed, %v", r.failed, r.err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatal("the RPCs did not finish in 60 s")
	}
	// The servers' counts are printed; run wrote them before calling
	// ready, so out is not written to any more.
	t.Log("\n" + out.String())
	count := func(name string) (ip string, served, unavailable float64) {
		m := regexp.MustCompile(regexp.QuoteMeta(name) + `.*?(127\.0\.0\.1:\d+)\s+served\s+(\d+)\s+answered UNAVAILABLE (\d+)`).FindStringSubmatch(out.String())
		if m == nil {
			t.Fatalf("no line for %q", name)
		}
		s, _ := strconv.Atoi(m[2])
		u, _ := strconv.Atoi(m[3])
		return m[1], float64(s), float64(u)
	}

	client := &http.Client{Timeout: 10 * time.Second}
	url := fmt.Sprintf("http://%s/metrics", addr)
	mfs := metricstest.Scrape(t, client, url)
	// gRPC reports an attempt's end just before the RPC returns; allow the
	// last ones a bounded moment.
	for end := time.Now().Add(5 * time.Second); mfs.Sum("balancer_peer_in_flight", nil) != 0 && time.Now().Before(end); {
		time.Sleep(10 * time.Millisecond)
		mfs = metricstest.Scrape(t, client, url)
	}

	var sumAttempts, sumUnavailable float64
	for _, s := range []struct {
		name   string
		weight float64
	}{
		{"fast", 2}, {"slow", 1}, {"failing", 1},
	} {
		peer, served, unavailable := count(s.name)
		labels := map[string]string{"picker": "demo", "peer": peer}
		for _, c := range []struct {
			metric string
			want   float64
		}{
			{"balancer_peer_attempts_total", served + unavailable},
			{"balancer_peer_failures_total", unavailable},
			{"balancer_peer_in_flight", 0},
			{"balancer_peer_weight", s.weight},
		} {
			if got := mfs.Value(t, c.metric, labels); got != c.want {
				t.Errorf("%s %s = %v, want %v", s.name, c.metric, got, c.want)
			}
		}
		healthy := mfs.Value(t, "balancer_peer_health", map[string]string{"peer": peer, "state": "healthy"})
		if want := map[bool]float64{true: 0, false: 1}[s.name == "failing"]; healthy != want {
			t.Errorf("%s healthy = %v, want %v", s.name, healthy, want)
		}
		if s.name == "slow" && served > 0 {
			if got := mfs.Value(t, "balancer_peer_latency_seconds", labels); got < 0.020 {
				t.Errorf("slow latency estimate %v s, want at least 0.020", got)
			}
		}
		sumAttempts += served + unavailable
		sumUnavailable += unavailable
	}
	if got, want := mfs.Sum("balancer_peer_attempts_total", nil), float64(rpcs)+sumUnavailable; got != want || got != sumAttempts {
		t.Errorf("attempts in all %v, want %d RPCs + %v UNAVAILABLE = %v", got, rpcs, sumUnavailable, want)
	}
	if got := mfs.Value(t, "balancer_no_live_peer_total", map[string]string{"picker": "demo"}); got != 0 {
		t.Errorf("no live peer %v, want 0", got)
	}

	cancel()
	select {
	case r := <-done:
		if r.err != nil || r.failed != 0 {
			t.Errorf("run: %d failed, %v", r.failed, r.err)
		}
	case <-time.After(10 * time.Second):
		t.Error("run did not return once cancelled")
	}
}
