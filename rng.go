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

// uint64 returns a uniform 64-bit value: all 64 bits from WithRand's
// source, the top 63 (the lowest bit 0) from the runtime's. Callers read the
// high bits (Lemire's reduction, the top 53 bits for a float), which are
// uniform either way. Too big for the compiler to inline: a hot path may
// test rnd and call fastRand64 itself.
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
// n/2^63) without.
func (s *randSource) int64N(n int64) int64 {
	if s.rnd == nil {
		return fastInt64N(n)
	}
	s.mu.Lock()
	x := s.rnd.Int64N(n)
	s.mu.Unlock()
	return x
}

// fastRand64 returns 63 uniform bits, shifted to the top of a 64-bit value
// (the lowest bit is 0), from the runtime's per-thread wyrand generator,
// the one the runtime itself uses for scheduling and map seeds: under half
// the cost of math/rand/v2's top-level ChaCha8 (BenchmarkRandSource), and,
// like it, per thread, so that picks on different cores share no written
// memory (a per-picker state would be one cache line every pick writes).
// It is seeded by the runtime at start-up and no seed reproduces it;
// pickers use it only when WithRand is not given, where the draws were
// never reproducible anyway. Not cryptographic, which no pick needs.
//
// One call to the runtime's cheaprand64, which makes its two 32-bit draws
// inline, where two calls to cheaprand cost a call each, and the function
// inlines into its callers: the draw a pick waits on takes a call, not
// three. A reduction of its value by Lemire's method is off uniform by at
// most n/2^63, twice the bound of 64 bits.
func fastRand64() uint64 {
	return uint64(runtimeCheaprand64()) << 1
}

// runtimeCheaprand64 is the runtime's cheaprand64, which the runtime keeps
// linkable by name for compatibility (its declaration says so).
//
//go:linkname runtimeCheaprand64 runtime.cheaprand64
func runtimeCheaprand64() int64

// fastInt64N returns a uniform draw in [0, n), n > 0, by Lemire's
// multiply-shift reduction of fastRand64's value; off uniform by at most
// n/2^63.
func fastInt64N(n int64) int64 {
	hi, _ := bits.Mul64(fastRand64(), uint64(n))
	return int64(hi)
}
