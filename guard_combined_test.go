package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGuards_panicWhileWarming: panic mode holds while a peer warms. Two
// peers from the constructor and one added later (in slow start for an
// hour), max_fails 1: each failure takes its peer out, so after every peer
// has failed once none is eligible, below WithPanicThreshold(50), and a
// pick must ignore the fail windows, warm-up or not: 30 picks, each
// reported failed, all succeed. (FastestFirst never picks the warming
// peer while the others are idle, as its doc says: two out of three is
// panic there too.) Every picker that takes slow start.
func TestGuards_panicWhileWarming(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := makePeers(2, letter, func(int) []PeerOption { return []PeerOption{FailTimeout(time.Minute)} })
		b, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithSlowStart(time.Hour, 1, 10))
		if err != nil {
			require.ErrorIs(t, err, ErrInvalidConfig)
			t.Skip(err)
		}
		require.NoError(t, toSet(b).Add(NewPeer("c", FailTimeout(time.Minute))))
		out := map[string]bool{}
		for range 30 {
			p, err := b.Pick(nil)
			require.NoError(t, err, "in panic, a peer out is picked (failed so far: %v)", out)
			out[p.Addr()] = true
			require.NoError(t, b.Done(p, Outcome{Failed: true}))
			clk.add(time.Millisecond)
		}
		require.True(t, b.(interface{ InPanic() bool }).InPanic(), "failed: %v", out)
	})
}
