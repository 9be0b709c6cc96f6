package balancer

import (
	"math/bits"
	"math/rand/v2"
	"sync"
	_ "unsafe" // for go:linkname
)

// randSource is a randomized picker's source: the caller's WithRand source,
// used under a small mutex so that it need not be safe for concurrent use
// and a seeded source reproduces the draws, or, without WithRand, the
// runtime's per-thread generator (fastRand64). The zero value draws from
// the runtime.
type randSource struct {
	rnd *rand.Rand // immutable after construction; nil: fastRand64
	mu  sync.Mutex // serializes rnd
}

// newRandSource returns the source for cfg: WithRand's, or the runtime's.
func newRandSource(cfg config) randSource {
	if cfg.src == nil {
		return randSource{}
	}
	return randSource{rnd: rand.New(cfg.src)}
}

// uint64 returns a uniform 64-bit value.
func (s *randSource) uint64() uint64 {
	if s.rnd == nil {
		return fastRand64()
	}
	s.mu.Lock()
	x := s.rnd.Uint64()
	s.mu.Unlock()
	return x
}

// int64N returns a uniform draw in [0, n), n > 0: rand.Rand's unbiased
// method with WithRand, a multiply-shift reduction (off uniform by at most
// n/2^64) without.
func (s *randSource) int64N(n int64) int64 {
	if s.rnd == nil {
		return fastInt64N(n)
	}
	s.mu.Lock()
	x := s.rnd.Int64N(n)
	s.mu.Unlock()
	return x
}

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
