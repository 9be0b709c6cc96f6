package grpcreport

import (
	"fmt"

	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
)

// Reporter counts a gRPC server's RPCs in a loadreport.Tracker and
// reports the Tracker's load on every response, in grpc-go's per-call
// ORCA trailer. Install it with ServerOptions; add the out-of-band
// stream with RegisterOOB. Its request path takes no lock; it is safe for
// concurrent use.
type Reporter struct {
	t       *loadreport.Tracker
	isError [maxCode + 1]bool
	skip    func(fullMethod string) bool // nil: none
}

// New returns a Reporter counting in and reporting t. It accepts
// WithErrorCodes and WithSkip. A nil t fails with ErrInvalidOption.
func New(t *loadreport.Tracker, opts ...Option) (*Reporter, error) {
	if t == nil {
		return nil, fmt.Errorf("%w: New(nil Tracker)", ErrInvalidOption)
	}
	r := &Reporter{t: t}
	for _, c := range defaultErrorCodes {
		r.isError[c] = true
	}
	for _, o := range opts {
		if err := o(r); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// Tracker returns the Tracker r counts in and reports.
func (r *Reporter) Tracker() *loadreport.Tracker { return r.t }

// ServerOptions returns the options that install r on a server, to pass
// to grpc.NewServer (before or after the server's own; interceptors
// chained after them run inside r's and their errors count):
//
//   - unary and stream interceptors that count each RPC in the Tracker
//     from before the handler (and the interceptors inside) begins until
//     after its trailer is written, and count it an error by its status
//     code (WithErrorCodes) or if it panics (gRPC does not recover a
//     handler's panic: an interceptor given before these must, or the
//     server dies);
//   - orca.CallMetricsServerOption with r as the ServerMetricsProvider,
//     inside them, which writes the endpoint-load-metrics-bin trailer;
//   - inner interceptors that make grpc/orca write that trailer on every
//     RPC, not only those whose handler calls
//     orca.CallMetricsRecorderFromContext.
//
// A handler may still record per-call values with
// orca.CallMetricsRecorderFromContext (a request_cost, say): grpc/orca
// writes them over r's. Do not pass orca.CallMetricsServerOption as
// well: these options include it.
func (r *Reporter) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(r.unaryCount),
		grpc.ChainStreamInterceptor(r.streamCount),
		orca.CallMetricsServerOption(r),
		grpc.ChainUnaryInterceptor(r.unaryForce),
		grpc.ChainStreamInterceptor(r.streamForce),
	}
}

// oobMethod is ORCA's out-of-band stream, never counted.
const oobMethod = "/xds.service.orca.v3.OpenRcaService/StreamCoreMetrics"

// skipped reports whether method is left alone: ORCA's out-of-band
// stream and the probe are never counted; the others as WithSkip says.
func (r *Reporter) skipped(method string) bool {
	return method == oobMethod || method == ProbeMethod || r.skip != nil && r.skip(method)
}

func (r *Reporter) failed(code codes.Code) bool {
	return code > maxCode || r.isError[code]
}
