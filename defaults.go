package balancer

import "github.com/lbgo/balancer/internal/defaults"

// The defaults that a zero settings field, an option left out or a
// PeerOption left out stands for, once exported. Each keeps its value for
// one release; the field or option it applies to states the value in its
// doc.
const (
	// DefaultWeight is a peer's weight unless Weight sets it: 1.
	//
	// Deprecated: leave Weight out; its doc states the value.
	DefaultWeight = defaults.Weight

	// DefaultMaxFails is a peer's max_fails unless MaxFails sets it: 1.
	//
	// Deprecated: leave MaxFails out; its doc states the value.
	DefaultMaxFails = defaults.MaxFails

	// DefaultFailTimeout is a peer's fail_timeout unless FailTimeout sets
	// it: 10 s.
	//
	// Deprecated: leave FailTimeout out; its doc states the value.
	DefaultFailTimeout = defaults.FailTimeout

	// DefaultDecay is P2CPeakEWMA's and Prequal's decay time unless
	// WithDecay sets it: 10 s.
	//
	// Deprecated: leave WithDecay out; its doc states each picker's value
	// (this one, and FastestFirst's 5 s).
	DefaultDecay = defaults.Decay

	// DefaultFastestDecay is FastestFirst's decay time unless WithDecay
	// sets it: 5 s.
	//
	// Deprecated: leave WithDecay out; its doc states each picker's value.
	DefaultFastestDecay = defaults.FastestDecay

	// DefaultFailurePenalty is the least latency a failed attempt counts
	// as unless WithFailurePenalty sets it: 5 s.
	//
	// Deprecated: leave WithFailurePenalty out; its doc states the value.
	DefaultFailurePenalty = defaults.FailurePenalty

	// DefaultBand is FastestFirst's hysteresis factor: 1.25.
	//
	// Deprecated: the zero FastestFirstSettings.Band; its doc states the
	// value.
	DefaultBand = defaults.Band

	// DefaultExponent is FastestFirst's α: 2.
	//
	// Deprecated: the zero FastestFirstSettings.Exponent; its doc states
	// the value.
	DefaultExponent = defaults.Exponent

	// DefaultFloor is FastestFirst's least weight, out of 100: 1.
	//
	// Deprecated: the zero FastestFirstSettings.Floor; its doc states the
	// value.
	DefaultFloor = defaults.Floor

	// DefaultTolerance is FastestFirst's tolerance: 3.
	//
	// Deprecated: the zero FastestFirstSettings.Tolerance; its doc states
	// the value.
	DefaultTolerance = defaults.Tolerance

	// DefaultProbesPerPick is the probes a Prequal request sends: 3.
	//
	// Deprecated: the zero PrequalSettings.ProbesPerPick; its doc states
	// the value.
	DefaultProbesPerPick = defaults.ProbesPerPick

	// DefaultProbesPerSecond caps a Prequal's probes a second: 10000.
	//
	// Deprecated: the zero PrequalSettings.ProbesPerSecond; its doc states
	// the value.
	DefaultProbesPerSecond = defaults.ProbesPerSecond

	// DefaultProbePoolSize is the answers a Prequal's pool holds: 4.
	//
	// Deprecated: the zero PrequalSettings.PoolSize; its doc states the
	// value.
	DefaultProbePoolSize = defaults.ProbePoolSize

	// DefaultProbeMaxAge is how old an answer in a Prequal's pool may be:
	// 1 s.
	//
	// Deprecated: the zero PrequalSettings.MaxAge; its doc states the
	// value.
	DefaultProbeMaxAge = defaults.ProbeMaxAge

	// DefaultHotQuantile is the quantile above which a Prequal's answer is
	// hot: 0.3.
	//
	// Deprecated: the zero PrequalSettings.HotQuantile; its doc states the
	// value.
	DefaultHotQuantile = defaults.HotQuantile
)
