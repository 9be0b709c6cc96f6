package sim

import (
	"math"
	"math/bits"
	"time"

	"github.com/lbgo/balancer"
)

// rifLevels is how many RIF levels a backend's probe latency keeps, as
// package loadreport's Tracker keeps them: level 0 is RIF 0, level k ≥ 1
// is RIF 2^(k−1) to 2^k − 1, and RIFs from balancer.MaxProbeInFlight up
// share the last.
const rifLevels = 22

// levelOf returns the level of a job that reached the server with rif
// others in flight.
func levelOf(rif int64) int {
	if rif <= 0 {
		return 0
	}
	return bits.Len64(uint64(min(rif, balancer.MaxProbeInFlight)))
}

// latencyByLevel is what a simulated backend answers a probe's latency
// with, the rule of loadreport's Tracker.Probe over its default probe
// window of 1 s (ten buckets of 100 ms, the report window's): each job
// that ends enters the level of the RIF it found on arriving (itself not
// counted) with its count, its duration on the server and that RIF. The
// estimate at RIF r is the mean duration of r's level; if it is empty,
// that of the highest lower level that is not, times (r + 1) over (its
// mean RIF + 1); if every lower level is empty, the report window's mean
// latency (backendState.latency). The Tracker rounds each duration to
// the microsecond and this does not: the two agree within that
// (TestProbeLatencyMirrorsTracker).
type latencyByLevel struct {
	levels [rifLevels]struct{ n, dur, rif window }
}

// add enters a job that found rif others in flight, lasted d ns and
// ended at t.
func (l *latencyByLevel) add(t, rif, d int64) {
	lv := &l.levels[levelOf(rif)]
	lv.n.add(t, 1)
	lv.dur.add(t, d)
	lv.rif.add(t, max(0, min(rif, balancer.MaxProbeInFlight)))
}

// estimate returns the estimate at RIF r at now in ns, and false when
// every level up to r's is empty.
func (l *latencyByLevel) estimate(now, r int64) (time.Duration, bool) {
	r = max(0, min(r, balancer.MaxProbeInFlight))
	top := levelOf(r)
	for k := top; k >= 0; k-- {
		lv := &l.levels[k]
		n := lv.n.total(now)
		if n == 0 {
			continue
		}
		mean := float64(lv.dur.total(now)) / float64(n)
		if k < top {
			mean *= (float64(r) + 1) / (float64(lv.rif.total(now))/float64(n) + 1)
		}
		if !(mean < float64(balancer.MaxProbeLatency)) {
			return balancer.MaxProbeLatency, true
		}
		return time.Duration(math.Round(mean)), true
	}
	return 0, false
}
