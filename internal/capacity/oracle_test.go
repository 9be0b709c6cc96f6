package capacity

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// TestOracle: the oracle picks the shortest expected delay, (in flight +
// 1) × mean / workers, counting its own picks until Done. Servers a
// (1 worker, 20 ms) and b (2 workers, 100 ms: 50 ms a request): a's
// delays run 20, 40, 60, … as its count grows, b's 50, 100, 150: the
// picks go a (20 < 50), a (40 < 50), b (60 > 50), a (60 < 100),
// a (80 < 100). Once a's four attempts end the next is a's again (20
// against b's 100); then a redraw of b's mean to 10 ms ((1 + 1) × 10 / 2
// = 10 against a's 40) moves the next to b.
func TestOracle(t *testing.T) {
	a := NewServer(Spec{Name: "a", Workers: 1, Mean: 20 * time.Millisecond, Seed: 1})
	b := NewServer(Spec{Name: "b", Workers: 2, Mean: 100 * time.Millisecond, Seed: 2})
	a.Addr, b.Addr = "127.0.0.1:1", "127.0.0.1:2"
	o := NewOracle([]*Server{a, b})
	pa, pb := balancer.NewPeer(a.Addr), balancer.NewPeer(b.Addr)
	p := o.Picker([]*balancer.Peer{pa, pb})
	var got []string
	for range 5 {
		peer, err := p.Pick(nil)
		require.NoError(t, err)
		got = append(got, peer.Addr())
	}
	assert.Equal(t, []string{a.Addr, a.Addr, b.Addr, a.Addr, a.Addr}, got)
	for range 4 {
		require.NoError(t, p.Done(pa, balancer.Outcome{}))
	}
	peer, err := p.Pick(nil)
	require.NoError(t, err)
	assert.Equal(t, a.Addr, peer.Addr(), "a's attempts ended")
	b.SetMean(10 * time.Millisecond)
	peer, err = p.Pick(nil)
	require.NoError(t, err)
	assert.Equal(t, b.Addr, peer.Addr(), "b redrawn faster")
	assert.ErrorIs(t, p.Done(balancer.NewPeer("elsewhere"), balancer.Outcome{}), balancer.ErrUnknownPeer)
}
