package balancer

import (
	"math/bits"
	_ "unsafe" // for go:linkname
)

// fastRand64 returns a uniform 64-bit value from the runtime's per-thread
// wyrand generator, the one the runtime itself uses for scheduling and map
// seeds: about half the cost of math/rand/v2's top-level ChaCha8, and, like
// it, per thread, so that picks on different cores share no written memory
// (a per-picker state would be one cache line every pick writes). It is
// seeded by the runtime at start-up and no seed reproduces it; pickers use
// it only when WithRand is not given, where the draws were never
// reproducible anyway. Not cryptographic, which no pick needs.
func fastRand64() uint64 {
	return uint64(runtimeCheaprand())<<32 | uint64(runtimeCheaprand())
}

// runtimeCheaprand is the runtime's cheaprand, which the runtime keeps
// linkable by name for compatibility (its declaration says so).
//
//go:linkname runtimeCheaprand runtime.cheaprand
func runtimeCheaprand() uint32

// fastInt64N returns a uniform draw in [0, n), n > 0, by Lemire's
// multiply-shift reduction of one 64-bit value; off uniform by at most
// n/2^64.
func fastInt64N(n int64) int64 {
	hi, _ := bits.Mul64(fastRand64(), uint64(n))
	return int64(hi)
}
