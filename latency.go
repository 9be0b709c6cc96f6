package balancer

// latencyStats is the per-peer latency state of the latency-aware pickers
// (FastestFirst, P2CPeakEWMA). Guarded by the owning picker's lock.
type latencyStats struct {
	ewma  float64 // nanoseconds
	stamp int64   // unix nanoseconds of the last update
}
