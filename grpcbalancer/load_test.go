package grpcbalancer

import (
	"context"
	"encoding/binary"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// orcaBackend is a real grpc-go server on loopback serving the health
// service; set, called on every RPC, makes its per-call report, through
// grpc/orca's CallMetricsRecorder (orca true) or a trailer of its own.
func orcaBackend(t *testing.T, orcaOn bool, set func(ctx context.Context)) string {
	t.Helper()
	intercept := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		set(ctx)
		return h(ctx, req)
	}
	var opts []grpc.ServerOption
	if orcaOn {
		opts = append(opts, orca.CallMetricsServerOption(nil)) // its interceptor first, so the recorder is in ctx
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(intercept))
	srv := grpc.NewServer(opts...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

// protoDouble is field f of a protobuf message as a double, from the wire
// format's rules (tag f<<3|1, eight little-endian bytes).
func protoDouble(f int, v float64) []byte {
	b := []byte{byte(f<<3 | 1), 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(b[1:], math.Float64bits(v))
	return b
}

// TestLoadReportsReachDone: real grpc-go servers send per-call ORCA
// reports in the endpoint-load-metrics-bin trailer, grpc/orca's recorder
// on three of them; the policy's Done gets each as Outcome.Load with the
// values the server recorded (utilization as gRFC A58 chooses it), a
// server that sends none gives nil, and the reports that cannot be trusted
// (NaN, negative, a truncated protobuf) give nil, are counted, and fail no
// RPC.
func TestLoadReportsReachDone(t *testing.T) {
	type want struct {
		load *lbgo.ServerLoad
		bad  bool
	}
	var addrs []resolver.Address
	wants := map[string]want{}
	add := func(addr string, w want) {
		addrs = append(addrs, resolver.Address{Addr: addr})
		wants[addr] = w
	}
	add(orcaBackend(t, true, func(ctx context.Context) {
		r := orca.CallMetricsRecorderFromContext(ctx)
		r.SetCPUUtilization(0.25)
		r.SetQPS(120.5)
		r.SetEPS(1.5)
		r.SetNamedMetric("rif", 3)
	}), want{load: &lbgo.ServerLoad{Utilization: 0.25, RPS: 120.5, EPS: 1.5, InFlight: 3, HasInFlight: true}})
	add(orcaBackend(t, true, func(ctx context.Context) {
		r := orca.CallMetricsRecorderFromContext(ctx)
		r.SetCPUUtilization(0.5)
		r.SetApplicationUtilization(0.875)
		r.SetMemoryUtilization(0.9)
	}), want{load: &lbgo.ServerLoad{Utilization: 0.875}})
	add(orcaBackend(t, true, func(ctx context.Context) {}), want{}) // the recorder, nothing recorded: no trailer
	add(orcaBackend(t, false, func(ctx context.Context) {}), want{})
	for _, bad := range [][]byte{
		protoDouble(1, math.NaN()),
		protoDouble(7, -2),
		protoDouble(1, 0.5)[:6],
	} {
		add(orcaBackend(t, false, func(ctx context.Context) {
			_ = grpc.SetTrailer(ctx, metadata.Pairs("endpoint-load-metrics-bin", string(bad)))
		}), want{bad: true})
	}

	type seen struct {
		addr string
		load *lbgo.ServerLoad
	}
	var mu sync.Mutex
	var got []seen
	f := func(p *lbgo.Peer, o lbgo.Outcome) {
		s := seen{addr: p.Addr()}
		if o.Load != nil {
			l := *o.Load
			s.load = &l
		}
		mu.Lock()
		got = append(got, s)
		mu.Unlock()
	}
	testDone.Store(&f)
	t.Cleanup(func() { testDone.Store(nil) })

	r := manual.NewBuilderWithScheme("orca")
	r.InitialState(resolver.State{Addresses: addrs})
	conn, lb := dial(t, r, serviceConfig(PolicyName("RoundRobin"), `{}`, 2))
	if !waitFor(5*time.Second, func() bool { return allReady(lb) }) {
		t.Fatal("the backends did not all become ready")
	}
	badBefore := BadLoadReports()
	client := healthpb.NewHealthClient(conn)
	const rounds = 4
	for i := range rounds * len(addrs) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}

	mu.Lock()
	defer mu.Unlock()
	per := map[string]int{}
	var bad uint64
	for _, s := range got {
		per[s.addr]++
		w := wants[s.addr]
		if w.bad {
			bad++
		}
		switch {
		case w.load == nil && s.load != nil:
			t.Errorf("%s: Load %+v, want none", s.addr, *s.load)
		case w.load != nil && s.load == nil:
			t.Errorf("%s: no Load, want %+v", s.addr, *w.load)
		case w.load != nil && *w.load != *s.load:
			t.Errorf("%s: Load %+v, want %+v", s.addr, *s.load, *w.load)
		}
	}
	for _, a := range addrs {
		if per[a.Addr] == 0 {
			t.Errorf("%s: no attempt reported", a.Addr)
		}
	}
	if d := BadLoadReports() - badBefore; d != bad || bad == 0 {
		t.Errorf("BadLoadReports grew by %d, want %d (the attempts on the hostile servers)", d, bad)
	}
}

// LoadOf allocates nothing with a ServerLoad to write to, with a report or
// without, and the policy's Pick and Done allocate no more with a report
// than without.
func TestLoadOfAllocs(t *testing.T) {
	var dst lbgo.ServerLoad
	for _, info := range []balancer.DoneInfo{
		{},
		{ServerLoad: loadReportForTest()},
	} {
		allocs := testing.AllocsPerRun(1000, func() { _, _ = LoadOf(info, &dst) })
		if allocs != 0 {
			t.Errorf("LoadOf(%v): %v allocations", info.ServerLoad, allocs)
		}
	}

	a, err := lbgo.AlgorithmNamed("SmoothWRR")
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	peers := []*lbgo.Peer{cfg.newPeer("10.0.0.1:443", 1, false, &fakeSubConn{}), cfg.newPeer("10.0.0.2:443", 1, false, &fakeSubConn{})}
	lb, err := a.New(peers, cfg.opts...)
	if err != nil {
		t.Fatal(err)
	}
	p := &picker{b: &lbBalancer{name: PolicyName("SmoothWRR")}, lb: lb, cfg: cfg}
	pickDone := func(info balancer.DoneInfo) float64 {
		return testing.AllocsPerRun(1000, func() {
			res, err := p.Pick(balancer.PickInfo{Ctx: context.Background()})
			if err != nil {
				t.Fatal(err)
			}
			res.Done(info)
		})
	}
	without := pickDone(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
	with := pickDone(balancer.DoneInfo{BytesSent: true, BytesReceived: true, ServerLoad: loadReportForTest()})
	if with != without {
		t.Errorf("Pick+Done: %v allocations with a report, %v without", with, without)
	}
	t.Logf("Pick+Done: %v allocations with a report and without", with)
}

func loadReportForTest() *v3orcapb.OrcaLoadReport {
	return &v3orcapb.OrcaLoadReport{CpuUtilization: 0.5, RpsFractional: 10, NamedMetrics: map[string]float64{"rif": 2}}
}
