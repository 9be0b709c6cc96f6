package balancer

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/internal/defaults"
)

// The seams a wrapper beside a picker uses (package subset): Err, InUse,
// Adopt and Claim.

// Err is the first bad option's error, the one a picker refuses the peer
// with; nil for a good peer.
func TestPeer_err(t *testing.T) {
	assert.NoError(t, NewPeer("a", Weight(3), MaxFails(0)).Err())
	for _, tc := range []struct {
		name string
		p    *Peer
		want string
	}{
		{"weight", NewPeer("a", Weight(-1)), "weight -1"},
		{"first of two", NewPeer("a", MaxConns(-2), MaxFails(-3)), "max_conns -2"},
		{"empty hash text", NewPeer("a", HashText("")), "empty hash text"},
		{"empty address", NewPeer(""), "empty peer address"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.Err()
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			rr, err := NewRoundRobin(nil)
			require.NoError(t, err)
			assert.Equal(t, tc.p.Err(), rr.Add(tc.p), "Err is what Add refuses the peer with")
		})
	}
}

// InUse follows the peer's claims: Add, Remove, and Update's release of an
// unmatched peer.
func TestPeer_inUse(t *testing.T) {
	a, b := NewPeer("a"), NewPeer("b")
	assert.False(t, a.InUse())
	rr, err := NewRoundRobin([]*Peer{a, b})
	require.NoError(t, err)
	assert.True(t, a.InUse())
	require.NoError(t, rr.Remove(a))
	assert.False(t, a.InUse())
	require.NoError(t, rr.Update([]*Peer{NewPeer("c")}))
	assert.False(t, b.InUse(), "released by Update")
}

// Adopt copies the configuration Update copies to a peer it keeps: every
// parameter but the address and the hash text.
func TestPeer_adopt(t *testing.T) {
	p := NewPeer("a", HashText("ring-a"))
	q := NewPeer("b", Weight(5), MaxFails(3), FailTimeout(2*time.Second), MaxConns(7), Backup(), Down(), Value("v"), HashText("ring-b"))
	require.NoError(t, p.Adopt(q))
	assert.Equal(t, "a", p.Addr())
	assert.Equal(t, "ring-a", p.HashText())
	assert.Equal(t, 5, p.Weight())
	assert.Equal(t, 5, p.Snapshot().EffectiveWeight, "a changed weight resets the effective weight")
	assert.Equal(t, 3, p.MaxFails())
	assert.Equal(t, 2*time.Second, p.FailTimeout())
	assert.Equal(t, 7, p.MaxConns())
	assert.True(t, p.IsBackup())
	assert.True(t, p.IsDown())
	assert.Equal(t, "v", p.Value())

	// And back: the flags clear, the value goes.
	require.NoError(t, p.Adopt(NewPeer("c")))
	assert.Equal(t, []any{1, 1, defaults.FailTimeout, 0, false, false, nil},
		[]any{p.Weight(), p.MaxFails(), p.FailTimeout(), p.MaxConns(), p.IsBackup(), p.IsDown(), p.Value()})
}

// Adopt refuses, changing nothing, a peer a picker holds and a q with a bad
// option.
func TestPeer_adoptRefused(t *testing.T) {
	held := NewPeer("a", Weight(2))
	rr, err := NewRoundRobin([]*Peer{held})
	require.NoError(t, err)
	err = held.Adopt(NewPeer("b", Weight(9)))
	require.ErrorIs(t, err, ErrPeerInUse)
	assert.Contains(t, err.Error(), `"a"`)
	assert.Equal(t, 2, held.Weight())

	free := NewPeer("c", Weight(2))
	bad := NewPeer("d", Weight(3), MaxFails(-1))
	assert.Equal(t, bad.Err(), free.Adopt(bad))
	assert.Equal(t, 2, free.Weight())
	assert.Equal(t, 2, rr.Peers()[0].Weight(), "the picker's peer unchanged")
}

// Adopt racing pickers that claim the peer: each Adopt lands before the
// claim or is refused, and the race detector sees no unguarded write.
func TestPeer_adoptRacesClaims(t *testing.T) {
	for range 50 {
		p := NewPeer("a")
		rr, err := NewRoundRobin(nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		var adoptErr, addErr error
		wg.Go(func() { adoptErr = p.Adopt(NewPeer("b", Weight(4))) })
		wg.Go(func() { addErr = rr.Add(p) })
		wg.Wait()
		require.NoError(t, addErr)
		if adoptErr != nil {
			require.ErrorIs(t, adoptErr, ErrPeerInUse)
			assert.Equal(t, 1, p.Weight())
		} else {
			assert.Equal(t, 4, p.Weight())
		}
		_ = p.Snapshot()
	}
}

// Claim holds every picker of the registry for one wrapper; release frees
// it; a Balancer of another package is not tracked.
func TestClaim(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		b, err := pc.new(nil)
		require.NoError(t, err)
		release, err := Claim(b)
		require.NoError(t, err)
		_, err = Claim(b)
		require.ErrorIs(t, err, ErrPeerInUse)
		release()
		release, err = Claim(b)
		require.NoError(t, err)
		assert.NotNil(t, release)
	})
	foreign := struct{ Balancer }{}
	for range 2 {
		release, err := Claim(foreign)
		require.NoError(t, err)
		release()
	}
}
