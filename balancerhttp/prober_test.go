package balancerhttp_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/defaults"
)

// answers is a balancer.ProbeReceiver that records the answers it is given.
type answers struct {
	mu  sync.Mutex
	got []probed
	n   chan struct{} // one value per answer
	err error         // Answer's error
}

type probed struct {
	peer *balancer.Peer
	a    balancer.ProbeAnswer
}

func newAnswers() *answers { return &answers{n: make(chan struct{}, 4096)} }

func (r *answers) Answer(p *balancer.Peer, a balancer.ProbeAnswer) error {
	r.mu.Lock()
	r.got = append(r.got, probed{p, a})
	err := r.err
	r.mu.Unlock()
	r.n <- struct{}{}
	return err
}

// wait waits for n more answers, for at most 10 s, and returns all so far.
func (r *answers) wait(t *testing.T, n int) []probed {
	t.Helper()
	for range n {
		select {
		case <-r.n:
		case <-time.After(10 * time.Second):
			t.Fatalf("an answer did not come in 10 s")
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]probed(nil), r.got...)
}

// stepClock is a clock that moves by step at each reading.
type stepClock struct {
	mu   sync.Mutex
	at   time.Time
	step time.Duration
}

func (c *stepClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = c.at.Add(c.step)
	return c.at
}

// probeServer is a real HTTP server on loopback answering the probe path
// with body and status, and 404 anywhere else.
func probeServer(t *testing.T, path string, status int, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func addrOf(srv *httptest.Server) string { return strings.TrimPrefix(srv.URL, "http://") }

// TestProber_answers: each server's answer, as it wrote it on the probe
// path, reaches the receiver with the round trip the clock measured; the
// answers that are no load report are Failed.
func TestProber_answers(t *testing.T) {
	const path = "/_lbgo/probe" // the agreed probe path
	tests := []struct {
		name   string
		path   string
		status int
		body   string
		want   balancer.ProbeAnswer
		// lastErr is in Stats.LastError after a Failed answer, with the
		// peer's address: the status, or the value ParseProbe refused.
		lastErr string
	}{
		// The clock moves 3 ms at each reading: the round trip is 3 ms.
		{"load", path, 200, "TEXT named_metrics.rif=7,named_metrics.latency_ms=12.5",
			balancer.ProbeAnswer{InFlight: 7, Latency: 12500 * time.Microsecond, RoundTrip: 3 * time.Millisecond}, ""},
		{"other keys follow", path, 200, "TEXT named_metrics.rif=0,named_metrics.latency_ms=0.25,cpu_utilization=0.5",
			balancer.ProbeAnswer{InFlight: 0, Latency: 250 * time.Microsecond, RoundTrip: 3 * time.Millisecond}, ""},
		{"no probe path", "/elsewhere", 200, "TEXT named_metrics.rif=1", balancer.ProbeAnswer{Failed: true}, "404 Not Found"},
		{"500", path, 500, "TEXT named_metrics.rif=1,named_metrics.latency_ms=1", balancer.ProbeAnswer{Failed: true}, "500 Internal Server Error"},
		{"empty", path, 200, "", balancer.ProbeAnswer{Failed: true}, "empty probe answer"},
		{"not a report", path, 200, "ok", balancer.ProbeAnswer{Failed: true}, `"ok"`},
		{"negative rif", path, 200, "TEXT named_metrics.rif=-1,named_metrics.latency_ms=1", balancer.ProbeAnswer{Failed: true}, "named_metrics.rif=-1"},
		{"NaN latency", path, 200, "TEXT named_metrics.rif=1,named_metrics.latency_ms=NaN", balancer.ProbeAnswer{Failed: true}, "named_metrics.latency_ms=NaN"},
		{"huge rif", path, 200, "TEXT named_metrics.rif=1e300,named_metrics.latency_ms=1", balancer.ProbeAnswer{Failed: true}, "named_metrics.rif=1e+300"},
		{"huge latency", path, 200, "TEXT named_metrics.rif=1,named_metrics.latency_ms=1e300", balancer.ProbeAnswer{Failed: true}, "named_metrics.latency_ms=1e+300"},
		{"too long", path, 200, "TEXT named_metrics.rif=1,named_metrics.latency_ms=1," + strings.Repeat("x", 9000) + "=1", balancer.ProbeAnswer{Failed: true}, "longer than 1024 bytes"}, // loadreport.MaxProbeLen,
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := probeServer(t, tt.path, tt.status, tt.body)
			clk := &stepClock{step: 3 * time.Millisecond}
			pr, err := balancerhttp.NewProber(balancerhttp.WithProbeClock(clk.now))
			require.NoError(t, err)
			defer pr.Close()
			r := newAnswers()
			peer := balancer.NewPeer(addrOf(srv))
			pr.Probe(peer, r)
			got := r.wait(t, 1)
			require.Len(t, got, 1)
			assert.Same(t, peer, got[0].peer)
			s := pr.Stats()
			a := got[0].a
			if a.Failed {
				assert.Equal(t, s.LastError, a.Err, "a Failed answer carries its cause")
				a.Err = nil
			}
			assert.Equal(t, tt.want, a)
			want := balancerhttp.ProberStats{Sent: 1, Answered: 1}
			if tt.want.Failed {
				want = balancerhttp.ProberStats{Sent: 1, Failed: 1}
				require.Error(t, s.LastError)
				assert.ErrorContains(t, s.LastError, "probe of "+peer.Addr()+": ")
				assert.ErrorContains(t, s.LastError, tt.lastErr)
			} else {
				assert.NoError(t, s.LastError)
			}
			s.LastError = nil
			assert.Equal(t, want, s)
		})
	}
}

