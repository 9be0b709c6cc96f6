package grpcbalancer

import (
	"context"
	"math"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbgo "github.com/lbgo/balancer"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// probeReceiver records the probe answers it is given.
type probeReceiver struct {
	mu  sync.Mutex
	got map[string][]lbgo.ProbeAnswer // by the peer's address
	n   chan struct{}
}

func newProbeReceiver() *probeReceiver {
	return &probeReceiver{got: map[string][]lbgo.ProbeAnswer{}, n: make(chan struct{}, 1024)}
}

func (r *probeReceiver) Answer(p *lbgo.Peer, a lbgo.ProbeAnswer) error {
	r.mu.Lock()
	r.got[p.Addr()] = append(r.got[p.Addr()], a)
	r.mu.Unlock()
	r.n <- struct{}{}
	return nil
}

func (r *probeReceiver) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.n:
		case <-time.After(10 * time.Second):
			t.Fatal("a probe answer did not come in 10 s")
		}
	}
}

func (r *probeReceiver) of(addr string) []lbgo.ProbeAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]lbgo.ProbeAnswer(nil), r.got[addr]...)
}

// probeOnly returns a probing algorithm for the config parser: RoundRobin
// declaring WithProber.
func probeOnly() lbgo.Algorithm {
	a, _ := lbgo.AlgorithmNamed("RoundRobin")
	a.Name, a.Options = "Probing", []string{"WithProber"}
	return a
}

func TestParseConfig_probeFields(t *testing.T) {
	rr, _ := lbgo.AlgorithmNamed("RoundRobin")
	tests := []struct {
		alg  lbgo.Algorithm
		js   string
		want probeSettings
		err  string
	}{
		{probeOnly(), `{}`, probeSettings{250 * time.Millisecond, 4, 64}, ""},
		{probeOnly(), `{"probeTimeout":"50ms","probeWorkers":2,"probeQueue":0}`, probeSettings{50 * time.Millisecond, 2, 0}, ""},
		{probeOnly(), `{"probeTimeout":"0s"}`, probeSettings{}, `probeTimeout "0s": out of (0, 1h0m0s]`},
		{probeOnly(), `{"probeTimeout":"2h"}`, probeSettings{}, `probeTimeout "2h": out of (0, 1h0m0s]`},
		{probeOnly(), `{"probeTimeout":"fast"}`, probeSettings{}, `probeTimeout "fast": not a duration`},
		{probeOnly(), `{"probeTimeout":5}`, probeSettings{}, `probeTimeout 5: not a string`},
		{probeOnly(), `{"probeWorkers":0}`, probeSettings{}, `probeWorkers 0: out of [1, 1024]`},
		{probeOnly(), `{"probeWorkers":2000}`, probeSettings{}, `probeWorkers 2000: out of [1, 1024]`},
		{probeOnly(), `{"probeQueue":-1}`, probeSettings{}, `probeQueue -1: out of [0, 65536]`},
		{probeOnly(), `{"probeQueue":1.5}`, probeSettings{}, `probeQueue 1.5: not an integer`},
		{rr, `{"probeTimeout":"50ms"}`, probeSettings{}, `probeTimeout "50ms": the picker RoundRobin does not probe`},
		{rr, `{"probeQueue":8}`, probeSettings{}, `probeQueue 8: the picker RoundRobin does not probe`},
	}
	for _, tt := range tests {
		t.Run(tt.js, func(t *testing.T) {
			cfg, err := parseConfig(tt.alg, []byte(tt.js))
			if tt.err != "" {
				assert.ErrorIs(t, err, ErrBadConfig)
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, cfg.probe)
		})
	}
}

