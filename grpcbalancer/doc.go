// Package grpcbalancer registers every picker of the balancer package as a
// gRPC load-balancing policy, so a gRPC client balances its RPCs with
// nginx's per-server failure accounting (max_fails, fail_timeout,
// max_conns) and any of the package's algorithms.
//
// Importing the package registers one policy per balancer.Algorithms()
// entry, named "lbgo_" followed by the picker's name in lower case
// (lbgo_smoothwrr, lbgo_fastestfirst, lbgo_leastconn, ...; see
// PolicyName). Choose one in the service config:
//
//	{"loadBalancingConfig": [{"lbgo_fastestfirst": {"maxFails": 1, "failTimeout": "10s"}}]}
//
// The fields are listed at Config. Peer weights come from the resolver: set
// them with WithWeight (or WithEndpointWeight); the default is 1. An xDS
// control plane can choose and configure the policies too (gRFC A52): see
// the xdsbalancer module.
//
// How gRPC's events map onto the picker:
//
//   - One balancer.Peer per resolver endpoint (per address, for a resolver
//     that reports addresses), carrying its SubConn as the Peer's Value, so
//     a pick reads the SubConn with no lookup. Resolver updates reconcile the
//     peers with the picker's Update: a kept address keeps its peer and so
//     its failures, in-flight count and latency history, and its SubConn,
//     so a READY peer stays up through the push. A new address gets a new
//     SubConn and peer, down until that SubConn is READY (and healthy),
//     while the others stay up. A removed address's peer leaves the
//     picker at once and its SubConn is shut down, which lets the attempts
//     in flight on it finish: their reports end their in-flight count and
//     are otherwise dropped. An address given back later is a new peer.
//     Every push hands gRPC a new picker, so RPCs waiting for a peer pick
//     again.
//   - A SubConn that is not READY marks its peer down (SetDown(true)); READY
//     brings it back (SetDown(false)). The down flag, not a failure, because
//     the connection state is gRPC's own health signal and is already
//     retried by gRPC's reconnect backoff: counting it as nginx failures as
//     well would punish one outage twice, and marking down keeps the peer's
//     failure window and latency history for when it returns.
//   - Client-side health checking, as with gRPC's own policies: with
//     "healthCheckConfig" in the service config and the client importing
//     google.golang.org/grpc/health, a READY SubConn whose server's health
//     service does not say SERVING counts as not READY (its peer is down
//     until it does, and from READY until the first health report).
//     Without it, READY is enough.
//   - Each attempt's DoneInfo becomes an Outcome (see Config.FailureCodes
//     and OutcomeOf); the latency is from pick to done. The server's
//     per-call ORCA load report (the endpoint-load-metrics-bin trailer a
//     server sends through grpc/orca, which this package imports so that
//     gRPC decodes it into DoneInfo.ServerLoad) goes with it as
//     Outcome.Load (see LoadOf); one that cannot be trusted is ignored and
//     counted (BadLoadReports). lbgo_reportedwrr weighs the reports, and
//     the reportedLoad field makes four other policies weigh their rif.
//   - The attempts of one RPC, gRPC's retries, share one balancer.Request,
//     so a retry skips the peers the RPC already tried while another is
//     eligible (see the package's README for how and its limits).
//   - When no peer is eligible, Pick returns balancer.ErrNoSubConnAvailable
//     and the policy wakes at the picker's NextEligible time to hand gRPC a
//     new picker, so a waiting RPC proceeds as soon as a peer's fail_timeout
//     ends; an attempt that ends while an RPC waits hands gRPC a new picker
//     too, so one waiting for a max_conns slot proceeds when a slot frees.
//
// # Probing: lbgo_prequal
//
// lbgo_prequal balances by probes of the servers' load (balancer.Prequal):
// the policy gives its picker a prober that calls ProbeMethod, which
// grpcreport.RegisterProbe serves, on the connection of the probed peer's
// SubConn. For each READY SubConn it takes that connection from a producer
// of its own (SubConn.GetOrBuildProducer, as grpc/orca does for its
// out-of-band stream), and drops it at the SubConn's next state change. A
// probe is queued and never blocks a pick; probeWorkers workers send them,
// each bounded by probeTimeout; when probeQueue probes already wait, more
// are dropped and counted. A server without the probe service answers
// UNIMPLEMENTED, a Failed answer: after a few, Prequal balances that peer by
// P2CPeakEWMA's rule, so it keeps its traffic. The picker's own fields:
//
//	{"loadBalancingConfig": [{"lbgo_prequal": {
//	  "probeRate": {"perPick": 3, "perSecond": 10000},
//	  "probePool": {"size": 4, "maxAge": "1s"},
//	  "hotQuantile": 0.3,
//	  "probeTimeout": "250ms", "probeWorkers": 16, "probeQueue": 128,
//	  "decay": "10s", "maxFails": 1, "failTimeout": "10s"}}]}
//
// (every field optional; these are the defaults). A change of any of them
// builds a new picker with a new prober; closing the channel closes both,
// cutting the probes under way short. Channel(target).ProbeStats counts
// the probes.
//
// # Hedging: gRFC A6's hedgingPolicy
//
// grpc-go ignores a methodConfig's hedgingPolicy. NewHedging reads it from
// the same service config JSON, strictly, and its interceptor sends the
// hedges, opt-in:
//
//	h, err := grpcbalancer.NewHedging(sc) // sc has a hedgingPolicy
//	conn, err := grpc.NewClient(target, append(h.DialOptions(), creds)...)
//
// The first attempt goes at once, one more every hedgingDelay (all at once
// for 0s) up to maxAttempts (at most 5); the first OK or fatal answer ends
// the RPC and cancels the others, which their servers see; a status in
// nonFatalStatusCodes sends the next attempt at once, or as its
// grpc-retry-pushback-ms trailer says (n ms later, or none more: A6's
// server pushback). A balancer.Budget (a retrybudget.Budget)
// bounds the extra attempts (default 5% of the RPCs over 10 s). Under an
// lbgo_ policy the attempts of one RPC share its tried set, so each goes
// to a backend none of the RPC's other attempts is on, and an attempt that
// finds none is not sent. Streaming RPCs are left alone: only unary calls
// through the interceptor are hedged. Hedging.Stats counts the hedges
// sent, won and refused, WithHedgeEvents reports them as balancer events,
// and metrics.NewHedgeCounter exports them to Prometheus.
//
// The policies are safe for concurrent use, as gRPC requires.
package grpcbalancer
