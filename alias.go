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

// rwTable is Vose's alias table over one list: column i holds peer i with
// probability thr/2^64 and its alias otherwise.
type rwTable struct {
	peers []*Peer
	cols  []rwColumn
	w     []uint64 // the weight each peer is drawn with; 0: never drawn
	n     uint64
}

type rwColumn struct {
	thr   uint64
	alias int
}

// newRWTable builds Vose's alias table (voseAlias) over peers with weights
// w. If every weight is 0 the table is uniform over all peers, as Dubbo's pick
// is. w is kept (with those 1s) for the scan.
func newRWTable(peers []*Peer, w []uint64) rwTable {
	n := uint64(len(peers))
	t := rwTable{peers: peers, w: w, n: n, cols: make([]rwColumn, n)}
	if n == 0 {
		return t
	}
	var total uint64
	for _, x := range w {
		total += x
	}
	if total == 0 {
		for i := range w {
			w[i] = 1
		}
		total = n
	}
	voseAlias(w, total, make([]uint64, n), nil, nil, func(i int, thr uint64, alias int) {
		t.cols[i] = rwColumn{thr: thr, alias: alias}
	})
	return t
}

// draw maps one 64-bit random value to a peer index: the high half of x·n
// picks the column (Lemire's multiply-shift range reduction) and the low
// half, uniform on a grid of about 2^64/n points, is the coin. Both are off
// uniform by at most n/2^64 (n/2^63 with fastRand64's 63 bits). The coin
// chooses between the column and its alias without a branch (the borrow of
// lo − thr makes the mask): a branch on a random coin is mispredicted as
// often as the coin is fair, which cost more than the rest of the draw
// (BenchmarkRWTableDraw).
func (t *rwTable) draw(x uint64) int {
	hi, lo := bits.Mul64(x, t.n)
	c := &t.cols[hi]
	_, keep := bits.Sub64(lo, c.thr, 0) // 1 if lo < thr: the column's own peer
	return int(hi ^ (hi^uint64(c.alias))&(keep-1))
}