// TestProber_pathAndTLS: the probe goes to the configured path and scheme,
// through the configured transport.
func TestProber_pathAndTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/load" || r.URL.RawQuery != "v=1" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("TEXT named_metrics.rif=2,named_metrics.latency_ms=4"))
	}))
	defer srv.Close()
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbePath("/load?v=1"), balancerhttp.WithProbeScheme("https"),
		balancerhttp.WithProbeTransport(srv.Client().Transport))
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	pr.Probe(balancer.NewPeer(strings.TrimPrefix(srv.URL, "https://")), r)
	got := r.wait(t, 1)
	assert.Equal(t, 2.0, got[0].a.InFlight)
	assert.Equal(t, 4*time.Millisecond, got[0].a.Latency)
	assert.False(t, got[0].a.Failed)
	assert.Positive(t, got[0].a.RoundTrip, "measured on the real clock")
}

// TestProber_refusedAnswer: an answer the receiver refuses is counted.
func TestProber_refusedAnswer(t *testing.T) {
	srv := probeServer(t, "/_lbgo/probe", 200, "TEXT named_metrics.rif=1,named_metrics.latency_ms=1")
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	r.err = balancer.ErrUnknownPeer
	pr.Probe(balancer.NewPeer(addrOf(srv)), r)
	r.wait(t, 1)
	// The worker counts the refusal after Answer returns: Close waits
	// for it.
	pr.Close()
	assert.Equal(t, balancerhttp.ProberStats{Sent: 1, Answered: 1, Refused: 1}, pr.Stats())
}

// stalled is a real server that holds every request until the test ends.
func stalled(t *testing.T) (*httptest.Server, chan struct{}) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv, release
}

// TestProber_stalledServerTimesOut: a server that never answers is
// answered Failed once the probe's timeout passes, not before.
func TestProber_stalledServerTimesOut(t *testing.T) {
	srv, _ := stalled(t)
	const timeout = 50 * time.Millisecond
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbeTimeout(timeout))
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	start := time.Now()
	pr.Probe(balancer.NewPeer(addrOf(srv)), r)
	got := r.wait(t, 1)
	assert.GreaterOrEqual(t, time.Since(start), timeout)
	assert.Equal(t, balancer.ProbeAnswer{Failed: true, Err: got[0].a.Err}, got[0].a)
	assert.ErrorIs(t, got[0].a.Err, context.DeadlineExceeded, "the answer's cause")
	s := pr.Stats()
	assert.ErrorIs(t, s.LastError, context.DeadlineExceeded)
	s.LastError = nil
	assert.Equal(t, balancerhttp.ProberStats{Sent: 1, Failed: 1}, s)
}

