package subset

import "github.com/lbgo/balancer/internal/subsetting"

// Rendezvous returns rendezvous (highest random weight)
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
// have no index; choose Ring where they do.
//
// It refuses with balancer.ErrInvalidConfig a size out of [1, MaxClients] or
// an empty clientKey. The Subsetter is immutable and safe for concurrent
// use.
func Rendezvous(clientKey string, size int) (Subsetter, error) {
	return named("Rendezvous")(subsetting.Rendezvous(clientKey, size))
}

// Random returns random subsetting as gRFC A68 has it (grpc-go's
// random_subsetting): a per-client seed, drawn once by the caller (from
// its own rand.Source), ranks the backends by a seeded hash of their keys
// and the client takes the first size. It is Rendezvous with the
// seed for the client's key, with its churn bound (one member per backend
// added or removed) and its spread. The hash is this package's (FNV-1a
// mixed by SplitMix64's finalizer), not A68's XXH64, so a seed does not
// choose the subset grpc-go's policy would.
//
// It refuses with balancer.ErrInvalidConfig a size out of [1, MaxClients].
// The Subsetter is immutable and safe for concurrent use.
func Random(size int, seed uint64) (Subsetter, error) {
	return named("Random")(subsetting.Random(size, seed))
}
