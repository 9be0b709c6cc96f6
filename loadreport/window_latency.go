package loadreport

import (
	"sync/atomic"
	"time"
)

// latencyWindow sums request durations over the same buckets as a
// rateWindow of the same width, lock-free; with that window's counts it
// gives the mean duration of the requests completed in the window.
//
// Why a windowed mean and not an EWMA: it covers exactly the requests
// rps_fractional counts, so the two agree (rif ≈ rps × latency, Little's
// law, on a steady server), it forgets a request after one window
// whatever the request rate (a per-request EWMA forgets in a number of
// requests, seconds on an idle server and microseconds on a busy one),
// and it needs one atomic add-or-reset per request, as the rates do.
//
// Each bucket is one word: the bucket's index (elapsed / width, its low
// 24 bits) in the high bits, the sum of its durations in microseconds in
// the low 40 (2^40 µs is 12.7 days of request time in one bucket: with
// the default 1 s buckets, a million requests in flight on average),
// saturating there.
type latencyWindow struct {
	width   time.Duration
	buckets [windowBuckets]atomic.Uint64
}

const (
	latSumBits = 40
	latSumMax  = 1<<latSumBits - 1
	latIdxMask = 1<<(64-latSumBits) - 1
)

// add adds a request of duration d that completed at elapsed time e.
func (w *latencyWindow) add(e, d time.Duration) {
	us := uint64(0)
	if d > 0 {
		us = uint64((d + time.Microsecond/2) / time.Microsecond)
	}
	w.addUnits(e, us)
}

// addUnits adds us units (microseconds, for durations) at elapsed time e;
// the latency by RIF level also sums its requests' RIFs in one.
func (w *latencyWindow) addUnits(e time.Duration, us uint64) {
	idx := uint64(e/w.width) & latIdxMask
	b := &w.buckets[uint64(e/w.width)%windowBuckets]
	for {
		old := b.Load()
		sum := uint64(0)
		if old>>latSumBits == idx {
			sum = old & latSumMax
		}
		sum = min(sum+us, latSumMax)
		if b.CompareAndSwap(old, idx<<latSumBits|sum) {
			return
		}
	}
}

// sum returns the durations of the current bucket at elapsed time e and
// the windowBuckets-1 before it, the buckets rateWindow.rate counts.
func (w *latencyWindow) sum(e time.Duration) time.Duration {
	return time.Duration(w.units(e)) * time.Microsecond
}

// units is sum in the units addUnits added.
func (w *latencyWindow) units(e time.Duration) uint64 {
	if e < 0 {
		e = 0
	}
	cur := e / w.width
	var us uint64
	for i := range time.Duration(windowBuckets) {
		j := cur - i
		if j < 0 {
			break
		}
		v := w.buckets[j%windowBuckets].Load()
		if v>>latSumBits == uint64(j)&latIdxMask {
			us += v & latSumMax
		}
	}
	return us
}
