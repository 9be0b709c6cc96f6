package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// everyBackend is a Subsetter whose subset is the whole list, so that a
// Subset over a picker runs the picker's own scenario.
type everyBackend struct{}

func (everyBackend) Subset(keys []string) []int {
	out := make([]int, len(keys))
	for i := range out {
		out[i] = i
	}
	return out
}

// statsCases is every picker of the registry, and each again behind a
// Subset (whose inner picker is built with no peers and given them all),
// so that a counter a Subset failed to forward fails here.
func statsCases() []pickerCase {
	var cs []pickerCase
	for _, pc := range pickerCases {
		cs = append(cs, pc)
		inner := pc
		cs = append(cs, pickerCase{"Subset/" + pc.name, func(peers []*Peer, opts ...Option) (Balancer, error) {
			b, err := inner.new(nil, opts...)
			if err != nil {
				return nil, err
			}
			return NewSubset(b, peers, everyBackend{})
		}, pc.alg})
	}
	return cs
}

func forEachStatsCase(t *testing.T, f func(t *testing.T, pc pickerCase)) {
	for _, pc := range statsCases() {
		t.Run(pc.name, func(t *testing.T) { f(t, pc) })
	}
}

// statsOf reads b's PickerStats, failing the test if b does not implement
// Stats.
func statsOf(t *testing.T, b Balancer) PickerStats {
	t.Helper()
	s, ok := b.(Stats)
	require.True(t, ok, "%T implements Stats", b)
	return s.Stats()
}

// TestStats_everyPicker: every picker of the registry, and a Subset over
// each, implements Stats; a new one reads all zero, and reading it
// allocates nothing.
func TestStats_everyPicker(t *testing.T) {
	forEachStatsCase(t, func(t *testing.T, pc pickerCase) {
		b, err := pc.new(makePeers(3, numbered, nil), newFakeClock().opt())
		require.NoError(t, err)
		assert.Equal(t, PickerStats{}, statsOf(t, b))
		s := b.(Stats)
		assert.Zero(t, testing.AllocsPerRun(100, func() { _ = s.Stats() }), "Stats allocates")
	})
}

// TestStats_noLivePeer: every peer marked down, each of k picks returns
// ErrNoLivePeer and counts one; a pick that finds a peer counts none.
func TestStats_noLivePeer(t *testing.T) {
	const k = 7
	forEachStatsCase(t, func(t *testing.T, pc pickerCase) {
		peers := makePeers(3, numbered, nil)
		b, err := pc.new(peers, newFakeClock().opt())
		require.NoError(t, err)
		var r Request
		require.NoError(t, b.Done(mustPick(t, b, guardRequest(&r, 0)), Outcome{}))
		for _, p := range b.Peers() {
			require.NoError(t, b.SetDown(p, true))
		}
		for i := range k {
			_, err := b.Pick(guardRequest(&r, i+1))
			require.ErrorIs(t, err, ErrNoLivePeer)
		}
		assert.Equal(t, PickerStats{NoLivePeer: k}, statsOf(t, b))
	})
}

// TestStats_panic: 10 peers (max_fails 1), threshold 50%, k failed out.
// Derivation (as TestPanicThreshold_everyPicker's): panic engages when
// (10−k)·100 < 50·10, k > 5. With k = 5 a pick leaves it off (Panics 0);
// with k = 6 the next pick engages it: Panics 1, InPanic. Each k on a
// fresh picker, failed out in one pass as TestPanicThreshold_everyPicker
// does: a second pass after held attempts may never reach its target under
// a latency-aware picker (the others' successes at latency 0 outbid it).
func TestStats_panic(t *testing.T) {
	forEachStatsCase(t, func(t *testing.T, pc pickerCase) {
		peers := makePeers(10, numbered, nil)
		b, err := pc.new(peers, newFakeClock().opt(), WithPanicThreshold(50))
		require.NoError(t, err)
		failOut(t, b, peers[:5])
		reached(t, b, 50)
		assert.Equal(t, PickerStats{}, statsOf(t, b), "k=5: no panic")
		peers = makePeers(10, numbered, nil)
		b, err = pc.new(peers, newFakeClock().opt(), WithPanicThreshold(50))
		require.NoError(t, err)
		failOut(t, b, peers[:6])
		reached(t, b, 50)
		st := statsOf(t, b)
		assert.Equal(t, PickerStats{Panics: 1, InPanic: true}, st, "k=6: panic")
		if d, ok := b.(interface{ PanicCount() uint64 }); ok { // the pickers', not Subset's
			assert.Equal(t, st.Panics, d.PanicCount(), "the deprecated reader agrees")
		}
	})
}

// TestStats_ejectionsCapped: 10 peers (max_fails 1), each failed once,
// WithMaxEjectionPercent(30). Derivation (Envoy's ejectHost): a failure
// takes a peer out while 100·(out+1) ≤ 30·10, so 3 go out and the other
// 7 failures are capped.
func TestStats_ejectionsCapped(t *testing.T) {
	forEachStatsCase(t, func(t *testing.T, pc pickerCase) {
		peers := makePeers(10, numbered, nil)
		b, err := pc.new(peers, newFakeClock().opt(), WithMaxEjectionPercent(30))
		require.NoError(t, err)
		failOut(t, b, peers)
		st := statsOf(t, b)
		assert.Equal(t, PickerStats{EjectionsCapped: 7}, st)
		if d, ok := b.(interface{ EjectionCappedCount() uint64 }); ok { // the pickers', not Subset's
			assert.Equal(t, st.EjectionsCapped, d.EjectionCappedCount(), "the deprecated reader agrees")
		}
	})
}

