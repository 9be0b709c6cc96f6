package grpcreport

import (
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/lbgo/balancer/grpcbalancer" // registers the lbgo_* policies
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
)

// reportedWRRName is balancer.ReportedWRR's gRPC policy; it runs with
// the settings of wrrConfig (no blackout, the 0.1 s update period, the
// 3 min expiration) and failure accounting off, as grpc-go's policy has
// none.
const reportedWRRName = "lbgo_reportedwrr"

// differentialTolerance is the bar: the two policies' shares of
// each server within 2 points of each other.
const differentialTolerance = 0.02

// reportedWRRConfigPenalty is reportedWRRConfig with A58's error
// penalty set.
func reportedWRRConfigPenalty(penalty float64) string {
	return fmt.Sprintf(`{"lbgo_reportedwrr":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","weightExpirationPeriod":"180s","errorUtilizationPenalty":%v,"maxFails":0}}`, penalty)
}

// TestReportedWRRMatchesGRPCGoWRR: ReportedWRR (lbgo_reportedwrr) and
// grpc-go's weighted_round_robin, both reading the per-call trailers, run
// at once over the same three servers, so they read the same reports:
// each server's share under one is within 2 points of its share under
// the other. Without errors, each is also within shareTolerance of the
// A58 shares derived in capacityServer; with the third server failing
// every 4th call and an error penalty of 50 (see errorPenalty), within
// errorShareTolerance2 of the shares the servers' reports give, sampled
// while the calls run, and the failing server's share clearly below its
// capacity's.
func TestReportedWRRMatchesGRPCGoWRR(t *testing.T) {
	if balancer.Get(reportedWRRName) == nil {
		t.Skip(reportedWRRName + " is not registered: this tree has no ReportedWRR")
	}
	for _, tt := range []struct {
		name    string
		errors  bool
		penalty float64
	}{
		{"capacities", false, 1},
		{"errors", true, errorPenalty},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var opts []loadreport.Option
			if tt.errors {
				opts = append(opts, loadreport.WithWindow(time.Second))
			}
			servers := startCapacityServers(t, opts...)
			if tt.errors {
				servers[2].failEvery.Store(errorEvery)
			}
			conns := []*grpc.ClientConn{
				dialPolicy(t, wrrConfigPenalty(false, tt.penalty), servers),
				dialPolicy(t, reportedWRRConfigPenalty(tt.penalty), servers),
			}
			warmUp(t, conns, servers, nil, 1500*time.Millisecond)
			stop := make(chan struct{})
			sampled := make(chan []float64, 1)
			go func() { sampled <- sampleShares(servers, tt.penalty, stop) }()
			var got [2][]float64
			var wg sync.WaitGroup
			for i, conn := range conns {
				wg.Go(func() { got[i] = shares(t, conn, servers, shareCalls, shareWorkers) })
			}
			wg.Wait()
			close(stop)
			want, tol := <-sampled, errorShareTolerance2
			if !tt.errors {
				want, tol = expectedShares(), shareTolerance
			}
			if t.Failed() {
				return
			}
			t.Logf("%s against weighted_round_robin:", reportedWRRName)
			checkShares(t, got[1], got[0], differentialTolerance)
			t.Logf("grpc-go weighted_round_robin:")
			checkShares(t, got[0], want, tol)
			t.Logf("%s:", reportedWRRName)
			checkShares(t, got[1], want, tol)
			for i, g := range got {
				if tt.errors && g[2] > expectedShares()[2]-failingShareBelowByAtLeast {
					t.Fatalf("policy %d: the failing server's share %.4f is not clearly below its capacity's %.4f", i, g[2], expectedShares()[2])
				}
			}
		})
	}
}
