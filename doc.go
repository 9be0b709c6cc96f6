// Package balancer chooses an upstream peer for each attempt of a request:
// nginx's balancing methods reproduced exactly (weighted round robin,
// least_conn, hash, consistent hash, ip_hash, random), the classic
// lock-free and random balancers, and latency-aware ones, all behind one
// small [Picker] interface and one [Peer] type that carries nginx's
// per-server state (weight, effective_weight, current_weight, max_fails,
// fail_timeout, max_conns, backup, down).
//
// A service builds a picker over its peers, then runs each request through
// it: [Do] picks a peer, calls it, reports the outcome and retries on
// failure, as nginx's proxy_next_upstream does.
//
//	err := balancer.Do(ctx, lb, nil, func(ctx context.Context, peer *balancer.Peer) error {
//		return call(ctx, peer.Addr())
//	})
//
// By hand, the same loop is Pick, the call, and Done with an [Outcome]:
// Failed for what nginx counts as a failure, Abandoned for an attempt the
// caller gave up on. A [Request] carries one request's retry state across
// its attempts: each peer is tried at most once, the backups are used once
// no primary is eligible, and the attempts are bounded by the number of
// peers that are not down.
//
// # Algorithms
//
// [Algorithms] lists every picker by its type name, the one name it goes
// by in every tool; [AlgorithmNamed] finds one. Each type's doc states its
// contract. Round robin: [SmoothWRR] (nginx 1.22), [ClassicWRR] (nginx
// 1.2.0), [RoundRobin] (Ribbon). Random: [RandomWeighted] (Dubbo, with
// warm-up), [Random] and [RandomTwo] (nginx's random and random two
// least_conn). Load and latency: [LeastConn] (nginx's least_conn),
// [P2CPeakEWMA] (Finagle, Linkerd), [FastestFirst] (latency-derived nginx
// weights). By what servers say of themselves: [ReportedWRR] (gRFC A58's
// weights from load reports), [Prequal] (probes of each server's requests
// in flight and latency, through a [Prober]). Key affinity: [Hash],
// [ConsistentHash] (with optional bounded loads) and [IPHash].
//
// # Which picker
//
// By situation: [SmoothWRR] to replace nginx's round robin or follow
// weights you set; [FastestFirst] for one client calling a pool whose
// latencies differ; [RandomTwo] when many clients share a pool and each
// balances alone, [LeastConn] with [WithReportedLoad] when the servers
// report their load, [Prequal] when dozens of clients share servers that
// answer probes; [ConsistentHash] when a key must stay on one server while
// the list changes; [RoundRobin] for equal peers at the lowest cost. The
// README's "Which picker?" gives the simulator's evidence for each.
//
// # Failures
//
// Every picker shares nginx's failure accounting. A failed attempt counts
// against the peer; max_fails failures within fail_timeout take it out for
// fail_timeout; after that one request probes it, and a success brings it
// back (for a long-lived session, its established connection: [Connector]).
// In SmoothWRR and LeastConn a failure also lowers the peer's
// effective weight by weight/max_fails, which then recovers as in nginx;
// ClassicWRR cuts its current weight instead; FastestFirst lowers the
// effective weight too but balances by the weight it derives from latency,
// which the failure's penalty latency lowers. MaxFails(0) turns all of this off for a peer. With a single peer,
// as in nginx, failures never take it out. [Updater.NextEligible] says
// when the next failed peer is back.
//
// # Changes
//
// Every picker is a [Balancer]: a Picker and an [Updater]. Update
// reconciles a discovery snapshot in one change, keeping the state of the
// peers it already holds; Add, Remove, SetWeight and SetDown change one
// peer.
//
// # Subsetting
//
// Package subset (github.com/lbgo/balancer/subset) wraps any Balancer and
// hands it only this client's subset of a large backend list: for clients
// with an index, its Ring keeps every backend within one client of the
// same count; for clients without one, Rendezvous and Random change one
// member per backend added or removed. [Subset], [NewSubset] and the
// *Subsetter constructors here are its deprecated names.
//
// # Errors
//
// Bad input never panics and never changes a picker in use: constructors
// and update methods return errors wrapping [ErrInvalidConfig],
// [ErrDuplicatePeer] or [ErrPeerInUse], with messages that name the
// offending value; Done returns [ErrUnknownPeer], [ErrNotInFlight],
// [ErrInvalidLatency] or [ErrInvalidOutcome]. Pick returns [ErrNoPeers],
// [ErrNoLivePeer] or [ErrTriesExhausted], and never a nil peer with a nil
// error.
//
// # Time and randomness
//
// Pickers read the time through [WithClock] and draw random numbers from
// [WithRand], so tests and simulations run on a virtual clock and a seeded
// source, and never sleep.
//
// # Concurrency
//
// Every picker is safe for concurrent use by multiple goroutines, including
// the update methods while others pick. Pick and Done allocate nothing (a
// Request's tried set lives inline up to 64 peers per list), but for
// RandomWeighted's occasional table rebuild while a peer warms up and the
// round-robin cycle rebuilt once after a recovery. A Request belongs to one
// request and is not safe for concurrent use.
package balancer
