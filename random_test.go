package balancer

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hash and random pickers fall back to smooth round robin, where a
// peer of weight 0 can be picked as in SmoothWRR; they promise no cycle.
var _ = declareTraits("Random", fuzzTrait{zeroWeight: zwAny})
var _ = declareTraits("RandomTwo", fuzzTrait{zeroWeight: zwAny})

// hkScript is a rand.Source that returns its values in order, then those
// of a seeded PCG.
type hkScript struct {
	vals []uint64
	pcg  *rand.PCG
}

func hkSource(vals []uint64) *hkScript { return &hkScript{vals: vals, pcg: rand.NewPCG(1, 2)} }

func (s *hkScript) Uint64() uint64 {
	if len(s.vals) == 0 {
		return s.pcg.Uint64()
	}
	v := s.vals[0]
	s.vals = s.vals[1:]
	return v
}

// draw4 is the 64-bit value that makes an alias table over four peers of
// equal weight (every column full) draw peer k: the column is the high half
// of x·4, so x = k·2^62.
func draw4(ks ...int) []uint64 {
	out := make([]uint64, len(ks))
	for i, k := range ks {
		out[i] = uint64(k) << 62
	}
	return out
}

// TestRandomTwo_choice checks nginx's comparison on scripted draws: the
// first of the pair is kept only if second.conns·first.weight >
// first.conns·second.weight, so a tie goes to the second; drawing the
// first again, or an ineligible or tried peer, is a try, and so is the
// first peer's draw.
func TestRandomTwo_choice(t *testing.T) {
	tests := []struct {
		name      string
		conns     [4]int64
		down      int // -1: none
		draws     []int
		want      int
		wantTries int32
	}{
		{"tie goes to the second", [4]int64{1, 1, 0, 0}, -1, []int{0, 1}, 1, 1},
		{"first less loaded", [4]int64{0, 1, 0, 0}, -1, []int{0, 1}, 0, 1},
		{"second less loaded", [4]int64{2, 1, 0, 0}, -1, []int{0, 1}, 1, 1},
		{"same peer again is a try", [4]int64{0, 0, 0, 0}, -1, []int{2, 2, 3}, 3, 2},
		{"down peer is a try", [4]int64{5, 0, 0, 0}, 1, []int{1, 0, 1, 3}, 3, 3},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := numberedWeighted(1, 1, 1, 1)
			if tc.down >= 0 {
				Down()(peers[tc.down])
			}
			b, err := NewRandomTwo(peers, hkClock(), WithRand(hkSource(draw4(tc.draws...))))
			require.NoError(t, err)
			for i, c := range tc.conns {
				peers[i].slots.Store(c)
			}
			var r Request
			got := mustPick(t, b, &r)
			assert.Equal(t, peers[tc.want], got)
			assert.Equal(t, tc.wantTries, r.hs.tries)
			assert.Equal(t, tc.conns[tc.want]+1, got.inFlight())
		})
	}
}

// TestRandomPickers_twentyTries: with one eligible peer among four, every
// draw that is not it is a try (and for RandomTwo, a pair can never form);
// past 20 tries the request goes to round robin. Scripted draws all land
// on peer 3, down, then on 0 for RandomTwo: it can pair 0 with nothing.
func TestRandomPickers_twentyTries(t *testing.T) {
	peers := numberedWeighted(1, 1, 1, 1)
	Down()(peers[1])
	Down()(peers[2])
	Down()(peers[3])
	ks := make([]int, 21)
	for i := range ks {
		ks[i] = 3
	}
	rnd, err := NewRandom(peers, hkClock(), WithRand(hkSource(draw4(ks...))))
	require.NoError(t, err)
	var r Request
	assert.Equal(t, peers[0], mustPick(t, rnd, &r))
	assert.EqualValues(t, 21, r.hs.tries, "21 draws on a down peer, then round robin")

	peers2 := numberedWeighted(1, 1, 1, 1)
	Down()(peers2[1])
	Down()(peers2[2])
	Down()(peers2[3])
	two, err := NewRandomTwo(peers2, hkClock(), WithRand(hkSource(nil)))
	require.NoError(t, err)
	var r2 Request
	assert.Equal(t, peers2[0], mustPick(t, two, &r2))
	assert.EqualValues(t, 21, r2.hs.tries, "a pair never forms: round robin")
}

// TestRandom_proportions: Random draws peer i with probability w_i/W.
// With N picks each count is binomial; every count must lie within 5
// standard deviations of N·w_i/W (a false failure about once in 3.5 million
// runs per peer, and the source is seeded, so the run is reproducible).
func TestRandom_proportions(t *testing.T) {
	weights := []int{1, 2, 3, 4, 0, 10}
	const n = 200000
	for _, two := range []bool{false, true} {
		peers := numberedWeighted(weights...)
		var p Picker
		var err error
		if two {
			// With every pick reported at once, in-flight counts are all
			// 0 and the second of the pair always wins: its draw is by
			// weight among the peers other than the first, so peer i is
			// chosen with probability Σ_j w_j/W · w_i/(W − w_j), j ≠ i.
			p, err = NewRandomTwo(peers, hkClock(), WithRand(rand.NewPCG(7, 8)))
		} else {
			p, err = NewRandom(peers, hkClock(), WithRand(rand.NewPCG(7, 8)))
		}
		require.NoError(t, err)
		count := map[*Peer]int{}
		for range n {
			q := mustPick(t, p, nil)
			count[q]++
			require.NoError(t, p.Done(q, Outcome{}))
		}
		total := 0.0
		for _, w := range weights {
			total += float64(w)
		}
		for i, w := range weights {
			prob := float64(w) / total
			if two {
				prob = 0
				for j, wj := range weights {
					if j != i && wj > 0 {
						prob += float64(wj) / total * float64(w) / (total - float64(wj))
					}
				}
			}
			mean := n * prob
			sd := math.Sqrt(n * prob * (1 - prob))
			assert.InDelta(t, mean, float64(count[peers[i]]), 5*sd+1e-9, "two=%v peer %d weight %d", two, i, w)
		}
	}
}
