package balancerhttp_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
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

// blindBackends starts n real servers on loopback; those whose index
// support reports true run loadreport's Middleware (reports on every
// reply, the probe path), with a utilization set if utilization is, and
// the others answer every path, the probe path included, with a plain 404
// for it and 200 "ok" elsewhere, as a server that never heard of either.
// It returns the servers' addresses.
func blindBackends(t *testing.T, n int, support func(i int) bool, utilization bool) []string {
	t.Helper()
	var addrs []string
	for i := range n {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == loadreport.DefaultProbePath {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		if support(i) {
			var opts []loadreport.Option
			if utilization {
				opts = append(opts, loadreport.WithUtilization(func() float64 { return 0.5 }))
			}
			m, err := loadreport.New(opts...)
			require.NoError(t, err)
			h = m.Handler(h)
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		addrs = append(addrs, addrOf(srv))
	}
	return addrs
}

// blindLog keeps the blind and seen events of a picker.
type blindLog struct {
	mu  sync.Mutex
	evs []balancer.Event
}

func (l *blindLog) hook(e balancer.Event) {
	if e.Kind == balancer.EventPeerBlind || e.Kind == balancer.EventPeerSeen {
		l.mu.Lock()
		l.evs = append(l.evs, e)
		l.mu.Unlock()
	}
}

func (l *blindLog) events() []balancer.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.evs)
}

// blindCase is a picker that balances by what the servers say, made over
// peers on clock, and, for Prequal, the Prober whose answers a request
// waits for.
type blindCase struct {
	name        string
	utilization bool // the servers with the Middleware set a utilization (ReportedWRR reads it)
	make        func(t *testing.T, peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, *balancerhttp.Prober)
}

var blindCases = []blindCase{
	{"Prequal", false, func(t *testing.T, peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, *balancerhttp.Prober) {
		pr, err := balancerhttp.NewProber()
		require.NoError(t, err)
		b, err := balancer.PrequalSettings{Prober: pr}.New(peers, opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b, pr
	}},
	{"LeastConn+WithReportedLoad", false, func(t *testing.T, peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, *balancerhttp.Prober) {
		b, err := balancer.NewLeastConn(peers, append(opts, balancer.WithReportedLoad(10*time.Second, 4))...)
		require.NoError(t, err)
		return b, nil
	}},
	// One request at a time, P2CPeakEWMA sends nothing to the peer of
	// the highest estimate, which a slow first reply (a new connection)
	// keeps there for the decay's 10 s: a peer without replies has none
	// to judge by, and the watch says nothing of it until its 8th. The
	// decay of 50 ms (5 requests) spreads the picks as concurrent
	// requests would.
	{"P2CPeakEWMA+WithReportedLoad", false, func(t *testing.T, peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, *balancerhttp.Prober) {
		b, err := balancer.NewP2CPeakEWMA(peers, append(opts, balancer.WithReportedLoad(10*time.Second, 4), balancer.WithDecay(50*time.Millisecond))...)
		require.NoError(t, err)
		return b, nil
	}},
	{"ReportedWRR", true, func(t *testing.T, peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, *balancerhttp.Prober) {
		b, err := balancer.NewReportedWRR(peers, opts...)
		require.NoError(t, err)
		return b, nil
	}},
}

// blindRun sends requests through a Transport over the case's picker, the
// picker's clock 10 ms further at each, for 3 s of that clock; for
// Prequal each request waits until its probes are answered, so that the
// answers come in the order of the clock. It returns the events, the
// peers, the picker and when on its clock the run began.
func blindRun(t *testing.T, c blindCase, addrs []string) ([]balancer.Event, []*balancer.Peer, balancer.Balancer, time.Time) {
	t.Helper()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var ns atomic.Int64
	clock := func() time.Time { return start.Add(time.Duration(ns.Load())) }
	var peers []*balancer.Peer
	for _, a := range addrs {
		peers = append(peers, balancer.NewPeer(a))
	}
	var log blindLog
	b, pr := c.make(t, peers, balancer.WithClock(clock), balancer.WithEvents(log.hook))
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: b}, Timeout: 5 * time.Second}
	for range 300 {
		resp, err := client.Get("http://service/work")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode, "the fallback serves every request")
		resp.Body.Close()
		if pr != nil {
			q := b.(*balancer.Prequal)
			require.True(t, waitUntil(5*time.Second, func() bool {
				s := pr.Stats()
				return s.Answered+s.Failed+s.Dropped == q.ProbeStats().Sent
			}), "probes unanswered")
		}
		ns.Add(int64(10 * time.Millisecond))
	}
	return log.events(), peers, b, start
}

