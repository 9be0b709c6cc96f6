package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSmoothWRR_groupedCycleMatchesScan checks buildCycle, which groups peers
// by weight, against nginx's scan run W times, written out here, on lists
// with many peers per weight, down peers and peers of weight 0; and the
// checkpointed pick counts against a count of the sequence.
func TestSmoothWRR_groupedCycleMatchesScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := range 60 {
		n := 2 + rng.IntN(300)
		distinct := 1 + rng.IntN(8)
		peers := make([]*Peer, n)
		for i := range peers {
			w := 1 + rng.IntN(distinct)
			if rng.IntN(20) == 0 {
				w = 0
			}
			opts := []PeerOption{Weight(w)}
			if rng.IntN(10) == 0 {
				opts = append(opts, Down())
			}
			peers[i] = NewPeer(fmt.Sprint("p", i), opts...)
		}
		s, err := NewSmoothWRR(peers)
		require.NoError(t, err)
		l := s.load()
		var total int64
		for _, p := range l.primary {
			if !p.IsDown() {
				total += int64(p.Weight())
			}
		}
		if total == 0 {
			continue
		}
		c := buildCycle(l, total)
		require.NotNil(t, c, "trial %d", trial)

		// nginx's scan: every live peer gains its weight, the first
		// largest wins and gives back the total.
		cw := make([]int64, n)
		want := make([]int32, total)
		for k := range want {
			best := -1
			for i, p := range l.primary {
				if p.IsDown() {
					continue
				}
				cw[i] += int64(p.Weight())
				if best < 0 || cw[i] > cw[best] {
					best = i
				}
			}
			cw[best] -= total
			want[k] = int32(best)
		}
		require.Equal(t, want, c.seq, "trial %d: %d peers", trial, n)

		for range 20 {
			k := uint64(rng.Int64N(total))
			c.countLocked(k)
			counts := make([]int64, n)
			for _, i := range want[:k] {
				counts[i]++
			}
			require.Equal(t, counts, c.counts, "trial %d: first %d picks", trial, k)
		}
	}
}

// TestSmoothWRR_cycleFold checks that the cycle's counter, folded past
// foldAt, carries on with the same slots.
func TestSmoothWRR_cycleFold(t *testing.T) {
	s, err := NewSmoothWRR(benchPeers(7))
	require.NoError(t, err)
	c := s.cycle.Load()
	require.NotNil(t, c)
	start := uint64(foldAt - 3*c.w)
	c.ctr.Store(start)
	for k := range 10 * c.w {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		assert.Same(t, c.list.primary[c.seq[(start+k)%c.w]], p, "pick %d after %d", k, start)
	}
	assert.Same(t, c, s.cycle.Load(), "still the same cycle")
	assert.Less(t, c.ctr.Load(), uint64(foldAt), "folded")
}
