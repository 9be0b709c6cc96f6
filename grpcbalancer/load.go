package grpcbalancer

import (
	"fmt"
	"sync/atomic"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc/balancer"
	_ "google.golang.org/grpc/orca" // registers the parser that fills DoneInfo.ServerLoad
)

// orcaTrailer is the trailer that carries a per-call ORCA load report
// (gRFC A51), as grpc/orca names it.
const orcaTrailer = "endpoint-load-metrics-bin"

// badLoadReports counts the load reports the policies ignored.
var badLoadReports atomic.Uint64

// BadLoadReports returns how many per-call load reports the policies of
// this package have ignored, across every channel since the program
// started: a trailer grpc/orca could not decode, or a report holding a
// NaN, infinite or negative value or a bad metric name (loadreport's
// rules).
func BadLoadReports() uint64 { return badLoadReports.Load() }

// LoadOf returns the server's load report of one attempt, from
// DoneInfo.ServerLoad (grpc/orca decodes the endpoint-load-metrics-bin
// trailer into it; this package imports grpc/orca so that it does), as
// loadreport.Report.ServerLoad converts it, written to dst if dst is not
// nil. It returns nil and no error when the attempt brought no report,
// and nil and an error wrapping loadreport.ErrMalformed or
// loadreport.ErrInvalidValue for one that cannot be trusted. It allocates
// nothing but a new ServerLoad when dst is nil.
func LoadOf(info balancer.DoneInfo, dst *lbgo.ServerLoad) (*lbgo.ServerLoad, error) {
	// grpc/orca gives a nil *OrcaLoadReport both when the trailer is
	// absent and when it does not decode (or comes twice): the trailer
	// tells the two apart.
	lr, _ := info.ServerLoad.(*v3orcapb.OrcaLoadReport)
	if lr == nil {
		if n := len(info.Trailer[orcaTrailer]); n > 0 {
			return nil, fmt.Errorf("%w: %s (%d values) does not decode", loadreport.ErrMalformed, orcaTrailer, n)
		}
		return nil, nil
	}
	r := loadreport.Report{
		CPUUtilization: lr.CpuUtilization, MemUtilization: lr.MemUtilization,
		ApplicationUtilization: lr.ApplicationUtilization,
		RPSFractional:          lr.RpsFractional, EPS: lr.Eps,
		NamedMetrics: lr.NamedMetrics, Utilization: lr.Utilization, RequestCost: lr.RequestCost,
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	if dst == nil {
		dst = new(lbgo.ServerLoad)
	}
	*dst = r.ServerLoad()
	return dst, nil
}
