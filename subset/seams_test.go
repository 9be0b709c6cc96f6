package subset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// config is what Adopt copies of a peer, read through its getters.
func config(p *balancer.Peer) []any {
	return []any{p.Weight(), p.MaxFails(), p.FailTimeout(), p.MaxConns(), p.IsBackup(), p.IsDown(), p.Value()}
}

// configOf rebuilds what Adopt copies: a new peer built from it and one
// that adopted the peer read the same, down flag set or cleared.
func TestConfigOf_isAdopt(t *testing.T) {
	for _, opts := range [][]balancer.PeerOption{
		nil,
		{balancer.Weight(0), balancer.MaxFails(0), balancer.FailTimeout(0)},
		{balancer.Weight(7), balancer.MaxFails(4), balancer.FailTimeout(3 * time.Second), balancer.MaxConns(9), balancer.Backup(), balancer.Down(), balancer.Value(42)},
	} {
		p := balancer.NewPeer("a", opts...)
		adopted := balancer.NewPeer("b")
		require.NoError(t, adopted.Adopt(p))
		assert.Equal(t, config(adopted), config(balancer.NewPeer("c", configOf(p, p.IsDown())...)))
		up := balancer.NewPeer("d", configOf(p, false)...)
		assert.False(t, up.IsDown())
		assert.Equal(t, config(adopted)[:5], config(up)[:5])
	}
}

// SetWeight and SetDown of a backend outside the subset change it and only
// it, the rest of its configuration kept.
func TestSubset_outsideChanges(t *testing.T) {
	inner, err := balancer.NewRoundRobin(nil)
	require.NoError(t, err)
	backends := addrPeers(6, 0, balancer.MaxFails(3), balancer.MaxConns(5), balancer.Value("x"))
	s, err := New(inner, backends, mustSubsetter(Ring(0, 2, 3)))
	require.NoError(t, err)
	var out *balancer.Peer
	for _, p := range s.Backends() {
		if !slices.Contains(s.Peers(), p) {
			out = p
			break
		}
	}
	require.NotNil(t, out)
	require.NoError(t, s.SetDown(out, true))
	require.NoError(t, s.SetWeight(out, 4))
	assert.Equal(t, []any{4, 3, defaults.FailTimeout, 5, false, true, "x"}, config(out))
	require.NoError(t, s.SetDown(out, false))
	assert.Equal(t, []any{4, 3, defaults.FailTimeout, 5, false, false, "x"}, config(out))
	err = s.SetWeight(out, -1)
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "weight -1")
	assert.Equal(t, 4, out.Weight())
	assert.False(t, out.InUse(), "still held by no picker")
}

// Stats is the inner picker's, for every picker of the registry: here its
// count of picks refused with ErrNoLivePeer while every member is down.
func TestSubset_statsForwarded(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		inner, err := pc.new(nil)
		require.NoError(t, err)
		s, err := New(inner, addrPeers(6, 0), mustSubsetter(Rendezvous("c", 3)))
		require.NoError(t, err)
		for _, p := range s.Peers() {
			require.NoError(t, s.SetDown(p, true))
		}
		const picks = 7
		for range picks {
			_, err := s.Pick(nil)
			require.ErrorIs(t, err, balancer.ErrNoLivePeer)
		}
		st := s.Stats()
		assert.Equal(t, uint64(picks), st.NoLivePeer)
		assert.Equal(t, inner.(balancer.Stats).Stats(), st)
	})
}

// The deprecated names in package balancer choose the same subsets and
// keep the same backend lists as this package's, and keep their old error
// texts.
func TestDeprecatedNames(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = ipAddr(r.IntN(1000))
	}
	type pair struct {
		old func() (balancer.Subsetter, error)
		cur func() (Subsetter, error)
	}
	for name, p := range map[string]pair{
		"Deterministic": {func() (balancer.Subsetter, error) { return balancer.DeterministicSubsetter(3, 10, 8) }, func() (Subsetter, error) { return Deterministic(3, 10, 8) }},
		"Ring":          {func() (balancer.Subsetter, error) { return balancer.RingSubsetter(3, 10, 8) }, func() (Subsetter, error) { return Ring(3, 10, 8) }},
		"Rendezvous":    {func() (balancer.Subsetter, error) { return balancer.RendezvousSubsetter("c", 8) }, func() (Subsetter, error) { return Rendezvous("c", 8) }},
		"Random":        {func() (balancer.Subsetter, error) { return balancer.RandomSubsetter(8, 99) }, func() (Subsetter, error) { return Random(8, 99) }},
	} {
		old, err := p.old()
		require.NoError(t, err, name)
		cur, err := p.cur()
		require.NoError(t, err, name)
		assert.Equal(t, cur.Subset(keys), old.Subset(keys), name)
	}
	_, err := balancer.RingSubsetter(0, 0, 3)
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.True(t, strings.HasPrefix(err.Error(), "balancer: RingSubsetter: client count 0"), "%v", err)
	assert.Equal(t, MaxClients, balancer.MaxSubsetClients)

	// The same changes through both wrappers leave the same lists.
	by := mustSubsetter(Ring(1, 4, 3))
	oldInner, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	curInner, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	old, err := balancer.NewSubset(oldInner, addrPeers(8, 0), by)
	require.NoError(t, err)
	cur, err := New(curInner, addrPeers(8, 0), by)
	require.NoError(t, err)
	same := func(step string) {
		t.Helper()
		assert.Equal(t, addrsOf(old.Peers()), addrsOf(cur.Peers()), step)
		assert.Equal(t, addrsOf(old.Backends()), addrsOf(cur.Backends()), step)
	}
	same("new")
	require.NoError(t, old.Add(addrPeers(3, 8)...))
	require.NoError(t, cur.Add(addrPeers(3, 8)...))
	same("add")
	require.NoError(t, old.Remove(old.Peers()[0]))
	require.NoError(t, cur.Remove(cur.Peers()[0]))
	same("remove")
	require.NoError(t, old.Update(addrPeers(5, 2)))
	require.NoError(t, cur.Update(addrPeers(5, 2)))
	same("update")
	_, err = balancer.NewSubset(oldInner, nil, by)
	assert.ErrorIs(t, err, balancer.ErrPeerInUse)
	_, err = balancer.NewSubset(nil, nil, by)
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.True(t, strings.HasPrefix(fmt.Sprint(err), "balancer: NewSubset:"), "%v", err)
}
