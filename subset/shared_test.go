package subset

import (
	"github.com/lbgo/balancer"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An inner picker serves one Subset: a second New over it is refused
// with balancer.ErrPeerInUse and takes nothing from the first, whose picks stay in
// its own backends. Every subsetter keeps both of two backends here
// (size 2), so the first Subset's peers are [f g] whatever it hashes.
func TestSubset_sharedInnerRefused(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		by := mustSubsetter(Rendezvous("client", 2))
		inner, err := pc.new(nil)
		require.NoError(t, err)
		first := addrPeers(2, 0)  // f, g
		second := addrPeers(2, 2) // h, i
		s, err := New(inner, first, by)
		require.NoError(t, err)
		_, err = New(inner, second, by)
		require.ErrorIs(t, err, balancer.ErrPeerInUse)
		assert.Equal(t, addrsOf(first), addrsOf(s.Peers()))
		assert.False(t, second[0].InUse(), "a refused New claims no peer")
		var r balancer.Request
		for range 20 {
			r = balancer.Request{}
			p, err := s.Pick(&r)
			require.NoError(t, err)
			assert.Contains(t, addrsOf(first), p.Addr())
			require.NoError(t, s.Done(p, balancer.Outcome{}))
		}
		// A Subset is an inner picker too.
		third, fourth := addrPeers(2, 4), addrPeers(2, 6)
		outer, err := New(s, third, by)
		require.NoError(t, err)
		_, err = New(s, fourth, by)
		assert.ErrorIs(t, err, balancer.ErrPeerInUse)
		assert.Equal(t, addrsOf(third), addrsOf(outer.Peers()))
	})
}

// A New that fails leaves its inner picker free for the next.
func TestSubset_failedNewSubsetReleasesInner(t *testing.T) {
	by := mustSubsetter(Rendezvous("client", 2))
	inner, err := balancer.NewRoundRobin(nil)
	require.NoError(t, err)
	_, err = New(inner, []*balancer.Peer{balancer.NewPeer(ipAddr(1)), nil}, by)
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	s, err := New(inner, addrPeers(2, 0), by)
	require.NoError(t, err)
	assert.Len(t, s.Peers(), 2)
}
