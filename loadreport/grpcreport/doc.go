// Package grpcreport is the gRPC side of package loadreport: server
// interceptors that count every RPC in a loadreport.Tracker (requests in
// flight, requests and errors per second over a window, the latency
// estimate, the utilization the application sets) and report that load
// on every response through grpc-go's own per-call ORCA trailer
// (endpoint-load-metrics-bin, gRFC A51, written by package
// google.golang.org/grpc/orca), and, as an option, on ORCA's
// out-of-band stream. grpc-go's weighted_round_robin (gRFC A58) and the
// lbgo_* policies of package grpcbalancer read those reports unchanged.
//
//	t, _ := loadreport.NewTracker()
//	rep, _ := grpcreport.New(t)
//	srv := grpc.NewServer(rep.ServerOptions()...)
//	_ = rep.RegisterOOB(srv, 0) // optional: the out-of-band stream
//
// A report carries what an HTTP report from loadreport.Middleware
// carries, under the same names: rps_fractional, eps,
// named_metrics.rif (the RPC's own included), named_metrics.latency_ms,
// and the utilizations set on the Tracker. A Tracker shared with a
// loadreport.Middleware (loadreport.WithTracker) makes a server's HTTP
// and gRPC traffic one load.
//
// RegisterProbe adds the probe service (ProbeMethod), which answers a
// probe with the Tracker's requests in flight and latency estimate
// (loadreport.Tracker.Probe) in an OrcaLoadReport's named_metrics; the
// interceptors do not count it. Probe is its client.
//
// It is a module of its own so that the root module does not depend on
// gRPC.
package grpcreport
