package subsetting

import (
	"cmp"
	"slices"
)

// Rendezvous is rendezvous (highest random weight) subsetting for the
// client named clientKey (see subset.Rendezvous for the contract).
func Rendezvous(clientKey string, size int) (Subsetter, error) {
	if err := checkSubsetSize(size); err != nil {
		return nil, err
	}
	if clientKey == "" {
		return nil, &Refused{"empty client key"}
	}
	return rendezvous{mix64(fnv64(clientKey)), size}, nil
}

// Random is gRFC A68's random subsetting with the client's seed: Rendezvous
// with the seed for the client's key (see subset.Random).
func Random(size int, seed uint64) (Subsetter, error) {
	if err := checkSubsetSize(size); err != nil {
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
