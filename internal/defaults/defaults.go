// Package defaults holds the values that a zero settings field, an option
// left out or a PeerOption left out stands for, for the root package and
// the other packages of its module (the tools, the simulator, the upstream
// parser). Each value is stated in words and numbers by the doc of the
// field or option it applies to; the root package's tests hold the two
// together.
package defaults

import "time"

// A peer's server parameters, nginx's (ngx_http_upstream_server).
const (
	Weight      = 1
	MaxFails    = 1
	FailTimeout = 10 * time.Second
)

// The latency options' (WithDecay, WithFailurePenalty).
const (
	// Decay is the peak EWMA's decay time τ in P2CPeakEWMA and Prequal:
	// Finagle's p2cPeakEwma(decayTime = 10 s), Linkerd's EWMA_DECAY and
	// the default decay_time of Envoy's Peak EWMA all use 10 s.
	Decay = 10 * time.Second

	// FastestDecay is FastestFirst's decay time, half the 10 s of
	// Finagle, Linkerd and Envoy: its estimates must also fall back for a
	// recovered peer to be readmitted.
	FastestDecay = 5 * time.Second

	// FailurePenalty is the least latency a failed attempt counts as: the
	// 5 s default of Linkerd's load biaser, which records a penalty
	// instead of the real latency of a failed or rate-limited response
	// unless the real one is higher.
	FailurePenalty = 5 * time.Second
)

// FastestFirstSettings'.
const (
	// Band is the hysteresis of the weights: they are recomputed when a
	// peer's estimate moves by more than this factor from the one its
	// weight was set for.
	Band = 1.25

	// Exponent is α in weight ∝ (tolerance·fastest/estimate)^α: 2, the
	// square-root rule, the best static split over M/M/1 servers.
	Exponent = 2.0

	// Floor is the weight, out of 100 for the best peer, below which no
	// peer falls: 1, the OpenResty original's floor.
	Floor = 1

	// Tolerance is how many times slower than the fastest peer a peer may
	// look before its weight drops: 3. Within it, the in-flight counts
	// balance load better than noisy weights do.
	Tolerance = 3.0
)

// PrequalSettings'.
const (
	// ProbesPerPick is the probes a request sends, on its first pick: the
	// paper's and prequal-rs's 3 a query.
	ProbesPerPick = 3

	// ProbesPerSecond caps a picker's probes a second: 3 a pick up to
	// about 3,333 picks a second, fewer a pick above.
	ProbesPerSecond = 10000

	// ProbePoolSize and ProbeMaxAge are the pool's: 4 answers (the paper
	// and prequal-rs keep 16, which herds more with many clients, see
	// Prequal in detail), none older than 1 s.
	ProbePoolSize = 4
	ProbeMaxAge   = time.Second

	// HotQuantile is the quantile of the recent in-flight counts above
	// which an answer is hot. The paper takes 0.84; prequal-rs found it
	// herded in simulation and takes 0.6; the simulator's runs, 0.3
	// (see Prequal in detail).
	HotQuantile = 0.3
)
