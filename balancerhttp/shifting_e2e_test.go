package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/capacity"
)

// The herding end-to-end test: capacity.Fleet16 (ten loopback servers of
// one worker behind loadreport's Middleware, their speeds redrawn about
// every second; sixteen clients, each with its own Transport and picker,
// sending Poisson arrivals at 0.75 of capacity and giving up after 3 s).

// newShiftFleet is one picker's fleet of sc: servers of its own and
// sc.Clients clients, each with its own Transport and a picker of its own
// from newPicker over Peers of its own, each request given up after
// sc.Timeout.
func newShiftFleet(t *testing.T, sc capacity.Shifting, newPicker func([]*balancer.Peer) (balancer.Balancer, error)) *capacity.Fleet {
	t.Helper()
	f := &capacity.Fleet{}
	for _, sp := range sc.Specs() {
		f.Servers = append(f.Servers, newCapServer(t, sp))
	}
	var clients []*http.Client
	for range sc.Clients {
		peers := make([]*balancer.Peer, len(f.Servers))
		for j, s := range f.Servers {
			peers[j] = balancer.NewPeer(s.Addr)
		}
		p, err := newPicker(peers)
		require.NoError(t, err)
		if c, ok := p.(interface{ Close() error }); ok {
			t.Cleanup(func() { c.Close() })
		}
		base := http.DefaultTransport.(*http.Transport).Clone()
		base.MaxIdleConnsPerHost = 64 // a queue of a few dozen at one server keeps its connections
		t.Cleanup(base.CloseIdleConnections)
		clients = append(clients, &http.Client{Timeout: sc.Timeout, Transport: &balancerhttp.Transport{Picker: p, Base: base}})
	}
	f.NewCall = func(c int) func() (string, error) {
		cl := clients[c]
		return func() (string, error) {
			resp, err := cl.Get("http://service/")
			if err != nil {
				return "", err
			}
			b, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("status %s", resp.Status)
			}
			return string(b), err
		}
	}
	return f
}

// shiftReportedLoad is the report-driven picker's setting the README
// advises for a fleet: reports fading over 10 s, 16 clients.
var shiftReportedLoad = balancer.WithReportedLoad(10*time.Second, capacity.Fleet16.Clients)

// TestShifting_endToEnd runs capacity.Fleet16 for every picker at once,
// each on servers of its own on the same schedule, and logs each one's
// latencies and shares. It takes about 15 s, with -race too: -short
// skips it.
func TestShifting_endToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("15 s of real servers: skipped with -short")
	}
	sc := capacity.Fleet16
	type variant struct {
		name string
		new  func([]*balancer.Peer) (balancer.Balancer, error)
	}
	variants := []variant{
		{name: "P2CPeakEWMA", new: capAlgorithm(t, "P2CPeakEWMA")},
		{name: "LeastConn+rif", new: capAlgorithm(t, "LeastConn", shiftReportedLoad)},
	}
	fleets := make([]*capacity.Fleet, len(variants))
	for i, v := range variants {
		fleets[i] = newShiftFleet(t, sc, v.new)
	}
	results := capacity.RunShifting(t.Context(), fleets, sc)
	for i, v := range variants {
		r := results[i]
		t.Logf("%s: %d requests, %d gave up after %v; p50 %v, p99 %v, mean %v; shares %s%%",
			v.name, r.N, r.Timeouts, sc.Timeout, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Mean.Round(time.Millisecond), capacity.FormatShares(r.Shares))
		if len(r.Errs) > 0 {
			t.Errorf("%s: %d requests failed, first: %v", v.name, len(r.Errs), r.Errs[0])
		}
	}
}
