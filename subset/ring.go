package subset

import "github.com/lbgo/balancer/internal/subsetting"

// Ring returns deterministic subsetting on a ring, the idea of
// Finagle's deterministic aperture without its fractional edges: the
// backends in the order of their keys' hashes form a ring of B places,
// client clientIndex of clientCount starts at place ⌊clientIndex·B /
// clientCount⌋ and takes size consecutive places.
//
// Balance: every backend has the floor or the ceiling of
// clientCount·size/B clients (±1), for any counts (size ≤ B).
//
// Churn: one backend added or removed, anywhere in the ring, changes at
// most one member of a subset whose run does not pass the ring's origin
// (place B−1 to 0) and at most two of one that does, so k backends change
// at most min(2k, size). At 300 clients, 300 backends and subsets of 30,
// +10% of the backends change 4.4 to 6.3 of a client's 30 members on
// average (7 or 8 at most), −10% 3.0 to 4.4 (6 at most), as the keys
// fall: each run moves with the backends before it, not quite by as many
// places as they grew.
//
// A failed backend's clients are neighbours on the ring and share most of
// their subsets, so its load goes to the 2(size−1) backends around it
// rather than all over the fleet: each of its clients spreads over size−1
// backends instead of size, so none gets more than size/(size−1) of its
// load. The hash order (not the keys' order) keeps a subset from
// being a rack or a zone whose addresses are consecutive.
//
// It refuses with balancer.ErrInvalidConfig, naming the value, a size or client
// count out of [1, MaxClients] and an index out of [0, clientCount).
// The Subsetter is immutable and safe for concurrent use.
func Ring(clientIndex, clientCount, size int) (Subsetter, error) {
	return named("Ring")(subsetting.Ring(clientIndex, clientCount, size))
}
