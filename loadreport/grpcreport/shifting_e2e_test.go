package grpcreport_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/internal/capacity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// The herding end-to-end test over gRPC: capacity.Fleet16 (ten grpc-go
// servers of one worker on loopback running the Reporter, their speeds
// redrawn about every second; sixteen ClientConns, each with its own
// policy instance and so its own picker, sending Poisson arrivals at
// 0.75 of capacity, each call given up after 3 s).

// newShiftFleet is one policy's fleet of sc: servers of its own and
// sc.Clients ClientConns, each with its own policy instance. Its calls
// are health checks with sc.Timeout as deadline, each counted to the
// server of the peer it went to.
func newShiftFleet(t *testing.T, sc capacity.Shifting, lb string) *capacity.Fleet {
	t.Helper()
	f := &capacity.Fleet{}
	names := map[string]string{} // by address
	for _, sp := range sc.Specs() {
		s := newCapServer(t, sp)
		f.Servers = append(f.Servers, s)
		names[s.Addr] = s.Name
	}
	var conns []*grpc.ClientConn
	for range sc.Clients {
		conns = append(conns, capDial(t, lb, f.Servers))
	}
	f.NewCall = func(c int) func() (string, error) {
		client := healthpb.NewHealthClient(conns[c])
		return func() (string, error) {
			var p peer.Peer
			ctx, cancel := context.WithTimeout(context.Background(), sc.Timeout)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p))
			cancel()
			if err != nil || p.Addr == nil {
				if err == nil {
					err = status.Error(codes.Internal, "no peer")
				}
				return "", err
			}
			return names[p.Addr.String()], nil
		}
	}
	return f
}

// shiftReportedLoad is the report-driven policy's setting the README
// advises for a fleet: reports fading over 10 s, 16 clients.
var shiftReportedLoad = fmt.Sprintf(`"reportedLoad":{"window":"10s","clients":%d}`, capacity.Fleet16.Clients)

// TestShifting_endToEnd runs capacity.Fleet16 for every policy at once,
// each on servers of its own on the same schedule, and logs each one's
// latencies and shares. It takes about 15 s, with -race too: -short
// skips it.
func TestShifting_endToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("15 s of real servers: skipped with -short")
	}
	sc := capacity.Fleet16
	type variant struct{ name, lb string }
	variants := []variant{
		{name: "P2CPeakEWMA", lb: fmt.Sprintf(`{%q:{}}`, grpcbalancer.PolicyName("P2CPeakEWMA"))},
		{name: "LeastConn+rif", lb: fmt.Sprintf(`{%q:{%s}}`, grpcbalancer.PolicyName("LeastConn"), shiftReportedLoad)},
	}
	fleets := make([]*capacity.Fleet, len(variants))
	for i, v := range variants {
		fleets[i] = newShiftFleet(t, sc, v.lb)
	}
	run := capacity.RunShifting(t.Context(), fleets, sc)
	results := run.Fleets
	t.Logf("arrivals late behind their times: median %v, p99 %v, max %v", run.LateP50, run.LateP99, run.LateMax)
	for i, v := range variants {
		r := results[i]
		t.Logf("%s: %d calls, %d gave up after %v; p50 %v, p99 %v, mean %v; shares %s%%",
			v.name, r.N, r.Timeouts, sc.Timeout, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Mean.Round(time.Millisecond), capacity.FormatShares(r.Shares))
		if len(r.Errs) > 0 {
			t.Errorf("%s: %d calls failed, first: %v", v.name, len(r.Errs), r.Errs[0])
		}
	}
}
