package balancer

import (
	"cmp"
	"fmt"
	"slices"
)

// RendezvousSubsetter returns rendezvous (highest random weight)
// subsetting for a client without an index: the client named clientKey
// (a host or pod name, unique in the fleet) takes the size backends with
// the highest hash of (clientKey, backend key).
//
// Churn: a backend added enters a subset only by pushing out its lowest
// member, and a backend removed from a subset is replaced by the best of
// the rest, so one backend added or removed changes at most one member,
// and k backends at most min(k, size).
//
// Balance: none promised. Each subset is a pseudo-random draw, so
// connections per backend spread as random subsetting's do: at 300
// clients, 300 backends and subsets of 30 the least connected backend has
// about half the mean and the most about 1.5 times it (the SRE book
// reports 63% and 121% for its random subsets). Choose it where clients
// have no index; choose RingSubsetter where they do.
//
// It refuses with ErrInvalidConfig a size out of [1, MaxSubsetClients] or
// an empty clientKey. The Subsetter is immutable and safe for concurrent
// use.
func RendezvousSubsetter(clientKey string, size int) (Subsetter, error) {
	const who = "RendezvousSubsetter"
	if err := checkSubsetSize(who, size); err != nil {
		return nil, err
	}
	if clientKey == "" {
		return nil, fmt.Errorf("balancer: %s: empty client key: %w", who, ErrInvalidConfig)
	}
	return rendezvous{mix64(fnv64(clientKey)), size}, nil
}

// RandomSubsetter returns random subsetting as gRFC A68 has it (grpc-go's
// random_subsetting): a per-client seed, drawn once by the caller (from
// its own rand.Source), ranks the backends by a seeded hash of their keys
// and the client takes the first size. It is RendezvousSubsetter with the
// seed for the client's key, with its churn bound (one member per backend
// added or removed) and its spread. The hash is this package's (FNV-1a
// mixed by SplitMix64's finalizer), not A68's XXH64, so a seed does not
// choose the subset grpc-go's policy would.
//
// It refuses with ErrInvalidConfig a size out of [1, MaxSubsetClients].
// The Subsetter is immutable and safe for concurrent use.
func RandomSubsetter(size int, seed uint64) (Subsetter, error) {
	if err := checkSubsetSize("RandomSubsetter", size); err != nil {
		return nil, err
	}
	return rendezvous{mix64(seed ^ 0x5ca1ab1e), size}, nil
}

type rendezvous struct {
	client uint64
	size   int
}

// Subset is O(B log B). A backend's weight is mix64 of its hash xor the
// client's: for a fixed client a bijection of the backends' hashes, so no
// two backends tie but for equal hashes (then the key order decides).
func (r rendezvous) Subset(keys []string) []int {
	bs := subsetBackends(keys)
	if r.size >= len(bs) {
		return positions(bs)
	}
	for i := range bs {
		bs[i].hash = mix64(bs[i].hash ^ r.client)
	}
	slices.SortFunc(bs, func(a, b subsetBackend) int { return cmp.Or(cmp.Compare(b.hash, a.hash), byKey(a, b)) })
	return positions(bs[:r.size])
}