func TestProbeAnswerOf(t *testing.T) {
	tests := []struct {
		name    string
		metrics map[string]float64
		want    lbgo.ProbeAnswer
		err     string
	}{
		{"both", map[string]float64{"rif": 4, "latency_ms": 2.5}, lbgo.ProbeAnswer{InFlight: 4, Latency: 2500 * time.Microsecond}, ""},
		{"no latency", map[string]float64{"rif": 0}, lbgo.ProbeAnswer{}, ""},
		{"others ignored", map[string]float64{"rif": 1, "latency_ms": 1, "queue": 9}, lbgo.ProbeAnswer{InFlight: 1, Latency: time.Millisecond}, ""},
		{"no rif", map[string]float64{"latency_ms": 1}, lbgo.ProbeAnswer{}, "no named_metrics.rif"},
		{"negative rif", map[string]float64{"rif": -1}, lbgo.ProbeAnswer{}, "rif=-1, want 0 to 1048576"},
		{"NaN rif", map[string]float64{"rif": math.NaN()}, lbgo.ProbeAnswer{}, "rif=NaN, want 0 to 1048576"},
		{"huge rif", map[string]float64{"rif": 1 << 21}, lbgo.ProbeAnswer{}, "rif=2.097152e+06, want 0 to 1048576"},
		{"infinite latency", map[string]float64{"rif": 1, "latency_ms": math.Inf(1)}, lbgo.ProbeAnswer{}, "latency_ms=+Inf, want 0 to 3.6e+06"},
		{"latency over an hour", map[string]float64{"rif": 1, "latency_ms": 3600001}, lbgo.ProbeAnswer{}, "latency_ms=3.600001e+06, want 0 to 3.6e+06"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := probeAnswerOf(&v3orcapb.OrcaLoadReport{NamedMetrics: tt.metrics})
			if tt.err != "" {
				assert.ErrorIs(t, err, lbgo.ErrInvalidProbe)
				assert.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, a)
		})
	}
}

// probeServer is a real gRPC server on loopback; with probes set it serves
// ProbeMethod answering rif, or holding the call until release closes.
type probeServer struct {
	addr    string
	srv     *grpc.Server
	rif     float64
	hold    bool
	release chan struct{}
	calls   chan struct{}
}

func startProbeServer(t *testing.T, probes bool, rif float64, hold bool) *probeServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &probeServer{addr: lis.Addr().String(), srv: grpc.NewServer(), rif: rif, hold: hold,
		release: make(chan struct{}), calls: make(chan struct{}, 64)}
	if probes {
		s.srv.RegisterService(&testProbeService, s)
	}
	go s.srv.Serve(lis)
	t.Cleanup(func() {
		close(s.release)
		s.srv.Stop()
	})
	return s
}

func (s *probeServer) probe(ctx context.Context) (*v3orcapb.OrcaLoadReport, error) {
	s.calls <- struct{}{}
	if s.hold {
		select {
		case <-s.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{"rif": s.rif, "latency_ms": 3}}, nil
}

// dialProbing dials the servers with lbgo_roundrobin made to probe, and
// returns the policy once every peer is up.
func dialProbing(t *testing.T, config string, servers ...*probeServer) (*grpc.ClientConn, *lbBalancer) {
	testProbeAll = true
	t.Cleanup(func() { testProbeAll = false })
	r := manual.NewBuilderWithScheme("probe")
	var as []resolver.Address
	for _, s := range servers {
		as = append(as, resolver.Address{Addr: s.addr})
	}
	r.InitialState(resolver.State{Addresses: as})
	conn, lb := dial(t, r, `{"loadBalancingConfig":[{"lbgo_roundrobin":`+config+`}]}`)
	require.True(t, waitFor(5*time.Second, func() bool {
		ps := peersOf(lb)
		for _, p := range ps {
			if p.State().Down {
				return false
			}
		}
		return len(ps) == len(servers)
	}), "the peers did not come up")
	return conn, lb
}

func proberOf(lb *lbBalancer) *grpcProber {
	lb.mu.Lock()
	defer lb.mu.Unlock()
	return lb.prober
}

// TestProber_realServers: a probe through each READY SubConn reaches its
// own server: the server with the probe service answers its rif, the one
// without answers UNIMPLEMENTED, which is a Failed answer.
func TestProber_realServers(t *testing.T) {
	with := startProbeServer(t, true, 7, false)
	without := startProbeServer(t, false, 0, false)
	_, lb := dialProbing(t, `{}`, with, without)
	pr := proberOf(lb)
	require.NotNil(t, pr)
	r := newProbeReceiver()
	peers := peersOf(lb)
	for range 3 {
		pr.Probe(peers[with.addr], r)
		pr.Probe(peers[without.addr], r)
	}
	r.wait(t, 6)
	for _, a := range r.of(with.addr) {
		assert.Equal(t, 7.0, a.InFlight)
		assert.Equal(t, 3*time.Millisecond, a.Latency)
		assert.Positive(t, a.RoundTrip)
		assert.False(t, a.Failed)
	}
	assert.Len(t, r.of(with.addr), 3)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}, {Failed: true}, {Failed: true}}, r.of(without.addr))
	assert.Equal(t, ProbeStats{Sent: 6, Answered: 3, Failed: 3}, pr.stats())
	assert.Len(t, with.calls, 3, "the server saw each probe once")
}

