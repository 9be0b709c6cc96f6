package grpcreport

import (
	"context"
	"fmt"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
)

// ProbeMethod is the unary method that answers probes: request an
// xds.service.orca.v3.OrcaLoadReportRequest (ignored), response an
// xds.data.orca.v3.OrcaLoadReport whose named_metrics hold
// loadreport.InFlightName (rif) and loadreport.LatencyName (latency_ms),
// the Tracker's Probe answer.
const ProbeMethod = "/" + probeService + "/Probe"

const probeService = "lbgo.loadreport.v1.LoadProbe"

// RegisterProbe registers the probe service (ProbeMethod) on s,
// answering with t's Probe: the requests in flight and the latency
// estimate at that load. A Reporter's interceptors never count the
// probe as a request, nor write a report on it. A nil s or t fails with
// ErrInvalidOption.
func RegisterProbe(s grpc.ServiceRegistrar, t *loadreport.Tracker) error {
	if s == nil || t == nil {
		return fmt.Errorf("%w: RegisterProbe(%v, %v): nil server or Tracker", ErrInvalidOption, s, t)
	}
	s.RegisterService(&probeServiceDesc, &probeServer{t})
	return nil
}

// probeServer is the service's implementation; HandlerType is the
// interface grpc-go checks it against.
type probeServer struct{ t *loadreport.Tracker }

type probeHandler interface {
	answer() *v3orcapb.OrcaLoadReport
}

func (p *probeServer) answer() *v3orcapb.OrcaLoadReport {
	n, lat := p.t.Probe()
	return &v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{
		loadreport.InFlightName: float64(n),
		loadreport.LatencyName:  float64(lat) / float64(time.Millisecond),
	}}
}

// probeServiceDesc is the service, written by hand as protoc-gen-go-grpc
// would generate it for
//
//	service LoadProbe {
//	  rpc Probe(xds.service.orca.v3.OrcaLoadReportRequest) returns (xds.data.orca.v3.OrcaLoadReport);
//	}
var probeServiceDesc = grpc.ServiceDesc{
	ServiceName: probeService,
	HandlerType: (*probeHandler)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Probe",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(v3orcaservicepb.OrcaLoadReportRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			h := func(context.Context, any) (any, error) { return srv.(probeHandler).answer(), nil }
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: ProbeMethod}, h)
		},
	}},
}

// Probe calls ProbeMethod on cc and returns the server's answer: its
// requests in flight and its latency estimate, validated as
// loadreport.ParseProbe validates the HTTP answer (an error wrapping
// balancer.ErrInvalidProbe for a missing rif or a value out of range).
// The call's own error (a server without the service answers
// UNIMPLEMENTED) is returned as grpc-go returns it. opts are passed to
// Invoke; the caller's ctx bounds the call.
func Probe(ctx context.Context, cc grpc.ClientConnInterface, opts ...grpc.CallOption) (inFlight float64, latency time.Duration, err error) {
	resp := new(v3orcapb.OrcaLoadReport)
	if err := cc.Invoke(ctx, ProbeMethod, &v3orcaservicepb.OrcaLoadReportRequest{}, resp, opts...); err != nil {
		return 0, 0, err
	}
	return loadreport.ProbeFromNamedMetrics(resp.GetNamedMetrics())
}
