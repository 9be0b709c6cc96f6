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
	served  atomic.Int64 // /work requests
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
		h.served.Add(1)
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
		if a.Failed {
			assert.ErrorContains(t, a.Err, "404 Not Found", "the cause")
			a.Err = nil
		}
		assert.Equal(t, tt.want, a)
		require.NoError(t, pr.Close())
	}
}

// TestProber_prequalTransport: a Transport over Prequal with this Prober
// and three servers behind the Middleware, one holding 20 requests from
// other clients. Its probes answer rif 20 against 0 or 1 for the others
// (this client's one request): two thirds of the recent counts are at most
// 1, so the default hot quantile (0.3) is at most 1 and its answers are
// hot, losing to any cold answer in the pool. The requests go one after another, each
// once the previous one's probes are answered, so every pick has the idle
// servers' fresh answers, but for the first (before any answer, picked by
// P2CPeakEWMA's rule among all three). A uniform picker would send it 100
// of 300; allow 10.
func TestProber_prequalTransport(t *testing.T) {
	servers := []*heldServer{startHeldServer(t), startHeldServer(t), startHeldServer(t)}
	servers[0].hold(t, 20)
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	var peers []*balancer.Peer
	for _, s := range servers {
		peers = append(peers, balancer.NewPeer(s.addr()))
	}
	picker, err := balancer.PrequalSettings{Prober: pr}.New(peers)
	require.NoError(t, err)
	defer picker.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}, Timeout: 3 * time.Second}
	const n = 300
	for range n {
		resp, err := client.Get("http://service/work?ms=0")
		require.NoError(t, err)
		resp.Body.Close()
		require.True(t, waitUntil(time.Second, func() bool {
			s := pr.Stats()
			return s.Answered+s.Failed+s.Dropped == picker.ProbeStats().Sent
		}), "probes unanswered after 1 s")
	}
	got := []int64{servers[0].served.Load(), servers[1].served.Load(), servers[2].served.Load()}
	t.Logf("served: busy %d, idle %d and %d; prober %+v; picker %+v", got[0], got[1], got[2], pr.Stats(), picker.ProbeStats())
	assert.Equal(t, int64(n), got[0]+got[1]+got[2])
	assert.LessOrEqual(t, got[0], int64(n/3/10), "the server holding 20 requests")
	assert.Zero(t, pr.Stats().Failed)
}

// TestProber_prequalFallback: of three servers one runs no Middleware: its
// handler answers the probe path with its own 200 "ok", which is no probe
// answer, so its probes fail and Prequal balances it by P2CPeakEWMA's
// rule, comparing its expected latency (its peak EWMA, this client's
// measure: about a loopback round trip, it answers at once) with the pool's
// best answer (the server's estimate plus the probe's round trip). The two
// servers behind the Middleware take 5 ms a request, so once each has
// completed a request its estimate is about 5 ms: the server without the
// Middleware is the faster by some 20 round trips and must take most
// picks. Its peak EWMA decays in 50 ms (WithDecay), so that one slow reply
// (a pause of the race detector) does not hold it off for the whole run,
// as the default 10 s would. Require more than half of the 300 requests (a
// Prequal that dropped the peers that do not answer would give it none),
// and every request to succeed.
func TestProber_prequalFallback(t *testing.T) {
	var plainServed atomic.Int64
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/work" {
			plainServed.Add(1)
		}
		_, _ = w.Write([]byte("ok"))
	}))
	defer plain.Close()
	var slowServed [2]atomic.Int64
	peers := []*balancer.Peer{balancer.NewPeer(addrOf(plain))}
	for i := range slowServed {
		m, err := loadreport.New()
		require.NoError(t, err)
		srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(5 * time.Millisecond):
			case <-r.Context().Done():
			}
			slowServed[i].Add(1)
		})))
		defer srv.Close()
		peers = append(peers, balancer.NewPeer(addrOf(srv)))
	}
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	picker, err := balancer.PrequalSettings{Prober: pr}.New(peers, balancer.WithDecay(50*time.Millisecond))
	require.NoError(t, err)
	defer picker.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}, Timeout: 3 * time.Second}
	const n = 300
	for range n {
		resp, err := client.Get("http://service/work")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
	}
	got := []int64{plainServed.Load(), slowServed[0].Load(), slowServed[1].Load()}
	t.Logf("served: without the Middleware %d, with %d and %d; prober %+v", got[0], got[1], got[2], pr.Stats())
	assert.Equal(t, int64(n), got[0]+got[1]+got[2])
	assert.Greater(t, got[0], int64(n/2), "the server without the Middleware")
	assert.Positive(t, pr.Stats().Failed, "its probes fail")
	assert.Positive(t, pr.Stats().Answered, "the others' do not")
}