// TestProber_fullQueueDrops: many goroutines probing a stalled server at
// once through 2 workers and a queue of 4 never block: all but the 6
// that fit are dropped at once, counted, and Close drops those 6.
func TestProber_fullQueueDrops(t *testing.T) {
	srv, _ := stalled(t)
	arrived := make(chan struct{}, 16)
	h := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		h.ServeHTTP(w, r)
	})
	before := runtime.NumGoroutine()
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbeWorkers(2), balancerhttp.WithProbeQueue(4),
		balancerhttp.WithProbeTimeout(time.Hour))
	require.NoError(t, err)
	r := newAnswers()
	peer := balancer.NewPeer(addrOf(srv))
	pr.Probe(peer, r)
	pr.Probe(peer, r)
	<-arrived // both workers are now held by the server
	<-arrived
	const goroutines, each = 16, 100
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for range each {
				pr.Probe(peer, r)
			}
		})
	}
	wg.Wait() // Probe returned 1,600 times with every worker held
	s := pr.Stats()
	assert.Equal(t, balancerhttp.ProberStats{Sent: 2, Dropped: goroutines*each - 4}, s)
	require.NoError(t, pr.Close())
	// Close drops the 2 held and the 4 queued, unanswered.
	assert.Equal(t, balancerhttp.ProberStats{Sent: 2, Dropped: goroutines*each + 2}, pr.Stats())
	assert.Empty(t, r.got)
	pr.Probe(peer, r)
	assert.Equal(t, uint64(goroutines*each+3), pr.Stats().Dropped, "Probe after Close")
	assertNoGoroutinesLeft(t, before)
}

// TestProber_closeLeavesNoGoroutine: after probes that reused their
// connections, Close stops the workers and the default transport's
// connections: the goroutines fall back to their count before NewProber.
func TestProber_closeLeavesNoGoroutine(t *testing.T) {
	srv := probeServer(t, "/_lbgo/probe", 200, "TEXT named_metrics.rif=1,named_metrics.latency_ms=1")
	srv.Config.SetKeepAlivesEnabled(true)
	before := runtime.NumGoroutine()
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	r := newAnswers()
	peer := balancer.NewPeer(addrOf(srv))
	for range 20 {
		pr.Probe(peer, r)
		r.wait(t, 1)
	}
	assert.Greater(t, runtime.NumGoroutine(), before, "workers and a kept connection")
	require.NoError(t, pr.Close())
	require.NoError(t, pr.Close(), "idempotent")
	assertNoGoroutinesLeft(t, before)
	assert.Equal(t, balancerhttp.ProberStats{Sent: 20, Answered: 20}, pr.Stats())
}

// assertNoGoroutinesLeft fails t unless the goroutines fall back to at
// most want within 5 s (one that has returned may take a moment to leave
// the count).
func assertNoGoroutinesLeft(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > want {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines left, want at most %d:\n%s", n, want, buf[:runtime.Stack(buf, true)])
	}
}

// TestProber_probeAllocatesNothing: Probe allocates nothing, whether the
// probe is queued or dropped.
func TestProber_probeAllocatesNothing(t *testing.T) {
	srv, _ := stalled(t)
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbeWorkers(1), balancerhttp.WithProbeQueue(2000),
		balancerhttp.WithProbeTimeout(time.Hour))
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	peer := balancer.NewPeer(addrOf(srv))
	assert.Zero(t, testing.AllocsPerRun(1000, func() { pr.Probe(peer, r) }), "queued")
	for pr.Stats().Dropped == 0 {
		pr.Probe(peer, r)
	}
	assert.Zero(t, testing.AllocsPerRun(1000, func() { pr.Probe(peer, r) }), "dropped")
}

