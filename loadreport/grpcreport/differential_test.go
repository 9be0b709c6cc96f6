package grpcreport

import (
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/lbgo/balancer/grpcbalancer" // registers the lbgo_* policies
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
// the other. Each is also within shareTolerance of the A58 shares
// derived in capacityServer, and, over fleetServers (the third failing
// every 4th call, error penalty 2), within errorShareTolerance of those
// derived there.
func TestReportedWRRMatchesGRPCGoWRR(t *testing.T) {
	if balancer.Get(reportedWRRName) == nil {
		t.Fatal(reportedWRRName + " is not registered")
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
			servers := startCapacityServers(t)
			want := expectedShares()
			if tt.errors {
				servers, want = fleetServers(t), errorShares()
			}
			conns := []*grpc.ClientConn{
				dialPolicy(t, wrrConfigPenalty(false, tt.penalty), servers),
				dialPolicy(t, reportedWRRConfigPenalty(tt.penalty), servers),
			}
			warmUp(t, conns, servers, nil, 1500*time.Millisecond)
			var got [2][]float64
			var wg sync.WaitGroup
			for i, conn := range conns {
				wg.Go(func() { got[i] = shares(t, conn, servers, shareCalls, shareWorkers) })
			}
			wg.Wait()
			if t.Failed() {
				return
			}
			t.Logf("%s against weighted_round_robin:", reportedWRRName)
			checkShares(t, got[1], got[0], differentialTolerance)
			tol := shareTolerance
			if tt.errors {
				tol = errorShareTolerance
			}
			t.Logf("grpc-go weighted_round_robin:")
			checkShares(t, got[0], want, tol)
			t.Logf("%s:", reportedWRRName)
			checkShares(t, got[1], want, tol)
		})
	}
}