// TestProber_prequalConcurrent: 8 goroutines send 100 requests each at
// once through a Transport over Prequal and three Middleware servers, one
// holding 10 requests: every request succeeds, and once the probes settle
// every answer the Prober gave reached the picker exactly once (its
// answered and failed answers are the picker's taken, failed, refused and
// late ones; its refused ones, the picker's refused).
func TestProber_prequalConcurrent(t *testing.T) {
	servers := []*heldServer{startHeldServer(t), startHeldServer(t), startHeldServer(t)}
	servers[0].hold(t, 10)
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	var peers []*balancer.Peer
	for _, s := range servers {
		peers = append(peers, balancer.NewPeer(s.addr()))
	}
	picker, err := balancer.PrequalSettings{Prober: pr}.New(peers)
	require.NoError(t, err)
	defer picker.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}, Timeout: 3 * time.Second}
	var wg sync.WaitGroup
	var bad atomic.Int64
	for range 8 {
		wg.Go(func() {
			for range 100 {
				resp, err := client.Get("http://service/work?ms=0")
				if err != nil {
					bad.Add(1)
					continue
				}
				if resp.StatusCode != http.StatusOK {
					bad.Add(1)
				}
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	assert.Zero(t, bad.Load())
	var ps balancerhttp.ProberStats
	var pk balancer.ProbeStats
	require.True(t, waitUntil(5*time.Second, func() bool {
		ps, pk = pr.Stats(), picker.ProbeStats()
		return ps.Answered+ps.Failed+ps.Dropped == pk.Sent
	}), "probes unanswered: prober %+v, picker %+v", ps, pk)
	t.Logf("served %d %d %d; prober %+v; picker %+v", servers[0].served.Load(), servers[1].served.Load(), servers[2].served.Load(), ps, pk)
	assert.Equal(t, int64(800), servers[0].served.Load()+servers[1].served.Load()+servers[2].served.Load())
	assert.Equal(t, ps.Answered+ps.Failed, pk.Answered+pk.Failed+pk.Invalid+pk.Unknown+pk.Late)
	assert.Equal(t, ps.Refused, pk.Invalid+pk.Unknown)
	assert.Positive(t, pk.Answered)
}

// TestProber_prequalProxy: the Proxy over Prequal and the Prober, in front
// of the three servers of TestProber_prequalTransport (one holding 20
// requests): by the same derivation the busy one gets at most 10 of 300.
func TestProber_prequalProxy(t *testing.T) {
	servers := []*heldServer{startHeldServer(t), startHeldServer(t), startHeldServer(t)}
	servers[0].hold(t, 20)
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	var peers []*balancer.Peer
	for _, s := range servers {
		peers = append(peers, balancer.NewPeer(s.addr()))
	}
	picker, err := balancer.PrequalSettings{Prober: pr}.New(peers)
	require.NoError(t, err)
	defer picker.Close()
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: picker})
	defer front.Close()
	client := &http.Client{Timeout: 3 * time.Second}
	const n = 300
	for range n {
		resp, err := client.Get(front.URL + "/work?ms=0")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		resp.Body.Close()
		require.True(t, waitUntil(time.Second, func() bool {
			s := pr.Stats()
			return s.Answered+s.Failed+s.Dropped == picker.ProbeStats().Sent
		}), "probes unanswered after 1 s")
	}
	got := []int64{servers[0].served.Load(), servers[1].served.Load(), servers[2].served.Load()}
	t.Logf("served: busy %d, idle %d and %d; prober %+v", got[0], got[1], got[2], pr.Stats())
	assert.Equal(t, int64(n), got[0]+got[1]+got[2])
	assert.LessOrEqual(t, got[0], int64(n/3/10), "the server holding 20 requests")
}
