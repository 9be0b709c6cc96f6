package balancer

import (
	"math"
	"math/bits"
)

// voseAlias runs Vose's alias method ("A linear algorithm for generating
// random numbers with a given distribution", 1991) in exact integer
// arithmetic over weights w whose sum is total > 0: column i starts with
// s_i = w_i·n out of a capacity of total, so that the n columns hold
// n·total in all. A column below total (small) is topped up from one at or
// above it (large), which becomes its alias and loses what it gave; every
// column ends full, and peer i's share of all columns is s_i/(n·total) =
// w_i/total. set(i, thr, alias) records that column i keeps its own peer
// with probability thr/2^64, ⌊s_i·2^64/total⌋, and gives the rest to alias.
// With total <= MaxWeightSum and n below 2^33, s_i fits in 64 bits.
//
// s, small and large are scratch (s may be w itself, as it is read before
// it is overwritten); voseAlias returns small and large for reuse, so that
// a caller that keeps them allocates nothing.
func voseAlias(w []uint64, total uint64, s []uint64, small, large []int, set func(i int, thr uint64, alias int)) ([]int, []int) {
	n := uint64(len(w))
	small, large = small[:0], large[:0]
	for i, x := range w {
		s[i] = x * n
		if s[i] < total {
			small = append(small, i)
		} else {
			large = append(large, i)
		}
	}
	for len(small) > 0 && len(large) > 0 {
		l := small[len(small)-1]
		small = small[:len(small)-1]
		g := large[len(large)-1]
		large = large[:len(large)-1]
		thr, _ := bits.Div64(s[l], 0, total) // s[l] < total: no overflow
		set(l, thr, g)
		s[g] -= total - s[l]
		if s[g] < total {
			small = append(small, g)
		} else {
			large = append(large, g)
		}
	}
	// The columns left are full: the integer sums leave none short (what
	// is left sums to its count times total, and none is below total once
	// the small ones are gone).
	for _, list := range [2][]int{small, large} {
		for _, i := range list {
			set(i, math.MaxUint64, i)
		}
	}
	return small, large
}
