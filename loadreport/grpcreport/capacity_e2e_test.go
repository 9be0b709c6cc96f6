package grpcreport_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/internal/capacity"
	"github.com/lbgo/balancer/loadreport"
	"github.com/lbgo/balancer/loadreport/grpcreport"
	"google.golang.org/grpc"
	_ "google.golang.org/grpc/balancer/weightedroundrobin" // registers weighted_round_robin
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// The capacity end-to-end test over gRPC: the scenario of package
// internal/capacity (which derives the shares and the tolerance) on real
// grpc-go servers running the Reporter, so that each reply carries its
// report in grpc-go's per-call ORCA trailer, and four ClientConns, each
// with its own policy instance and so its own picker.

// newCapServer starts a grpc-go server on loopback serving the health
// service with sp's workers: a unary interceptor inside the Reporter's
// makes each call wait for a free worker and hold it for a service time.
// The Reporter reports the server's BusyMeter through its Tracker, and
// the probe service (RegisterProbe) answers probes from it at once.
func newCapServer(t *testing.T, sp capacity.Spec) *capacity.Server {
	t.Helper()
	s := capacity.NewServer(sp)
	tr, err := loadreport.NewTracker(loadreport.WithWindow(capacity.Window), loadreport.WithUtilization(s.Busy.Value))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := grpcreport.New(tr)
	if err != nil {
		t.Fatal(err)
	}
	work := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if info.FullMethod == grpcreport.ProbeMethod {
			return h(ctx, req)
		}
		if err := s.Serve(ctx); err != nil {
			return nil, err
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(append(rep.ServerOptions(), grpc.ChainUnaryInterceptor(work))...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	if err := grpcreport.RegisterProbe(srv, tr); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.Addr = lis.Addr().String()
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

// capSchemes numbers the manual resolvers' schemes.
var capSchemes atomic.Int64

// capDial connects to the servers through a manual resolver of its own
// with the loadBalancingConfig lb: one policy instance, one picker.
func capDial(t *testing.T, lb string, servers []*capacity.Server) *grpc.ClientConn {
	t.Helper()
	r := manual.NewBuilderWithScheme(fmt.Sprintf("capacity%d", capSchemes.Add(1)))
	var addrs []resolver.Address
	for _, s := range servers {
		addrs = append(addrs, resolver.Address{Addr: s.Addr})
	}
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(r.Scheme()+":///servers", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[`+lb+`]}`))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	return conn
}

// newCapFleet is one policy's fleet: servers of its own and
// capacity.Clients ClientConns, each with its own policy instance and so
// its own picker. Its calls are health checks with a 5 s deadline, each
// counted to the server of the peer it went to.
func newCapFleet(t *testing.T, lb string) *capacity.Fleet {
	t.Helper()
	f := &capacity.Fleet{}
	names := map[string]string{} // by address
	for _, sp := range capacity.Specs {
		s := newCapServer(t, sp)
		f.Servers = append(f.Servers, s)
		names[s.Addr] = s.Name
	}
	var conns []*grpc.ClientConn
	for range capacity.Clients {
		conns = append(conns, capDial(t, lb, f.Servers))
	}
	f.NewCall = func(g int) func() (string, error) {
		client := healthpb.NewHealthClient(conns[g/capacity.Conc])
		return func() (string, error) {
			var p peer.Peer
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
			cancel()
			if err != nil || p.Addr == nil {
				return "", err
			}
			return names[p.Addr.String()], nil
		}
	}
	return f
}

// capWRRSettings are the short settings for both weighted round robins:
// no blackout, weights recomputed every 100 ms, a report expiring after
// 2 s.
const capWRRSettings = `"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","weightExpirationPeriod":"2s"`

// capReportedLoad makes the load-aware policies weigh the servers'
// reported requests in flight (rif, the calls queued for a worker
// included) as C3 does, for capacity.Clients clients, each report fading over a
// second.
const capReportedLoad = `"reportedLoad":{"window":"1s","clients":4}`

// TestCapacity_endToEnd runs the scenario for every policy at once, each
// on a fleet of its own, so that their latencies come from the same
// moments of the machine: lbgo_reportedwrr's shares and grpc-go's own
// weighted_round_robin's (the same reports, read by the real peer) must
// follow capacity within capacity.ShareTol before and after the change; round
// robin, the control, must miss. The p99s are logged, not asserted: over
// 20 runs, 10 under -race (measured while a late timer still held a
// server's worker), lbgo_reportedwrr's ran 0.85 to 1.55 times
// lbgo_p2cpeakewma's and round robin's 1.22 to 1.97 times, so a bound
// that holds would pass round robin too (balancerhttp's capacity test
// says more). P2CPeakEWMA's and LeastConn's shares, also with the
// servers' reported requests in flight (+rif, reportedLoad), are logged
// too (not under -race, where only the checked fleets and the control
// run). About 4.5 s on a quiet machine; on a busy one the windows stretch
// (capacity.Schedule) to 17 s at most, and a run whose windows still
// hold too few calls checks no share (it says so and skips).
func TestCapacity_endToEnd(t *testing.T) {
	type variant struct {
		name    string
		lb      string
		shares  bool // must follow capacity
		control bool // must not
	}
	variants := []variant{
		{name: "ReportedWRR", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("ReportedWRR"), capWRRSettings), shares: true},
		{name: "P2CPeakEWMA", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("P2CPeakEWMA"))},
		{name: "LeastConn", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("LeastConn"))},
		{name: "P2CPeakEWMA+rif", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("P2CPeakEWMA"), capReportedLoad)},
		{name: "LeastConn+rif", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("LeastConn"), capReportedLoad)},
		{name: "weighted_round_robin", lb: `{"weighted_round_robin":{` + capWRRSettings + `}}`, shares: true},
		{name: "RoundRobin", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("RoundRobin")), control: true},
	}
	if raceEnabled {
		// Under the detector's cost the clients of seven fleets began a
		// few requests a second on a busy machine: the fleets nothing is
		// asserted on stay out, leaving their CPU to the others.
		var kept []variant
		for _, v := range variants {
			if v.shares || v.control {
				kept = append(kept, v)
			}
		}
		variants = kept
	}
	var checked []int // the variants that must follow capacity
	for i, v := range variants {
		if v.shares {
			checked = append(checked, i)
		}
	}
	results := capacity.RunChecked(t.Context(), t.Logf, func() []*capacity.Fleet {
		fleets := make([]*capacity.Fleet, len(variants))
		for i, v := range variants {
			fleets[i] = newCapFleet(t, v.lb)
		}
		return fleets
	}, checked, capacity.Schedule)
	ran := results[0].Phases
	t.Logf("every client had heard from every server %v after the clients began, the schedule's start; windows measured: %v before the change, %v after",
		results[0].Heard.Round(time.Millisecond), ran.Before.Round(time.Millisecond), ran.After.Round(time.Millisecond))
	for i, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			r := results[i]
			t.Logf("%s: shares big/medium/small before %s%% (%d calls), after %s%% (%d); realized capacity %s%%, %s%%; p99 before %v, after %v, both %v",
				v.name, capacity.FormatShares(r.Before), r.NBefore, capacity.FormatShares(r.After), r.NAfter, capacity.FormatShares(r.CapBefore), capacity.FormatShares(r.CapAfter),
				r.P99Before.Round(time.Millisecond), r.P99After.Round(time.Millisecond), r.P99.Round(time.Millisecond))
			if len(r.Errs) > 0 {
				t.Fatalf("%d calls failed, first: %v", len(r.Errs), r.Errs[0])
			}
			if r.Short {
				t.Skipf("the machine was too busy: a window held fewer than %d calls of some fleet in %v and %v: the shares tell nothing at the tolerance", capacity.Schedule.Requests, r.Phases.Before.Round(time.Millisecond), r.Phases.After.Round(time.Millisecond))
			}
			mb, ma := capacity.ShareMisses(r.Before, capacity.SharesBefore, capacity.ShareTol), capacity.ShareMisses(r.After, capacity.SharesAfter, capacity.ShareTol)
			switch {
			case v.shares:
				if len(mb)+len(ma) > 0 {
					t.Errorf("shares off capacity by more than %.0f points: before the change %v, after %v; by client, before:%s after:%s",
						100*capacity.ShareTol, mb, ma, r.ClientsBefore, r.ClientsAfter)
				}
			case v.control:
				if len(mb) == 0 || len(ma) == 0 {
					t.Errorf("the control follows capacity (misses before %v, after %v): the check tells nothing", mb, ma)
				}
			}
		})
	}
}
