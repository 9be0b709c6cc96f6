package grpcreport

import (
	"context"
	"testing"
	"time"

	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"
)

// nopStream is a ServerStream that does nothing, for the interceptors
// called directly.
type nopStream struct{ grpc.ServerStream }

func (nopStream) Context() context.Context { return context.Background() }

// TestInterceptorsAllocateNothing: the Reporter's interceptors, called
// directly around a trivial handler, allocate nothing (what grpc/orca
// allocates for the trailer is its own: see BenchmarkServer).
func TestInterceptorsAllocateNothing(t *testing.T) {
	tr, _ := loadreport.NewTracker()
	r, _ := New(tr)
	ctx := context.Background()
	inner := func(ctx context.Context, req any) (any, error) {
		return r.unaryForce(ctx, req, unaryInfo, trivialHandler)
	}
	if n := testing.AllocsPerRun(1000, func() { _, _ = r.unaryCount(ctx, nil, unaryInfo, inner) }); n != 0 {
		t.Errorf("unary: %v allocations a call, want 0", n)
	}
	info := &grpc.StreamServerInfo{FullMethod: chatMethod}
	trivial := func(any, grpc.ServerStream) error { return nil }
	innerS := func(srv any, ss grpc.ServerStream) error { return r.streamForce(srv, ss, info, trivial) }
	var ss grpc.ServerStream = nopStream{}
	if n := testing.AllocsPerRun(1000, func() { _ = r.streamCount(nil, ss, info, innerS) }); n != 0 {
		t.Errorf("stream: %v allocations a call, want 0", n)
	}
	if tr.InFlight() != 0 || tr.RPS() == 0 {
		t.Fatalf("in flight %d, rps %v: the calls were not counted", tr.InFlight(), tr.RPS())
	}
}

// TestServerMetricsAllocations: the Reporter's ServerMetrics, which
// grpc/orca calls for each trailer, allocates no more than grpc/orca's
// own ServerMetricsRecorder's, the provider its documentation suggests,
// holding the same fields.
func TestServerMetricsAllocations(t *testing.T) {
	clk := new(fakeClock)
	tr, _ := loadreport.NewTracker(loadreport.WithClock(clk.now))
	_ = tr.SetCPUUtilization(0.5)
	b := tr.Begin()
	clk.set(time.Millisecond) // a request of 1 ms: a latency to report
	tr.End(b, false)
	r, _ := New(tr)
	smr := orca.NewServerMetricsRecorder()
	smr.SetCPUUtilization(0.5)
	smr.SetQPS(10)
	cmr := smr.(orca.CallMetricsRecorder)
	cmr.SetNamedMetric(loadreport.InFlightName, 1)
	cmr.SetNamedMetric(loadreport.LatencyName, 1)
	ours := testing.AllocsPerRun(100, func() { _ = r.ServerMetrics() })
	theirs := testing.AllocsPerRun(100, func() { _ = smr.ServerMetrics() })
	if ours > theirs {
		t.Fatalf("ServerMetrics: %v allocations, grpc/orca's recorder %v", ours, theirs)
	}
	t.Logf("ServerMetrics: %v allocations; grpc/orca's recorder: %v", ours, theirs)
	if m := r.ServerMetrics(); m.NamedMetrics[loadreport.LatencyName] == 0 || m.CPUUtilization != 0.5 {
		t.Fatalf("ServerMetrics %+v", m)
	}
}
