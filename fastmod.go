package balancer

import "math/bits"

// foldAt is where the lock-free rotation counters (RoundRobin's rings and
// the precomputed cycle's) fold back to a small value congruent to them
// modulo their length. Keeping counters below 2^32 lets the fast paths
// reduce them with fastMod instead of a 64-bit division, and folding keeps
// a rotation exact where a counter that wrapped at 2^64 (or, as in Ribbon's
// issue 259, went negative at 2^31) would jump.
const foldAt = 1 << 31

// fastMod reduces values below 2^32 modulo a fixed n by Lemire's fastmod
// (Lemire, Kaser and Kurz, "Faster Remainder by Direct Computation", 2019):
// with m = ⌈2^64/n⌉, the low 64 bits of m·v are the fraction v/n scaled by
// 2^64, and multiplying that fraction by n keeps the remainder in the high
// 64 bits. It is exact for every 32-bit v and n; for a larger n (not a list
// a process can hold) it still returns a value below n. Two multiplications
// instead of a 64-bit division, the slowest step of a pick after its atomic
// operations. The zero value reduces nothing and must not be used.
type fastMod struct {
	m, n uint64
}

func newFastMod(n uint64) fastMod {
	if n == 0 {
		return fastMod{}
	}
	return fastMod{m: ^uint64(0)/n + 1, n: n}
}

// reduce returns v mod n for v < 2^32.
func (f fastMod) reduce(v uint64) uint64 {
	hi, _ := bits.Mul64(f.m*uint64(uint32(v)), f.n)
	return hi
}