// TestStats_outlierEjections: TestOutlier_everyPicker's workload (p0 at
// half the others' success rate, 200 attempts a peer); the count is the
// number of peers the rule, applied to the test's own tally, ejects.
func TestStats_outlierEjections(t *testing.T) {
	forEachStatsCase(t, func(t *testing.T, pc pickerCase) {
		r := newOutlierRig(t, pc, 10, WithSuccessRateEjection(SuccessRateEjection{}))
		require.True(t, r.run(200), "every peer reaches the volume")
		want := r.expected(100, 5, 1.9)
		require.Contains(t, want, "p0")
		assert.Zero(t, statsOf(t, r.p).OutlierEjections, "before the interval's end")
		r.endInterval(10*time.Second + 1)
		assert.Equal(t, uint64(len(want)), statsOf(t, r.p).OutlierEjections)
	})
}

// TestStats_blinded: the pickers that watch their servers' reports, alone
// and behind a Subset, one peer replying every 200 ms without a usable
// report. Derivation (TestSight_replyThreshold's rule): blind at the k-th
// reply, k = max(8, ⌈1 s / 200 ms⌉ + 1) = 8; so 7 replies leave the
// count at 0 and the 8th makes it 1, and more replies do not count again.
func TestStats_blinded(t *testing.T) {
	for _, w := range reportWatchers {
		for _, sub := range []bool{false, true} {
			name := w.name
			if sub {
				name = "Subset/" + name
			}
			t.Run(name, func(t *testing.T) {
				clk := newFakeClock()
				opts := append([]Option{clk.opt()}, w.opts...)
				peers := []*Peer{NewPeer("a")}
				var b Balancer
				if sub {
					inner := newWatcher(t, w.name, nil, opts...)
					s, err := NewSubset(inner, peers, everyBackend{})
					require.NoError(t, err)
					b = s
				} else {
					b = newWatcher(t, w.name, peers, opts...)
				}
				for i := 1; i <= 12; i++ {
					require.NoError(t, b.Done(mustPick(t, b, nil), Outcome{Load: &w.unusable}))
					want := uint64(0)
					if i >= 8 {
						want = 1
					}
					require.Equal(t, want, statsOf(t, b).Blinded, "reply %d", i)
					clk.add(200 * time.Millisecond)
				}
			})
		}
	}
}

// TestPeerStats_oneSnapshot: Snapshot is Stats plus the weights kept under
// the lock, and agrees with the deprecated State and InFlight. One peer
// of weight 3 under SmoothWRR with another of weight 1: nginx's smooth
// step from current weights 0, 0 adds the effective weights (3, 1) and
// picks the heavier, which gives back the total: current 3 − 4 = −1.
func TestPeerStats_oneSnapshot(t *testing.T) {
	a, b := NewPeer("a", Weight(3)), NewPeer("b")
	s, err := NewSmoothWRR([]*Peer{a, b}, newFakeClock().opt())
	require.NoError(t, err)
	require.Same(t, a, mustPick(t, s, nil))
	snap := a.Snapshot()
	assert.Equal(t, 3, snap.Weight)
	assert.Equal(t, 3, snap.EffectiveWeight)
	assert.Equal(t, -1, snap.CurrentWeight)
	assert.Equal(t, 1, snap.InFlight)
	assert.Equal(t, uint64(1), snap.Attempts)
	st := a.Stats()
	assert.Zero(t, st.EffectiveWeight, "Stats leaves the locked weights")
	assert.Zero(t, st.CurrentWeight)
	assert.Equal(t, snap.Weight, st.Weight)
	old := a.State()
	assert.Equal(t, old.CurrentWeight, snap.CurrentWeight)
	assert.Equal(t, old.EffectiveWeight, snap.EffectiveWeight)
	assert.Equal(t, a.InFlight(), snap.InFlight)
	assert.Zero(t, testing.AllocsPerRun(100, func() { _ = a.Snapshot() }), "Snapshot allocates")
}

// BenchmarkStats reads the counters of a RoundRobin over 100 peers with
// every guard set, alone and behind a Subset, and of Prequal (which adds
// its probe counters): a scrape's cost, not the pick's.
func BenchmarkStats(b *testing.B) {
	opts := func() []Option {
		return []Option{WithPanicThreshold(50), WithMaxEjectionPercent(50), WithSuccessRateEjection(SuccessRateEjection{})}
	}
	rr, err := NewRoundRobin(makePeers(100, numbered, nil), opts()...)
	require.NoError(b, err)
	inner, err := NewRoundRobin(nil, opts()...)
	require.NoError(b, err)
	sub, err := NewSubset(inner, makePeers(100, numbered, nil), everyBackend{})
	require.NoError(b, err)
	pq, err := NewPrequal(makePeers(100, numbered, nil))
	require.NoError(b, err)
	for _, c := range []struct {
		name string
		s    Stats
	}{{"RoundRobin", rr}, {"Subset", sub}, {"Prequal", pq}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_ = c.s.Stats()
			}
		})
	}
}
