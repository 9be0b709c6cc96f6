package balancerhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// heldServer is a real HTTP server on loopback behind loadreport's
// Middleware, on a fake clock: GET /work?ms=N advances the clock by N ms
// (a request that took N ms by the server's clock), GET /hold waits until
// the test releases it.
type heldServer struct {
	srv     *httptest.Server
	m       *loadreport.Middleware
	ns      atomic.Int64 // the server's clock, from epoch
	release chan struct{}
	once    sync.Once      // closes release
	held    sync.WaitGroup // the client side of the held requests
}

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func startHeldServer(t *testing.T, opts ...loadreport.Option) *heldServer {
	h := &heldServer{release: make(chan struct{})}
	m, err := loadreport.New(append([]loadreport.Option{loadreport.WithClock(h.now)}, opts...)...)
	require.NoError(t, err)
	h.m = m
	mux := http.NewServeMux()
	mux.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		var ms int64
		_, _ = fmt.Sscan(r.URL.Query().Get("ms"), &ms)
		h.ns.Add(ms * int64(time.Millisecond))
	})
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	})
	h.srv = httptest.NewServer(m.Handler(mux))
	t.Cleanup(func() {
		h.releaseAll()
		h.held.Wait()
		h.srv.Close()
	})
	return h
}

func (h *heldServer) now() time.Time { return epoch.Add(time.Duration(h.ns.Load())) }

func (h *heldServer) addr() string { return addrOf(h.srv) }

// work sends n requests one after another, each taking ms on the
// server's clock.
func (h *heldServer) work(t *testing.T, n, ms int) {
	for range n {
		resp, err := http.Get(fmt.Sprintf("%s/work?ms=%d", h.srv.URL, ms))
		require.NoError(t, err)
		resp.Body.Close()
	}
}

// hold starts n requests that the server holds in flight, and returns
// once the Middleware counts them all.
func (h *heldServer) hold(t *testing.T, n int) {
	want := h.m.InFlight() + int64(n)
	for range n {
		h.held.Go(func() {
			if resp, err := http.Get(h.srv.URL + "/hold"); err == nil {
				resp.Body.Close()
			}
		})
	}
	require.True(t, waitUntil(5*time.Second, func() bool { return h.m.InFlight() == want }),
		"in flight %d, want %d", h.m.InFlight(), want)
}

func (h *heldServer) releaseAll() { h.once.Do(func() { close(h.release) }) }

func waitUntil(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(2 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// TestProber_middlewareRIF: three servers behind loadreport's Middleware
// hold 0, 3 and 8 requests in flight; each probe's answer carries its own
// server's count and the latency estimate the server's Tracker gives at
// that moment (its clock stands still between the requests), and the
// probes are not counted as requests.
func TestProber_middlewareRIF(t *testing.T) {
	held := []int{0, 3, 8}
	servers := make([]*heldServer, len(held))
	for i, n := range held {
		servers[i] = startHeldServer(t)
		servers[i].work(t, 4, 5+5*i) // 4 requests of 5, 10, 15 ms on its clock
		servers[i].hold(t, n)
	}
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	peers := map[*balancer.Peer]int{}
	for i, s := range servers {
		p := balancer.NewPeer(s.addr())
		peers[p] = i
		pr.Probe(p, r)
	}
	got := r.wait(t, len(servers))
	for _, g := range got {
		i := peers[g.peer]
		s := servers[i]
		rif, latency := s.m.Tracker().Probe()
		assert.False(t, g.a.Failed, "server %d", i)
		assert.Equal(t, float64(held[i]), g.a.InFlight, "server %d holds %d", i, held[i])
		assert.EqualValues(t, held[i], rif, "the probe is not a request in flight")
		assert.Equal(t, latency, g.a.Latency, "server %d's own estimate", i)
		assert.Positive(t, g.a.Latency, "server %d has completed requests", i)
		assert.Positive(t, g.a.RoundTrip)
		assert.Less(t, g.a.RoundTrip, balancerhttp.DefaultProbeTimeout)
	}

	// The middle server lets its requests go: its next probe says 0.
	servers[1].releaseAll()
	servers[1].held.Wait()
	require.True(t, waitUntil(5*time.Second, func() bool { return servers[1].m.InFlight() == 0 }))
	p := balancer.NewPeer(servers[1].addr())
	pr.Probe(p, r)
	got = r.wait(t, 1)
	assert.Equal(t, 0.0, got[len(got)-1].a.InFlight)
	assert.Equal(t, balancerhttp.ProberStats{Sent: 4, Answered: 4}, pr.Stats())
}

// TestProber_middlewareElsewhere: a server whose Middleware answers probes
// on another path passes the default path to its handler, whose 404 is a
// Failed answer; the prober given that path gets the answer.
func TestProber_middlewareElsewhere(t *testing.T) {
	s := startHeldServer(t, loadreport.WithProbePath("/lb/probe"))
	s.hold(t, 2)
	r := newAnswers()
	for _, tt := range []struct {
		opts []balancerhttp.ProberOption
		want balancer.ProbeAnswer
	}{
		{nil, balancer.ProbeAnswer{Failed: true}},
		{[]balancerhttp.ProberOption{balancerhttp.WithProbePath("/lb/probe")}, balancer.ProbeAnswer{InFlight: 2}},
	} {
		pr, err := balancerhttp.NewProber(tt.opts...)
		require.NoError(t, err)
		pr.Probe(balancer.NewPeer(s.addr()), r)
		got := r.wait(t, 1)
		a := got[len(got)-1].a
		a.RoundTrip = 0
		assert.Equal(t, tt.want, a)
		require.NoError(t, pr.Close())
	}
}
