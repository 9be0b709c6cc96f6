package subset

import (
	"fmt"
	"github.com/lbgo/balancer"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two backends at one address are two backends, the subset taking the k-th
// by list order: a list given in another order makes the other one a
// member, which the inner picker matches by address to the member it holds.
// Backends must still list every backend once, each with its own
// configuration, and the next change must go through.
func TestSubset_sameAddressReordered(t *testing.T) {
	for _, tc := range []struct {
		name  string
		inner func() balancer.Balancer
	}{
		{"RoundRobin", func() balancer.Balancer { b, _ := balancer.NewRoundRobin(nil); return b }},
		{"LeastConn", func() balancer.Balancer { b, _ := balancer.NewLeastConn(nil); return b }},
		{"SmoothWRR", func() balancer.Balancer { b, _ := balancer.NewSmoothWRR(nil); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := balancer.NewPeer(ipAddr(1), balancer.Weight(2)), balancer.NewPeer(ipAddr(1), balancer.Weight(5))
			// Size 1 of two equal keys: one occurrence, whichever comes
			// first or second in the list by the subsetter's hash.
			s, err := New(tc.inner(), []*balancer.Peer{first, second}, mustSubsetter(Ring(0, 1, 1)))
			require.NoError(t, err)
			member := s.Peers()[0]
			wantWeight := []int{5, 2} // by list position, as given below
			require.NoError(t, s.Update([]*balancer.Peer{second, first}))

			bs := s.Backends()
			require.Len(t, bs, 2)
			assert.NotSame(t, bs[0], bs[1], "one peer listed twice")
			assert.Equal(t, wantWeight[0], bs[0].Weight(), "position 0 keeps the weight it was given")
			assert.Equal(t, wantWeight[1], bs[1].Weight(), "position 1 keeps the weight it was given")
			require.Len(t, s.Peers(), 1)
			assert.Contains(t, bs, s.Peers()[0], "the member is a backend")
			assert.Same(t, member, s.Peers()[0], "the inner picker kept its peer")
			assert.NoError(t, s.Update(bs), "Backends given back")
			assert.NoError(t, s.Add(balancer.NewPeer(ipAddr(2))))
			assert.NoError(t, s.Remove(bs[1]))
		})
	}
}

// Lists drawn over three addresses, many peers to each, given fresh, as
// Backends returns them reordered, shortened or grown: after every Update
// Backends lists each position's address and given weight, no peer twice,
// and the subset is the Subsetter's over the given keys.
func TestSubset_sameAddressLists(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	fresh := func() []*balancer.Peer {
		ps := make([]*balancer.Peer, r.IntN(9))
		for i := range ps {
			ps[i] = balancer.NewPeer(ipAddr(r.IntN(3)), balancer.Weight(1+r.IntN(9)))
		}
		return ps
	}
	for trial := range 100 {
		inner, err := balancer.NewLeastConn(nil)
		require.NoError(t, err)
		by := mustSubsetter(Rendezvous(fmt.Sprint("client-", trial), 1+r.IntN(5)))
		s, err := New(inner, fresh(), by)
		require.NoError(t, err)
		for step := range 30 {
			var given []*balancer.Peer
			switch r.IntN(3) {
			case 0:
				given = fresh()
			case 1:
				given = s.Backends()
				r.Shuffle(len(given), func(i, j int) { given[i], given[j] = given[j], given[i] })
				if len(given) > 0 && r.IntN(2) == 0 {
					given = given[1:]
				}
			case 2:
				given = append(s.Backends(), fresh()...)
				r.Shuffle(len(given), func(i, j int) { given[i], given[j] = given[j], given[i] })
			}
			weights := make([]int, len(given))
			for i, p := range given {
				weights[i] = p.Weight()
			}
			require.NoError(t, s.Update(given), "trial %d step %d", trial, step)
			bs := s.Backends()
			require.Len(t, bs, len(given))
			seen := map[*balancer.Peer]bool{}
			for i, p := range bs {
				require.False(t, seen[p], "trial %d step %d: %s listed twice", trial, step, p)
				seen[p] = true
				require.Equal(t, given[i].Addr(), p.Addr(), "trial %d step %d position %d", trial, step, i)
				require.Equal(t, weights[i], p.Weight(), "trial %d step %d position %d", trial, step, i)
			}
			for _, p := range s.Peers() {
				require.True(t, seen[p], "trial %d step %d: member %s not a backend", trial, step, p)
			}
			require.ElementsMatch(t, subsetAddrs(by, given), addrsOf(s.Peers()), "trial %d step %d", trial, step)
		}
	}
}
