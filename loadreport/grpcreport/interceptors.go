package grpcreport

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
)

// The interceptors come in two layers around grpc/orca's (see
// ServerOptions): the outer ones count, the inner ones force the trailer.
// The count spans grpc/orca's trailer, which it writes after the handler
// returns by calling r.ServerMetrics: so the RPC is still in flight in
// its own report (rif counts it, as loadreport.Middleware's header does)
// and its own duration is not yet in the latency estimate.

func (r *Reporter) unaryCount(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if r.skipped(info.FullMethod) {
		return h(ctx, req)
	}
	began := r.t.Begin()
	done := false
	defer func() {
		if !done { // the handler panicked
			r.t.End(began, true)
		}
	}()
	resp, err := h(ctx, req)
	done = true
	r.t.End(began, err != nil && r.failed(codeOf(err)))
	return resp, err
}

func (r *Reporter) streamCount(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if r.skipped(info.FullMethod) {
		return h(srv, ss)
	}
	began := r.t.Begin()
	done := false
	defer func() {
		if !done {
			r.t.End(began, true)
		}
	}()
	err := h(srv, ss)
	done = true
	r.t.End(began, err != nil && r.failed(codeOf(err)))
	return err
}

// codeOf is the code gRPC sends for a handler's error: the status's, or
// for an error that is not a status, CANCELLED or DEADLINE_EXCEEDED for
// the context's errors and UNKNOWN otherwise (grpc-go's server does the
// same conversion).
func codeOf(err error) codes.Code {
	if s, ok := status.FromError(err); ok {
		return s.Code()
	}
	return status.FromContextError(err).Code()
}

// unaryForce asks grpc/orca for the call's recorder, which makes it write
// the trailer when the handler returns.
func (r *Reporter) unaryForce(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if !r.skipped(info.FullMethod) {
		orca.CallMetricsRecorderFromContext(ctx)
	}
	return h(ctx, req)
}

func (r *Reporter) streamForce(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if !r.skipped(info.FullMethod) {
		orca.CallMetricsRecorderFromContext(ss.Context())
	}
	return h(srv, ss)
}
