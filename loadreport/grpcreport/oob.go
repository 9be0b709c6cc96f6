package grpcreport

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/orca"
)

// ServerMetrics returns the Tracker's load now as grpc/orca's
// ServerMetrics, making r an orca.ServerMetricsProvider: grpc/orca calls
// it for each per-call trailer and each out-of-band report. Zero values
// are sent as unset, as proto3 does; NamedMetrics holds
// loadreport.InFlightName, and loadreport.LatencyName once a request has
// completed in the window. Each call returns new maps (grpc/orca writes
// a handler's per-call values into them).
func (r *Reporter) ServerMetrics() *orca.ServerMetrics {
	s := r.t.Snapshot()
	named := make(map[string]float64, 2)
	named[loadreport.InFlightName] = s.InFlight
	if s.LatencyMs != 0 {
		named[loadreport.LatencyName] = s.LatencyMs
	}
	return &orca.ServerMetrics{
		CPUUtilization: s.CPUUtilization,
		MemUtilization: s.MemUtilization,
		AppUtilization: s.ApplicationUtilization,
		QPS:            s.RPSFractional,
		EPS:            s.EPS,
		Utilization:    map[string]float64{},
		RequestCost:    map[string]float64{},
		NamedMetrics:   named,
	}
}

// RegisterOOB registers ORCA's out-of-band service
// (OpenRcaService/StreamCoreMetrics) on s, with orca.Register, reporting
// the Tracker's load to each client that opens the stream: when it opens,
// then every interval, the larger of what the client asks and
// minInterval. grpc-go's service does not report more often than every
// 30 s, so minInterval must be 0 (30 s) or at least 30 s; a client such
// as weighted_round_robin with enableOobLoadReport asking for less gets
// a report every 30 s. A report on the stream has no RPC of its own: its
// rif is the RPCs in flight at that moment. The stream itself is never
// counted.
func (r *Reporter) RegisterOOB(s grpc.ServiceRegistrar, minInterval time.Duration) error {
	if minInterval != 0 && minInterval < minOOBInterval {
		return fmt.Errorf("%w: RegisterOOB interval %v, below grpc-go's minimum of %v", ErrInvalidOption, minInterval, minOOBInterval)
	}
	if s == nil {
		return fmt.Errorf("%w: RegisterOOB(nil server)", ErrInvalidOption)
	}
	return orca.Register(s, orca.ServiceOptions{ServerMetricsProvider: r, MinReportingInterval: minInterval})
}
