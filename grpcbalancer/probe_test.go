package grpcbalancer

import (
	"context"
	"math"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
	"github.com/lbgo/balancer/loadreport/grpcreport"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
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

// withoutCauses checks that each Failed answer of got carries its cause,
// naming the peer at addr (Prequal's EventPeerBlind shows it), and
// returns got with the causes cleared.
func withoutCauses(t *testing.T, got []lbgo.ProbeAnswer, addr string) []lbgo.ProbeAnswer {
	t.Helper()
	for i := range got {
		if got[i].Failed {
			assert.ErrorContains(t, got[i].Err, "probe of "+addr+": ")
			got[i].Err = nil
		}
	}
	return got
}

// probeOnly returns a probing algorithm for the config parser: RoundRobin
// declaring WithProber.
func probeOnly() lbgo.Algorithm {
	a, _ := lbgo.AlgorithmNamed("RoundRobin")
	a.Name, a.Options = "Probing", []string{"WithProber"}
	return a
}

// TestProbeMethod: the policies call the method grpcreport serves.
func TestProbeMethod(t *testing.T) { assert.Equal(t, grpcreport.ProbeMethod, ProbeMethod) }

func TestParseConfig_probeFields(t *testing.T) {
	rr, _ := lbgo.AlgorithmNamed("RoundRobin")
	tests := []struct {
		alg  lbgo.Algorithm
		js   string
		want probeSettings
		err  string
	}{
		{probeOnly(), `{}`, probeSettings{250 * time.Millisecond, 16, 128}, ""},
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

// probeServer is a real gRPC server on loopback counting its RPCs in a
// loadreport.Tracker through grpcreport's interceptors, with grpcreport's
// probe service if probes is set. A health check with the metadata
// "hold" is held until the test ends; with stall set, so is every probe.
type probeServer struct {
	addr    string
	srv     *grpc.Server
	tr      *loadreport.Tracker
	release chan struct{}
	held    sync.WaitGroup     // the clients' held calls
	calls   chan struct{}      // a value per probe that reached the server, while there is room
	probes  atomic.Int64       // probes that reached the server
	served  atomic.Int64       // health checks served, not held
	delay   atomic.Int64       // ns each health check not held takes
	fail    atomic.Bool        // answer health checks not held UNAVAILABLE, after the delay
	failed  atomic.Int64       // health checks answered UNAVAILABLE
	serve   func(net.Listener) // starts srv on a listener
}

// restart serves s again on its address, after srv.Stop.
func (s *probeServer) restart(t testing.TB) {
	lis, err := net.Listen("tcp", s.addr)
	require.NoError(t, err)
	s.serve(lis)
}

func startProbeServer(t testing.TB, probes, stall bool) *probeServer {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &probeServer{addr: lis.Addr().String(), release: make(chan struct{}), calls: make(chan struct{}, 1024)}
	s.tr, err = loadreport.NewTracker()
	require.NoError(t, err)
	rep, err := grpcreport.New(s.tr)
	require.NoError(t, err)
	hold := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		if info.FullMethod == ProbeMethod {
			s.probes.Add(1)
			select {
			case s.calls <- struct{}{}:
			default: // nobody waits for this many
			}
		}
		held := len(md.Get("hold")) > 0
		if info.FullMethod == healthCheck && !held {
			if d := time.Duration(s.delay.Load()); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return nil, status.FromContextError(ctx.Err()).Err()
				}
			}
			if s.fail.Load() {
				s.failed.Add(1)
				return nil, status.Error(codes.Unavailable, "failing")
			}
			s.served.Add(1)
		}
		if info.FullMethod == ProbeMethod && stall || held {
			select {
			case <-s.release:
			case <-ctx.Done():
				return nil, status.FromContextError(ctx.Err()).Err()
			}
		}
		return h(ctx, req)
	}
	s.serve = func(lis net.Listener) {
		s.srv = grpc.NewServer(append(rep.ServerOptions(), grpc.ChainUnaryInterceptor(hold))...)
		healthpb.RegisterHealthServer(s.srv, health.NewServer())
		if probes {
			require.NoError(t, grpcreport.RegisterProbe(s.srv, s.tr))
		}
		go s.srv.Serve(lis)
	}
	s.serve(lis)
	t.Cleanup(func() {
		close(s.release)
		s.held.Wait()
		s.srv.Stop()
	})
	return s
}

const healthCheck = "/grpc.health.v1.Health/Check"

// hold starts n health checks through conn that s holds in flight, and
// returns once s's Tracker counts them.
func (s *probeServer) hold(t *testing.T, conn *grpc.ClientConn, n int) {
	want := s.tr.InFlight() + int64(n)
	client := healthpb.NewHealthClient(conn)
	for range n {
		s.held.Go(func() {
			ctx := metadata.AppendToOutgoingContext(context.Background(), "hold", "1")
			_, _ = client.Check(ctx, &healthpb.HealthCheckRequest{})
		})
	}
	require.True(t, waitFor(5*time.Second, func() bool { return s.tr.InFlight() == want }),
		"in flight %d, want %d", s.tr.InFlight(), want)
}

