package subsetting

import (
	"cmp"
	"math/bits"
	"slices"
)

// Ring is deterministic subsetting on a ring for client index of count
// (see subset.Ring for the contract).
func Ring(index, count, size int) (Subsetter, error) {
	if err := checkSubsetSize(size); err != nil {
		return nil, err
	}
	if err := checkClient(index, count); err != nil {
		return nil, err
	}
	return ringSubset{index, count, size}, nil
}

type ringSubset struct{ index, count, size int }

// Subset is O(B log B).
//
// Why ±1: the starts s_i = ⌊i·B/N⌋ come from N points i·B/N spaced B/N
// apart around a circle of circumference B. Backend j is in client i's
// subset when s_i is one of j−size+1 … j (mod B), i.e. when i·B/N lies in
// a half-open arc of length size; equally spaced points in a half-open arc
// of length L·(spacing) number ⌊L⌋ or ⌈L⌉, here L = size·N/B.
//
// Why at most two members per backend added: with B+1 places the start
// becomes ⌊i·(B+1)/N⌋ = ⌊i·B/N + i/N⌋, s_i or s_i+1 (i/N < 1); the new
// backend takes a place k, and every old one at k or after moves one place
// on. A run that does not wrap moves with its elements (k ≤ s_i) or stays
// (k past it), so it holds its old members shifted by at most one place,
// with the new backend possibly inside: one out and one in. A run that
// wraps and has k in its wrapped part has most of its members moved on
// while its start may stay: two out, two in. Removing is adding read
// backwards. The test checks both over every client of every fleet up to
// 14 backends.
func (r ringSubset) Subset(keys []string) []int {
	bs := subsetBackends(keys)
	n := len(bs)
	if r.size >= n {
		return positions(bs)
	}
	slices.SortFunc(bs, func(a, b subsetBackend) int { return cmp.Or(cmp.Compare(a.hash, b.hash), byKey(a, b)) })
	hi, lo := bits.Mul64(uint64(r.index), uint64(n))
	start, _ := bits.Div64(hi, lo, uint64(r.count)) // < n: index < count
	out := make([]subsetBackend, r.size)
	for k := range out {
		out[k] = bs[(int(start)+k)%n]
	}
	return positions(out)
}