func TestNewProber_badOptions(t *testing.T) {
	tests := []struct {
		opt  balancerhttp.ProberOption
		want string
	}{
		{balancerhttp.WithProbePath("_lbgo/probe"), `WithProbePath("_lbgo/probe"): does not start with "/"`},
		{balancerhttp.WithProbePath(""), `WithProbePath(""): does not start with "/"`},
		{balancerhttp.WithProbeScheme("ftp"), `WithProbeScheme("ftp"): want "http" or "https"`},
		{balancerhttp.WithProbeTransport(nil), "WithProbeTransport(nil): no transport"},
		{balancerhttp.WithProbeTimeout(0), "WithProbeTimeout(0s): out of (0, 1h0m0s]"},
		{balancerhttp.WithProbeTimeout(-time.Second), "WithProbeTimeout(-1s): out of (0, 1h0m0s]"},
		{balancerhttp.WithProbeTimeout(2 * time.Hour), "WithProbeTimeout(2h0m0s): out of (0, 1h0m0s]"},
		{balancerhttp.WithProbeWorkers(0), "WithProbeWorkers(0): out of [1, 1024]"},
		{balancerhttp.WithProbeWorkers(1025), "WithProbeWorkers(1025): out of [1, 1024]"},
		{balancerhttp.WithProbeQueue(-1), "WithProbeQueue(-1): out of [0, 65536]"},
		{balancerhttp.WithProbeQueue(1 << 20), "WithProbeQueue(1048576): out of [0, 65536]"},
		{balancerhttp.WithProbeClock(nil), "WithProbeClock(nil): no clock"},
	}
	before := runtime.NumGoroutine()
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			pr, err := balancerhttp.NewProber(tt.opt)
			assert.Nil(t, pr)
			assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
		})
	}
	assertNoGoroutinesLeft(t, before)
}

// TestProber_zeroAndNil: the zero Prober drops every probe, and a Prober
// drops a nil peer or receiver, counted, without a panic.
func TestProber_zeroAndNil(t *testing.T) {
	var zero balancerhttp.Prober
	zero.Probe(balancer.NewPeer("127.0.0.1:1"), newAnswers())
	assert.Equal(t, balancerhttp.ProberStats{}, zero.Stats())
	assert.NoError(t, zero.Close())

	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	pr.Probe(nil, newAnswers())
	pr.Probe(balancer.NewPeer("127.0.0.1:1"), nil)
	require.NoError(t, pr.Close())
	assert.Equal(t, balancerhttp.ProberStats{Dropped: 2}, pr.Stats())
}

// TestProber_defaultsTakePrequalBurst: the default Prober takes Prequal's
// default burst whole, and keeps its default rate at a LAN's round trip:
// Prequal's bucket lets a hundredth of a second's probes go at once
// (defaults.ProbesPerSecond / 100 = 100), which the default workers and
// queue must hold with every worker waiting on a stalled server, and
// defaults.ProbesPerSecond probes of 1 ms each keep 10 in flight, within
// the workers. The server sees exactly DefaultProbeWorkers probes at once.
func TestProber_defaultsTakePrequalBurst(t *testing.T) {
	srv, _ := stalled(t)
	arrived := make(chan struct{}, 1024)
	h := srv.Config.Handler
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		h.ServeHTTP(w, r)
	})
	const rtt = time.Millisecond
	assert.GreaterOrEqual(t, balancerhttp.DefaultProbeWorkers, int(defaults.ProbesPerSecond*rtt/time.Second))
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbeTimeout(time.Hour))
	require.NoError(t, err)
	defer pr.Close()
	burst := int(defaults.ProbesPerSecond / 100)
	peer := balancer.NewPeer(addrOf(srv))
	r := newAnswers()
	for range burst {
		pr.Probe(peer, r)
	}
	assert.Zero(t, pr.Stats().Dropped, "of a burst of %d", burst)
	for range balancerhttp.DefaultProbeWorkers {
		select {
		case <-arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("fewer probes than workers reached the server")
		}
	}
	select {
	case <-arrived:
		t.Fatal("more probes in flight than workers")
	case <-time.After(20 * time.Millisecond):
	}
}

// TestProber_lastErrorRefused: a probe of an address nobody listens on
// is answered Failed, and Stats.LastError names the peer and the refused
// connection.
func TestProber_lastErrorRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there now
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	defer pr.Close()
	r := newAnswers()
	pr.Probe(balancer.NewPeer(addr), r)
	got := r.wait(t, 1)
	assert.Equal(t, balancer.ProbeAnswer{Failed: true, Err: got[0].a.Err}, got[0].a)
	s := pr.Stats()
	assert.ErrorIs(t, s.LastError, syscall.ECONNREFUSED)
	assert.ErrorContains(t, s.LastError, "probe of "+addr+": ")
	assert.Equal(t, s.LastError, got[0].a.Err, "the answer carries the cause (EventPeerBlind's)")
}
