package loadreport

import (
	"math"
	"math/bits"
	"time"

	"github.com/lbgo/balancer"
)

// rifLevels is how many RIF levels latencyByLevel keeps: level 0 is RIF
// 0, level k ≥ 1 is RIF 2^(k-1) to 2^k − 1, and RIFs from 2^20
// (balancer.MaxProbeInFlight) up share level 21.
const rifLevels = 22

// levelOf is the level of a request that began with rif others in
// flight: bits.Len of rif, clamped to [0, MaxProbeInFlight].
func levelOf(rif int64) int {
	if rif <= 0 {
		return 0
	}
	return bits.Len64(uint64(min(rif, balancer.MaxProbeInFlight)))
}

// latencyByLevel is the latency by RIF level a probe is answered with
// (Prequal keeps recent latencies by RIF and answers with the latency at
// the current one). Each request that completes is entered in the level
// of its RIF, the requests already in flight when it began (itself not
// counted): its count, its duration and its RIF, each a sliding window
// of windowBuckets buckets (the Tracker's rateWindow and latencyWindow
// layout, one atomic word a bucket, lock-free) over the probe window
// (WithProbeWindow, default 1 s).
//
// The estimate at RIF r, elapsed time e, is, with n_k, D_k and R_k the
// count, the summed duration and the summed RIF of level k's window at e:
//
//  1. L = levelOf(r). If n_L > 0: D_L / n_L, the mean of L's requests.
//  2. Else the highest level k < L with n_k > 0, scaled to r:
//     D_k / n_k × (r + 1) / (R_k / n_k + 1). A request that finds r
//     others waits for them on a server that serves one at a time, so its
//     latency grows as r + 1; on a server with c workers it grows more
//     slowly while r < c, so this overstates it there, the safe side
//     for a picker (a loaded server looks no better than it is).
//  3. Else (every recent request began at a higher RIF, or none
//     completed) the Tracker's latency_ms: the mean of every request in
//     its window (WithWindow, default 10 s), 0 if none.
//
// The result is capped at balancer.MaxProbeLatency.
//
// Why these choices. Levels of doubling width: a server's RIF runs from
// 0 to thousands, and latency grows about linearly in it, so a level a
// factor of 2 wide keeps the estimate within 2× of the latency at r in
// the worst case, and 22 levels cover every RIF a probe may carry, in
// 22 × 3 × 10 words (5 KiB) with no allocation; levels of RIF 0, 1 and
// 2–3 keep the lightly loaded servers, the ones a picker chooses among,
// apart. Windowed means, not EWMAs: a mean forgets a request after the
// window whatever the request rate (an EWMA per request forgets in a
// number of requests, seconds on an idle server and microseconds on a
// busy one; an EWMA on the clock needs its value and its time in one
// atomic word), and each takes one atomic add-or-reset per request, as
// the Tracker's rates do. A window of 1 s, shorter than the report's
// 10 s: a probe answers for the next request, and servers whose speed
// moves within seconds need the estimate to move with them. The
// fallback from a lower level keeps the answer rising with the RIF when
// the load climbs faster than requests at the new level complete (they
// complete late exactly when the server slows down).
//
// A reader reads each level's sums before the count it divides them by,
// as latencyMs does: a request ending between the reads is at worst
// counted without its duration and RIF. (It reads the count once before
// as well, to pass over an empty level without reading its sums.)
type latencyByLevel struct {
	levels [rifLevels]struct {
		n   rateWindow    // requests completed
		dur latencyWindow // their durations, in µs
		rif latencyWindow // their RIFs at the start, summed
	}
}

func (l *latencyByLevel) setWidth(width time.Duration) {
	for i := range l.levels {
		lv := &l.levels[i]
		lv.n.width, lv.dur.width, lv.rif.width = width, width, width
	}
}

// add enters a request that began with rif others in flight, lasted d
// and completed at elapsed time e.
func (l *latencyByLevel) add(e time.Duration, rif int64, d time.Duration) {
	lv := &l.levels[levelOf(rif)]
	lv.n.add(e)
	lv.dur.add(e, d)
	lv.rif.addUnits(e, uint64(max(0, min(rif, balancer.MaxProbeInFlight))))
}

// estimate is the estimate at RIF r and elapsed time e, steps 1 and 2 of
// the type's doc; ok is false where step 3 applies.
func (l *latencyByLevel) estimate(e time.Duration, r int64) (d time.Duration, ok bool) {
	r = max(0, min(r, balancer.MaxProbeInFlight))
	top := levelOf(r)
	for k := top; k >= 0; k-- {
		lv := &l.levels[k]
		if lv.n.count(e) == 0 { // an empty level costs its counts alone
			continue
		}
		us, rifs := lv.dur.units(e), lv.rif.units(e) // before the count
		n := lv.n.count(e)
		if n == 0 { // its requests left the window between the reads
			continue
		}
		mean := float64(us) * float64(time.Microsecond) / float64(n)
		if k < top {
			mean *= (float64(r) + 1) / (float64(rifs)/float64(n) + 1)
		}
		return capLatency(mean), true
	}
	return 0, false
}

// capLatency converts ns to a Duration no larger than MaxProbeLatency.
func capLatency(ns float64) time.Duration {
	if !(ns < float64(balancer.MaxProbeLatency)) { // also NaN
		return balancer.MaxProbeLatency
	}
	return time.Duration(math.Round(ns))
}
