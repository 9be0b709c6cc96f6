package balancer

import (
	"math"
	"math/rand/v2"
	"testing"
	_ "unsafe" // for go:linkname

	"github.com/stretchr/testify/assert"
)

func TestFastRand64_bits(t *testing.T) {
	// The runtime's draws are its 63 bits shifted to the top, as the
	// reductions read the high bits (a top bit stuck at 0 would leave half
	// the columns of an alias table undrawn). Over 2^14 draws each of bits
	// 1 to 63 is set about 8192 times, σ = 64: 6σ is ±384.
	const draws = 1 << 14
	var ones [64]int
	for range draws {
		x := fastRand64()
		for b := range ones {
			ones[b] += int(x >> b & 1)
		}
	}
	assert.Zero(t, ones[0], "bit 0")
	for b := 1; b < 64; b++ {
		assert.InDelta(t, draws/2, ones[b], 384, "bit %d", b)
	}
}

func TestFastInt64N(t *testing.T) {
	// In range at the edges of int64, and uniform: 3 values over 30000
	// draws, each about 10000 times, σ = sqrt(30000·1/3·2/3) ≈ 82, 6σ ≈ 490.
	for _, n := range []int64{1, 2, math.MaxInt64, 1 << 62} {
		for range 1000 {
			x := fastInt64N(n)
			if x < 0 || x >= n {
				t.Fatalf("fastInt64N(%d) = %d", n, x)
			}
		}
	}
	var counts [3]int
	for range 30000 {
		counts[fastInt64N(3)]++
	}
	for v, c := range counts {
		assert.InDelta(t, 10000, c, 490, "value %d", v)
	}
}

// runtimeCheaprand32 is the runtime's 32-bit generator, for the benchmark's
// two-call form.
//
//go:linkname runtimeCheaprand32 runtime.cheaprand
func runtimeCheaprand32() uint32

var randSink uint64

// BenchmarkRandSource times the draws a randomized pick can take: the
// runtime's cheaprand64 in one call (fastRand64), two 32-bit cheaprand
// calls put together (the form it replaced), math/rand/v2's top-level
// ChaCha8 and a seeded PCG behind randSource's mutex (WithRand).
func BenchmarkRandSource(b *testing.B) {
	seeded := randSource{rnd: rand.New(rand.NewPCG(1, 2))}
	for _, c := range []struct {
		name string
		draw func() uint64
	}{
		{"fastRand64", fastRand64},
		{"twoCheaprand", func() uint64 { return uint64(runtimeCheaprand32())<<32 | uint64(runtimeCheaprand32()) }},
		{"chacha8", rand.Uint64},
		{"WithRand", seeded.uint64},
	} {
		b.Run(c.name, func(b *testing.B) {
			var x uint64
			for b.Loop() {
				x ^= c.draw()
			}
			randSink = x
		})
	}
}
