package balancer

import (
	"cmp"
	"fmt"
	"slices"
)

// MaxSubsetClients bounds a subsetter's client count and subset size: far
// above any fleet, and low enough that index·backends never overflows. The
// caller sets both, so the bound is exported: a value past it is refused
// with ErrInvalidConfig.
const MaxSubsetClients = 1 << 31

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

// checkSubsetSize refuses a size out of [1, MaxSubsetClients]. The bound
// is compared as an int64: an int of 32 bits does not hold it.
func checkSubsetSize(who string, size int) error {
	if size <= 0 || int64(size) > MaxSubsetClients {
		return fmt.Errorf("balancer: %s: subset size %d out of [1, %d]: %w", who, size, int64(MaxSubsetClients), ErrInvalidConfig)
	}
	return nil
}

// checkClient refuses a client count out of [1, MaxSubsetClients] or an
// index out of [0, count).
func checkClient(who string, index, count int) error {
	switch {
	case count <= 0 || int64(count) > MaxSubsetClients:
		return fmt.Errorf("balancer: %s: client count %d out of [1, %d]: %w", who, count, int64(MaxSubsetClients), ErrInvalidConfig)
	case index < 0 || index >= count:
		return fmt.Errorf("balancer: %s: client index %d out of [0, %d): %w", who, index, count, ErrInvalidConfig)
	}
	return nil
}
