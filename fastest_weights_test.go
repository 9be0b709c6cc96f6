package balancer

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FastestFirst's cost under the latencies real servers give: however the
// estimates move, the work a report causes under the lock (the peers a
// recompute or a table rebuild visits) stays O(1) amortized, and a fresh
// picker's warm-up, where every peer's first report is news, costs O(n) in
// all. The work is counted, not timed: f.work, on a fake clock.
//
// The bound: ffWorkPerReport peers a report, plus ffWorkPerPeer a peer for
// the warm-up and the construction. A recompute of all n peers on a
// fraction q of the reports costs q·n a report, past the bound at 1,000
// peers and more for the q these distributions give, and a recompute at
// each peer's first report n² in the warm-up.
const (
	ffWorkPerReport = 8
	ffWorkPerPeer   = 8
)

func TestFastestFirst_costAmortized(t *testing.T) {
	dists := []struct {
		name string
		lat  []time.Duration
	}{
		{"lognormal", benchLognormal(4096, 1)},
		{"bimodal", []time.Duration{100 * time.Microsecond, 20 * time.Millisecond}},
		{"zero", []time.Duration{0}},
		{"constant", []time.Duration{time.Millisecond}},
	}
	sizes := []int{100, 1000, 4000}
	if underRace {
		// One goroutine on a fake clock, the work counted: the race
		// detector has nothing to watch, and it made the 1,000 and 4,000
		// peer runs 36 s of the root package's -race run (0.4 s plain).
		// The plain run keeps every size.
		sizes = sizes[:1]
	}
	for _, d := range dists {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/peers=%d", d.name, n), func(t *testing.T) {
				clk := newFakeClock()
				f := newTestFF(t, clk, benchPeers(n))
				// The warm-up: the first 20,000 picks of a fresh picker,
				// construction included.
				const warm = 20000
				for i := range warm {
					p := mustPick(t, f, nil)
					clk.add(10 * time.Microsecond)
					require.NoError(t, f.Done(p, Outcome{Latency: d.lat[i%len(d.lat)]}))
				}
				assert.LessOrEqual(t, f.work, uint64(ffWorkPerReport*warm+ffWorkPerPeer*n),
					"work over the first %d picks, %d peers", warm, n)
				// The steady state: 20,000 reports more.
				start := f.work
				const steady = 20000
				for i := range steady {
					p := mustPick(t, f, nil)
					clk.add(10 * time.Microsecond)
					require.NoError(t, f.Done(p, Outcome{Latency: d.lat[(warm+i)%len(d.lat)]}))
				}
				assert.LessOrEqual(t, f.work-start, uint64(ffWorkPerReport*steady),
					"work over %d reports in the steady state, %d peers", steady, n)
			})
		}
	}
}

// TestFastestFirst_allocsUnderRealLatencies: Pick+Done allocates nothing
// whatever the latencies, in the exact mode and the sampled one, single
// reweighs and deferred recomputes included.
func TestFastestFirst_allocsUnderRealLatencies(t *testing.T) {
	lat := benchLognormal(4096, 1)
	for _, n := range []int{10, 1000} {
		for _, d := range [][]time.Duration{lat, {100 * time.Microsecond, 20 * time.Millisecond}, {0}} {
			f, err := NewFastestFirst(benchPeers(n))
			require.NoError(t, err)
			i := 0
			var failed error
			allocs := testing.AllocsPerRun(5000, func() {
				p, err := f.Pick(nil)
				if err == nil {
					err = f.Done(p, Outcome{Latency: d[i%len(d)]})
				}
				if err != nil {
					failed = err
				}
				i++
			})
			require.NoError(t, failed)
			assert.Zero(t, allocs, "%d peers", n)
		}
	}
}

// How FastestFirst combines configured and derived weights, as its doc
// states: with equal latencies, weights 5:3:1 derive 100:60:20 (the
// configured weight times the latency factor, 1 for all, scaled to 100 for
// the largest), and a pick takes the least (in flight + 1)/derived weight.
// One request at a time, every pick sees nothing in flight, so all go to
// the peer of the largest weight: 1/100 < 1/60 < 1/20. Held in flight
// together, 90 attempts split as the weights: the least-delay rule fills
// until c_i/w_i is level, 50/100 = 30/60 = 10/20.
func TestFastestFirst_weightsCombine(t *testing.T) {
	newPeers := func() []*Peer {
		return []*Peer{NewPeer("a", Weight(5), MaxFails(2)), NewPeer("b", Weight(3), MaxFails(2)), NewPeer("c", Weight(1), MaxFails(2))}
	}
	t.Run("sequential", func(t *testing.T) {
		clk := newFakeClock()
		peers := newPeers()
		f := newTestFF(t, clk, peers)
		got := map[string]int{}
		for range 90 {
			p := mustPick(t, f, nil)
			got[p.Addr()]++
			clk.add(time.Millisecond)
			require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
		}
		assert.Equal(t, map[string]int{"a": 90}, got)
		for i, want := range []int{100, 60, 20} {
			assert.Equal(t, want, peers[i].State().DerivedWeight, "derived weight of %s", peers[i])
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		clk := newFakeClock()
		peers := newPeers()
		f := newTestFF(t, clk, peers)
		ffMeasureAll(t, f, clk, peers)
		got := map[string]int{}
		for range 90 {
			got[mustPick(t, f, nil).Addr()]++
		}
		assert.Equal(t, map[string]int{"a": 50, "b": 30, "c": 10}, got)
	})
	t.Run("state", func(t *testing.T) {
		// EffectiveWeight is nginx's: the configured weight, lowered by
		// weight/max_fails = 5/2 = 2 at a failure, back by one a pick.
		clk := newFakeClock()
		peers := newPeers()
		f := newTestFF(t, clk, peers)
		ffMeasureAll(t, f, clk, peers)
		a := peers[0]
		assert.Equal(t, 5, a.State().EffectiveWeight)
		require.Equal(t, a, mustPick(t, f, nil))
		require.NoError(t, f.Done(a, Outcome{Failed: true}))
		st := a.State()
		assert.Equal(t, 3, st.EffectiveWeight, "5 − 5/2 after one failure")
		assert.Less(t, st.DerivedWeight, 100, "the penalty latency lowers the derived weight")
		p := mustPick(t, f, nil)
		assert.Equal(t, 4, a.State().EffectiveWeight, "one step back at the next pick")
		require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
	})
}

// ffMeasureAll holds 9 attempts in flight, which reaches every peer of
// weights 5:3:1, and reports them all as 1 ms: equal latencies.
func ffMeasureAll(t *testing.T, f *FastestFirst, clk *fakeClock, peers []*Peer) {
	t.Helper()
	var out []*Peer
	for range 9 {
		out = append(out, mustPick(t, f, nil))
	}
	for _, p := range peers {
		require.Contains(t, out, p)
	}
	clk.add(time.Millisecond)
	for _, p := range out {
		require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
	}
}
