// Package subsetting computes subsets and keeps a picker's share of a
// backend list: the implementation behind package subset and the balancer
// package's deprecated names for it (Subset, NewSubset and the
// subsetters), which cannot call package subset (it imports balancer).
// Package subset documents the contracts.
package subsetting

import (
	"cmp"
	"fmt"
	"slices"
)

// MaxClients bounds a subsetter's client count and subset size: far above
// any fleet, and low enough that index·backends never overflows.
const MaxClients = 1 << 31

// Subsetter chooses one client's subset of a backend list (see
// subset.Subsetter).
type Subsetter interface {
	Subset(keys []string) []int
}

// subsetBackend is one entry of a backend list as the subsetters see it:
// its key, the number of entries with that key before it (two peers with
// one address are two backends, the k-th after the (k-1)-th), its hash
// and its position in the list.
type subsetBackend struct {
	key  string
	occ  int
	hash uint64
	pos  int
}

// subsetBackends names each key of keys for the subsetters. The hash mixes
// the key's FNV-1a hash with its occurrence: stable across processes and
// releases, as every client of a fleet must compute the same one.
func subsetBackends(keys []string) []subsetBackend {
	bs := make([]subsetBackend, len(keys))
	seen := make(map[string]int, len(keys))
	for i, k := range keys {
		occ := seen[k]
		seen[k] = occ + 1
		bs[i] = subsetBackend{key: k, occ: occ, hash: mix64(fnv64(k) ^ mix64(uint64(occ))), pos: i}
	}
	return bs
}

// byKey orders backends by key, then occurrence: the order every client
// agrees on whatever order its list came in.
func byKey(a, b subsetBackend) int {
	return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.occ, b.occ))
}

// positions returns the list positions of bs, ascending.
func positions(bs []subsetBackend) []int {
	out := make([]int, len(bs))
	for i, b := range bs {
		out[i] = b.pos
	}
	slices.Sort(out)
	return out
}

// fnv64 is the 64-bit FNV-1a hash of s.
func fnv64(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// mix64 is SplitMix64's finalizer: a bijection of the 64-bit words whose
// every output bit depends on every input bit.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Refused is a constructor's refusal: what was wrong, the value named.
// Error is the text alone, so that a caller can put its name before it and
// its sentinel after it.
type Refused struct{ What string }

func (e *Refused) Error() string { return e.What }

// checkSubsetSize refuses a size out of [1, MaxClients]. The bound is
// compared as an int64: an int of 32 bits does not hold it.
func checkSubsetSize(size int) error {
	if size <= 0 || int64(size) > MaxClients {
		return &Refused{fmt.Sprintf("subset size %d out of [1, %d]", size, int64(MaxClients))}
	}
	return nil
}

// checkClient refuses a client count out of [1, MaxClients] or an index
// out of [0, count).
func checkClient(index, count int) error {
	switch {
	case count <= 0 || int64(count) > MaxClients:
		return &Refused{fmt.Sprintf("client count %d out of [1, %d]", count, int64(MaxClients))}
	case index < 0 || index >= count:
		return &Refused{fmt.Sprintf("client index %d out of [0, %d)", index, count)}
	}
	return nil
}