// TestProber_timeout: a server holding the probe RPC past probeTimeout
// gets a Failed answer.
func TestProber_timeout(t *testing.T) {
	held := startProbeServer(t, true, 1, true)
	_, lb := dialProbing(t, `{"probeTimeout":"50ms"}`, held)
	pr := proberOf(lb)
	r := newProbeReceiver()
	start := time.Now()
	pr.Probe(peersOf(lb)[held.addr], r)
	r.wait(t, 1)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}}, r.of(held.addr))
}

// TestProber_notReady: once a server is gone, its SubConn is not READY and
// its probe fails without an RPC.
func TestProber_notReady(t *testing.T) {
	a, b := startProbeServer(t, true, 1, false), startProbeServer(t, true, 2, false)
	_, lb := dialProbing(t, `{}`, a, b)
	peers := peersOf(lb)
	b.srv.Stop()
	require.True(t, waitFor(5*time.Second, func() bool { return peers[b.addr].State().Down }))
	r := newProbeReceiver()
	pr := proberOf(lb)
	pr.Probe(peers[b.addr], r)
	pr.Probe(peers[a.addr], r)
	r.wait(t, 2)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}}, r.of(b.addr))
	assert.Equal(t, 1.0, r.of(a.addr)[0].InFlight)
}

// TestProber_closedWithTheChannel: closing the channel closes the policy's
// prober, cutting a held probe short unanswered; no goroutine is left and
// a later Probe drops.
func TestProber_closedWithTheChannel(t *testing.T) {
	before := runtime.NumGoroutine()
	held := startProbeServer(t, true, 1, true)
	conn, lb := dialProbing(t, `{"probeTimeout":"1h"}`, held)
	pr := proberOf(lb)
	r := newProbeReceiver()
	peer := peersOf(lb)[held.addr]
	pr.Probe(peer, r)
	<-held.calls
	require.NoError(t, conn.Close())
	assert.Equal(t, ProbeStats{Sent: 1, Dropped: 1}, pr.stats())
	pr.Probe(peer, r)
	assert.Equal(t, ProbeStats{Sent: 1, Dropped: 2}, pr.stats())
	assert.Empty(t, r.of(held.addr))
	held.srv.Stop()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), before)
}

// TestProber_probeAllocatesNothing: the policy's Probe allocates nothing.
func TestProber_probeAllocatesNothing(t *testing.T) {
	held := startProbeServer(t, true, 1, true)
	_, lb := dialProbing(t, `{"probeTimeout":"1h","probeWorkers":1,"probeQueue":2000}`, held)
	pr := proberOf(lb)
	r := newProbeReceiver()
	peer := peersOf(lb)[held.addr]
	assert.Zero(t, testing.AllocsPerRun(1000, func() { pr.Probe(peer, r) }))
}
