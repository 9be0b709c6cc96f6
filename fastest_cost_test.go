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
	for _, d := range dists {
		for _, n := range []int{100, 1000, 4000} {
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
