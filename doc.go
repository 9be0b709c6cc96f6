// Package balancer chooses an upstream peer for each request: nginx's
// weighted round-robin algorithms reproduced exactly, the classic
// lock-free and random balancers, and latency-aware ones, all behind one
// small Picker interface and one Peer type that carries nginx's per-server
// state (weight, effective_weight, current_weight, max_fails, fail_timeout,
// max_conns, backup, down).
//
// A service builds a picker over its peers, then, for each request, asks
// it for a peer, reports the outcome, and retries on failure:
//
//	var r balancer.Request
//	for {
//		peer, err := lb.Pick(&r)
//		if err != nil {
//			return err // ErrNoLivePeer, ErrTriesExhausted, ...
//		}
//		start := time.Now()
//		err = call(peer.Addr())
//		lb.Done(peer, balancer.Outcome{Failed: err != nil, Latency: time.Since(start)})
//		if err == nil {
//			return nil
//		}
//	}
//
// The Request remembers which peers this request tried, so a retry never
// returns one of them, moves to the backup peers once no primary is
// eligible, and bounds the attempts by the number of peers that are not
// down, exactly as nginx's proxy_next_upstream does.
//
// # Algorithms
//
// [Algorithms] lists every picker, by its type name, in the order below;
// [AlgorithmNamed] finds one by name. Each type's doc states its contract.
//
// [RoundRobin] is Ribbon's lock-free round robin: one atomic add a pick,
// weights ignored. Choose it for equal peers and the cheapest pick there is.
//
// [SmoothWRR] is nginx's smooth weighted round-robin as nginx 1.22 runs it,
// failures and retries included; weights {5,1,1} give a a b a c a a. It is
// checked against sequences recorded from a real nginx and, where nginx is
// installed, against a live one. A pick is O(1) and lock-free while the
// weights are static. Choose it to spread load smoothly by weight, or to
// predict what an nginx in front of the same servers does.
//
// [ClassicWRR] is the weighted round-robin nginx used before 1.2.1: {5,1,1}
// gives c b a a a a a, the heavy peer bunched. Choose it to reproduce an
// old nginx.
//
// [RandomWeighted] is Dubbo's weighted random, with its optional warm-up
// ([WithWarmup]): O(1) by an alias table, nothing shared between
// goroutines but the peer's in-flight count. Choose it for many
// uncoordinated clients.
//
// [LeastConn] is nginx's least_conn: the fewest attempts in flight per unit
// of weight, O(n) under a lock. Choose it for long or uneven requests.
//
// [P2CPeakEWMA] is Finagle's and Linkerd's power of two choices over a
// peak-EWMA latency. Choose it for latency-sensitive traffic to peers of
// unknown or changing speed.
//
// [FastestFirst] derives nginx's weights from measured latency and sends
// each attempt to the least (in flight + 1)/weight, O(n) under a lock.
// Choose it for latency-sensitive traffic when nginx's failure model and
// smooth order matter.
//
// # Failures
//
// Every picker shares nginx's failure accounting. A failed attempt counts
// against the peer; max_fails failures within fail_timeout take it out for
// fail_timeout; after that one request probes it, and a success brings it
// back. In SmoothWRR and LeastConn a failure also lowers the peer's
// effective weight by weight/max_fails, which then recovers as in nginx;
// ClassicWRR cuts its current weight instead, FastestFirst its derived
// weight. MaxFails(0) turns all of this off for a peer. With a single peer,
// as in nginx, failures never take it out.
//
// # Errors
//
// Bad input never panics and never changes a picker in use: constructors
// and update methods return errors wrapping [ErrInvalidConfig],
// [ErrDuplicatePeer] or [ErrPeerInUse], with messages that name the
// offending value; Done returns [ErrUnknownPeer], [ErrNotInFlight] or
// [ErrInvalidLatency]. Pick returns [ErrNoPeers], [ErrNoLivePeer] or
// [ErrTriesExhausted], and never a nil peer with a nil error.
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
// the update methods (Add, Remove, SetWeight, SetDown) while others pick.
// Pick and Done allocate nothing (a Request's tried set lives inline up to
// 64 peers per list), but for RandomWeighted's occasional table rebuild
// while a peer warms up. A Request belongs to one request and is not safe
// for concurrent use.
package balancer