// dialProbing dials the servers with lbgo_roundrobin made to probe, and
// returns the policy once every peer is up.
func dialProbing(t testing.TB, config string, servers ...*probeServer) (*grpc.ClientConn, *lbBalancer) {
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
	with := startProbeServer(t, true, false)
	without := startProbeServer(t, false, false)
	_, lb := dialProbing(t, `{}`, with, without)
	pr := proberOf(lb)
	require.NotNil(t, pr)
	// Held through a channel of its own, straight to the server.
	direct, err := grpc.NewClient(with.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	defer direct.Close()
	with.hold(t, direct, 7)
	r := newProbeReceiver()
	peers := peersOf(lb)
	for range 3 {
		pr.Probe(peers[with.addr], r)
		pr.Probe(peers[without.addr], r)
	}
	r.wait(t, 6)
	// The server's own answer, asked directly; the held calls have not
	// ended, so it stands still.
	rif, latency, err := grpcreport.Probe(context.Background(), direct)
	require.NoError(t, err)
	assert.Equal(t, 7.0, rif, "the probes are not requests in flight")
	for _, a := range r.of(with.addr) {
		assert.Equal(t, 7.0, a.InFlight, "7 calls held")
		assert.Equal(t, latency, a.Latency)
		assert.Positive(t, a.RoundTrip)
		assert.False(t, a.Failed)
	}
	assert.Len(t, r.of(with.addr), 3)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}, {Failed: true}, {Failed: true}}, withoutCauses(t, r.of(without.addr), without.addr))
	s := pr.stats()
	// Every failure was the server's without the probe service.
	assert.Equal(t, codes.Unimplemented, status.Code(s.LastError), "%v", s.LastError)
	assert.ErrorContains(t, s.LastError, "probe of "+without.addr+": ")
	s.LastError = nil
	assert.Equal(t, ProbeStats{Sent: 6, Answered: 3, Failed: 3}, s)
	assert.Equal(t, int64(4), with.probes.Load(), "the server saw each probe once, and the direct one")
}

// TestProber_timeout: a server holding the probe RPC past probeTimeout
// gets a Failed answer.
func TestProber_timeout(t *testing.T) {
	held := startProbeServer(t, true, true)
	_, lb := dialProbing(t, `{"probeTimeout":"50ms"}`, held)
	pr := proberOf(lb)
	r := newProbeReceiver()
	start := time.Now()
	pr.Probe(peersOf(lb)[held.addr], r)
	r.wait(t, 1)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}}, withoutCauses(t, r.of(held.addr), held.addr))
	err := pr.stats().LastError
	assert.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	assert.ErrorContains(t, err, "probe of "+held.addr+": ")
}

// TestProber_notReady: once a server is gone, its SubConn is not READY and
// its probe fails without an RPC; once it is back, the probe reaches it
// on the new connection (gRPC closed the SubConn's producer at the state
// change; the policy took a new one at READY).
func TestProber_notReady(t *testing.T) {
	a, b := startProbeServer(t, true, false), startProbeServer(t, true, false)
	_, lb := dialProbing(t, `{}`, a, b)
	peers := peersOf(lb)
	b.srv.Stop()
	require.True(t, waitFor(5*time.Second, func() bool { return peers[b.addr].State().Down }))
	r := newProbeReceiver()
	pr := proberOf(lb)
	pr.Probe(peers[b.addr], r)
	pr.Probe(peers[a.addr], r)
	r.wait(t, 2)
	assert.Equal(t, []lbgo.ProbeAnswer{{Failed: true}}, withoutCauses(t, r.of(b.addr), b.addr))
	assert.False(t, r.of(a.addr)[0].Failed)
	err := pr.stats().LastError
	assert.ErrorIs(t, err, errNotReady)
	assert.EqualError(t, err, "probe of "+b.addr+": the peer's SubConn is not READY")

	// Back on the same address: the SubConn is READY again, with a new
	// connection, and the probe goes through it.
	b.restart(t)
	require.True(t, waitFor(5*time.Second, func() bool { return !peers[b.addr].State().Down }), "not back up")
	pr.Probe(peers[b.addr], r)
	r.wait(t, 1)
	got := r.of(b.addr)
	require.Len(t, got, 2)
	assert.False(t, got[1].Failed, "the probe after the restart")
}

// TestProber_closedWithTheChannel: closing the channel closes the policy's
// prober, cutting a held probe short unanswered; no goroutine is left and
// a later Probe drops.
func TestProber_closedWithTheChannel(t *testing.T) {
	before := runtime.NumGoroutine()
	held := startProbeServer(t, true, true)
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
	held := startProbeServer(t, true, true)
	_, lb := dialProbing(t, `{"probeTimeout":"1h","probeWorkers":1,"probeQueue":2000}`, held)
	pr := proberOf(lb)
	r := newProbeReceiver()
	peer := peersOf(lb)[held.addr]
	assert.Zero(t, testing.AllocsPerRun(1000, func() { pr.Probe(peer, r) }))
}
