package balancer

import (
	"math/bits"
	"slices"
)

// DeterministicSubsetter returns the deterministic subsetting of Google's
// SRE book (chapter 20, "Load Balancing in the Datacenter") for client
// clientIndex of clientCount: the backends, in key order, are shuffled
// with the client's round (clientIndex / (B/size), B backends) as the seed,
// and the client takes slice clientIndex mod (B/size) of size backends.
//
// Balance: when size divides B, each round's B/size subsets cover every
// backend once, so every backend has the floor or the ceiling of
// clientCount·size/B clients (±1), and exactly that many when B/size also
// divides clientCount. When size does not divide B, each round leaves
// B mod size backends out and the spread can pass 1.
//
// Churn: none bounded. The shuffle depends on B, so adding or removing one
// backend redraws every subset; at 300 clients, 300 backends and subsets
// of 30, ±10% of the backends change about 27 of a client's 30 members
// (see RingSubsetter, which keeps the balance and changes one).
//
// It refuses with ErrInvalidConfig, naming the value, a size or client
// count out of [1, MaxSubsetClients] and an index out of [0, clientCount).
// The Subsetter is immutable and safe for concurrent use.
func DeterministicSubsetter(clientIndex, clientCount, size int) (Subsetter, error) {
	const who = "DeterministicSubsetter"
	if err := checkSubsetSize(who, size); err != nil {
		return nil, err
	}
	if err := checkClient(who, clientIndex, clientCount); err != nil {
		return nil, err
	}
	return deterministic{clientIndex, size}, nil
}

type deterministic struct{ index, size int }

// Subset is O(B log B), with the book's shuffle a Fisher-Yates one drawn
// from SplitMix64 seeded with the round, so that every client (of every
// release) computes the same permutation.
func (d deterministic) Subset(keys []string) []int {
	bs := subsetBackends(keys)
	if d.size >= len(bs) {
		return positions(bs)
	}
	slices.SortFunc(bs, byKey)
	perRound := len(bs) / d.size
	round := uint64(d.index / perRound)
	state := mix64(round + 0x9e3779b97f4a7c15)
	for i := len(bs) - 1; i > 0; i-- {
		state += 0x9e3779b97f4a7c15
		j := int(uint64n(mix64(state), uint64(i+1)))
		bs[i], bs[j] = bs[j], bs[i]
	}
	at := (d.index % perRound) * d.size
	return positions(bs[at : at+d.size])
}

// uint64n maps a uniform 64-bit x onto [0, n) by Lemire's multiply-shift
// (its bias, below n/2⁶⁴, does not matter to a shuffle of a backend list).
func uint64n(x, n uint64) uint64 {
	hi, _ := bits.Mul64(x, n)
	return hi
}