// TestBlind_e2e: each picker that balances by what the servers say, in
// front of four real servers on loopback, none, half or all of them
// behind loadreport's Middleware. Exactly the servers without it are
// reported blind, each once, within 2 s of the first request on the
// picker's clock, with the cause (the probe's 404, no report in the
// replies); PeerStats.Blind and BlindCount agree; and every request is
// served (the fallback). With the Middleware everywhere there is no
// event.
func TestBlind_e2e(t *testing.T) {
	rollouts := []struct {
		name    string
		support func(i int) bool
	}{
		{"none", func(int) bool { return false }},
		{"half", func(i int) bool { return i%2 == 0 }},
		{"all", func(int) bool { return true }},
	}
	for _, c := range blindCases {
		for _, r := range rollouts {
			t.Run(c.name+"/"+r.name, func(t *testing.T) {
				addrs := blindBackends(t, 4, r.support, c.utilization)
				evs, peers, b, start := blindRun(t, c, addrs)
				var want, got []string
				for i, a := range addrs {
					if !r.support(i) {
						want = append(want, a)
					}
				}
				for _, e := range evs {
					require.Equal(t, balancer.EventPeerBlind, e.Kind, "no peer comes back: %v", e)
					got = append(got, e.Peer.Addr())
					assert.LessOrEqual(t, e.Time.Sub(start), 2*time.Second, "%s blind at %v", e.Peer.Addr(), e.Time.Sub(start))
					if c.name == "Prequal" {
						assert.ErrorContains(t, e.Err, "probe of "+e.Peer.Addr()+": status 404 Not Found")
						assert.GreaterOrEqual(t, e.Misses, 3)
					} else {
						assert.ErrorIs(t, e.Err, balancer.ErrNoLoadReport)
						assert.GreaterOrEqual(t, e.Misses, 8)
					}
					t.Logf("%v %s after %v: %d misses: %v", e.Kind, e.Peer.Addr(), e.Time.Sub(start), e.Misses, e.Err)
				}
				assert.ElementsMatch(t, want, got, "the peers reported blind")
				for _, p := range peers {
					assert.Equal(t, slices.Contains(want, p.Addr()), p.Stats().Blind, p.Addr())
				}
				assert.EqualValues(t, len(want), b.(interface{ BlindCount() uint64 }).BlindCount())
			})
		}
	}
}

// TestBlind_e2eUnusableReports: ReportedWRR in front of servers whose
// Middleware sets no utilization. Their reports carry none, which A58
// ignores, so ReportedWRR runs as SmoothWRR: every server is reported
// blind, the cause ErrUnusableLoadReport.
func TestBlind_e2eUnusableReports(t *testing.T) {
	c := blindCases[len(blindCases)-1]
	require.Equal(t, "ReportedWRR", c.name)
	c.utilization = false
	addrs := blindBackends(t, 4, func(int) bool { return true }, false)
	evs, _, _, start := blindRun(t, c, addrs)
	var got []string
	for _, e := range evs {
		require.Equal(t, balancer.EventPeerBlind, e.Kind)
		assert.True(t, errors.Is(e.Err, balancer.ErrUnusableLoadReport), "%v", e.Err)
		assert.LessOrEqual(t, e.Time.Sub(start), 2*time.Second)
		got = append(got, e.Peer.Addr())
	}
	assert.ElementsMatch(t, addrs, got)
}

// TestBlind_e2eSeen: Prequal in front of a server without the probe
// handler, which then gets it (a rollout reaching it): blind, then seen
// at its first answer.
func TestBlind_e2eSeen(t *testing.T) {
	var rolled atomic.Bool
	m, err := loadreport.New()
	require.NoError(t, err)
	plain := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == loadreport.DefaultProbePath {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	withMiddleware := m.Handler(plain)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rolled.Load() {
			withMiddleware.ServeHTTP(w, r)
			return
		}
		plain(w, r)
	}))
	defer srv.Close()
	other := blindBackends(t, 1, func(int) bool { return true }, false)
	var ns atomic.Int64
	clock := func() time.Time { return time.Unix(0, ns.Load()) }
	var log blindLog
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	b, err := balancer.PrequalSettings{Prober: pr}.New([]*balancer.Peer{balancer.NewPeer(addrOf(srv)), balancer.NewPeer(other[0])},
		balancer.WithClock(clock), balancer.WithEvents(log.hook))
	require.NoError(t, err)
	defer b.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: b}, Timeout: 5 * time.Second}
	var kinds []balancer.EventKind
	for i := range 600 {
		if i == 300 {
			rolled.Store(true)
		}
		resp, err := client.Get("http://service/work")
		require.NoError(t, err)
		resp.Body.Close()
		require.True(t, waitUntil(5*time.Second, func() bool {
			s := pr.Stats()
			return s.Answered+s.Failed+s.Dropped == b.ProbeStats().Sent
		}))
		ns.Add(int64(10 * time.Millisecond))
	}
	for _, e := range log.events() {
		assert.Equal(t, addrOf(srv), e.Peer.Addr())
		kinds = append(kinds, e.Kind)
	}
	assert.Equal(t, []balancer.EventKind{balancer.EventPeerBlind, balancer.EventPeerSeen}, kinds)
	assert.Zero(t, b.BlindCount()-1)
}
