// Package loadreport is the server side of ORCA load reports over HTTP:
// a server says how loaded it is on every response, in the
// endpoint-load-metrics header that Envoy reads, so that clients can
// balance by what the servers see rather than by their own attempts alone.
//
// A Report holds the fields of xds.data.orca.v3.OrcaLoadReport (gRFC A51)
// that balancers read. Its header value comes in three formats, each
// named by a prefix:
//
//	TEXT cpu_utilization=0.5,rps_fractional=812,named_metrics.rif=3
//	JSON {"cpu_utilization":0.5,"named_metrics":{"rif":3}}
//	BIN CQAAAAAAAOA/...   (base64 of the serialized protobuf)
//
// Report.Header writes them and Parse reads them, following Envoy's
// source/common/orca/orca_parser.cc; the protobuf wire format is encoded
// and decoded here by hand, with no protobuf dependency. Parse is the
// gatekeeper for reports from servers a client does not control: a
// malformed or hostile value (unknown prefix, bad syntax, wrong type,
// truncated, duplicate names, NaN, infinite, negative or too large)
// returns an error wrapping a sentinel and is never partly trusted.
//
// A Tracker keeps the server's side: requests in flight (sent as
// named_metrics.rif), requests and errors completed per second over a
// sliding window (rps_fractional, eps), the mean duration of the requests
// completed in that window (named_metrics.latency_ms), and the CPU,
// memory and application utilization the server sets. Middleware wraps
// an http.Handler, counts its requests in a Tracker and writes the
// report on every response; the gRPC interceptors of the nested module
// loadreport/grpcreport do the same for gRPC, and may share the Tracker.
// A Tracker also answers probes (Prequal's, balancer.Prober): Probe gives
// its requests in flight and the latency a request beginning now can
// expect at that load, kept by RIF level. The Middleware answers a GET on
// DefaultProbePath itself, with the body
//
//	TEXT named_metrics.rif=3,named_metrics.latency_ms=1.5
//
// (ProbeHandler serves it elsewhere; grpcreport.RegisterProbe over gRPC),
// and a client reads it with ParseProbe. A probe is not counted as a
// request, takes no lock, and allocates nothing in this package.
// The request path takes no lock and allocates twice per request: the header
// value string and its one-element []string (what Header().Set allocates).
// The default format is TEXT, what vLLM emits and readable in a trace;
// BIN is the cheapest to write.
//
// A client reads the report from each response with FromHeader and
// feeds it to its balancer: gRFC A58's weighted round robin weighs a
// peer by rps_fractional / (utilization + eps/rps × penalty), with
// utilization the application_utilization if set, else cpu_utilization;
// a load-aware picker may use rif, the server's count of requests in
// flight from every client. Report.ServerLoad gives those fields as a
// balancer.ServerLoad, what balancer.Outcome.Load carries; balancerhttp's
// Transport and Proxy read the header of every response and hand its
// report to the picker with Done; balancer.ReportedWRR weighs peers by
// them as gRFC A58 does.
package loadreport
