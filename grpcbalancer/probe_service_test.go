package grpcbalancer

import (
	"context"

	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"google.golang.org/grpc"
)

// testProbeService serves ProbeMethod for the tests: a *probeServer's
// answer.
var testProbeService = grpc.ServiceDesc{
	ServiceName: "lbgo.loadreport.v1.LoadProbe",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Probe",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			if err := dec(new(v3orcaservicepb.OrcaLoadReportRequest)); err != nil {
				return nil, err
			}
			return srv.(*probeServer).probe(ctx)
		},
	}},
}
