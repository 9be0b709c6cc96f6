package balancer

import (
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
		inner func() Balancer
	}{
		{"RoundRobin", func() Balancer { b, _ := NewRoundRobin(nil); return b }},
		{"LeastConn", func() Balancer { b, _ := NewLeastConn(nil); return b }},
		{"SmoothWRR", func() Balancer { b, _ := NewSmoothWRR(nil); return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first, second := NewPeer(ipAddr(1), Weight(2)), NewPeer(ipAddr(1), Weight(5))
			// Size 1 of two equal keys: one occurrence, whichever comes
			// first or second in the list by the subsetter's hash.
			s, err := NewSubset(tc.inner(), []*Peer{first, second}, mustSubsetter(RingSubsetter(0, 1, 1)))
			require.NoError(t, err)
			member := s.Peers()[0]
			wantWeight := []int{5, 2} // by list position, as given below
			require.NoError(t, s.Update([]*Peer{second, first}))

			bs := s.Backends()
			require.Len(t, bs, 2)
			assert.NotSame(t, bs[0], bs[1], "one peer listed twice")
			assert.Equal(t, wantWeight[0], bs[0].Weight(), "position 0 keeps the weight it was given")
			assert.Equal(t, wantWeight[1], bs[1].Weight(), "position 1 keeps the weight it was given")
			require.Len(t, s.Peers(), 1)
			assert.Contains(t, bs, s.Peers()[0], "the member is a backend")
			assert.Same(t, member, s.Peers()[0], "the inner picker kept its peer")
			assert.NoError(t, s.Update(bs), "Backends given back")
			assert.NoError(t, s.Add(NewPeer(ipAddr(2))))
			assert.NoError(t, s.Remove(bs[1]))
		})
	}
}
