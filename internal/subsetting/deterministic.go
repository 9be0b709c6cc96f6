package subsetting

import (
	"math/bits"
	"slices"
)

// Deterministic is the SRE book's deterministic subsetting for client
// index of count (see subset.Deterministic for the contract).
func Deterministic(index, count, size int) (Subsetter, error) {
	if err := checkSubsetSize(size); err != nil {
		return nil, err
	}
	if err := checkClient(index, count); err != nil {
		return nil, err
	}
	return deterministic{index, size}, nil
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
