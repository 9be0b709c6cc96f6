package grpcreport

import (
	"sync"
	"testing"

	_ "github.com/lbgo/balancer/grpcbalancer" // registers the lbgo_* policies
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
)

// reportedWRRPolicy is balancer.ReportedWRR as a gRPC policy, with the
// settings of wrrConfig: no blackout, the 0.1 s update period, the 3 min
// expiration; failure accounting off, as grpc-go's policy has none.
const (
	reportedWRRName   = "lbgo_reportedwrr"
	reportedWRRConfig = `{"lbgo_reportedwrr":{"blackoutPeriod":"0s","weightUpdatePeriod":"0.1s","weightExpirationPeriod":"180s","maxFails":0}}`
)

// differentialTolerance is the bar: the two policies' shares of
// each server within 2 points of each other.
const differentialTolerance = 0.02

// TestReportedWRRMatchesGRPCGoWRR: ReportedWRR (lbgo_reportedwrr) and
// grpc-go's weighted_round_robin, both reading the per-call trailers, run
// at once over the same three servers, so they read the same reports:
// each server's share under one is within 2 points of its share under
// the other, and each is within shareTolerance of the A58 shares derived
// in capacityServer.
func TestReportedWRRMatchesGRPCGoWRR(t *testing.T) {
	if balancer.Get(reportedWRRName) == nil {
		t.Skip(reportedWRRName + " is not registered: this tree has no ReportedWRR")
	}
	servers := startCapacityServers(t)
	theirs := dialPolicy(t, wrrConfig(false), servers)
	ours := dialPolicy(t, reportedWRRConfig, servers)
	var wg sync.WaitGroup
	var got [2][]float64
	for i, conn := range []*grpc.ClientConn{theirs, ours} {
		wg.Go(func() {
			warmUp(t, conn, servers, nil)
			got[i] = shares(t, conn, servers, shareCalls, shareWorkers)
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	t.Logf("grpc-go weighted_round_robin:")
	checkShares(t, got[0], expectedShares(), shareTolerance)
	t.Logf("%s:", reportedWRRName)
	checkShares(t, got[1], expectedShares(), shareTolerance)
	checkShares(t, got[1], got[0], differentialTolerance)
}
