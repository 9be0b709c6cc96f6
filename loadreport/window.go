package loadreport

import (
	"sync/atomic"
	"time"
)

// windowBuckets is how many buckets a window is cut into.
const windowBuckets = 10

// rateWindow counts events over a sliding window of windowBuckets
// buckets, lock-free. Each bucket is one atomic word: the bucket's index
// (elapsed / width, its low 32 bits) in the high half, its count in the
// low half, so a bucket reused for a later index resets and counts in
// one compare-and-swap, and a reader never mixes an old count with a new
// index.
type rateWindow struct {
	width   time.Duration // bucket width: window / windowBuckets
	buckets [windowBuckets]atomic.Uint64
}

// add counts one event at elapsed time e (since the middleware began).
func (w *rateWindow) add(e time.Duration) {
	idx := uint64(uint32(e / w.width))
	b := &w.buckets[idx%windowBuckets]
	for {
		old := b.Load()
		next := idx<<32 | 1
		if old>>32 == idx {
			if uint32(old) == ^uint32(0) {
				return // saturated: 4e9 events in one bucket
			}
			next = old + 1
		}
		if b.CompareAndSwap(old, next) {
			return
		}
	}
}

// rate is events per second at elapsed time e: count(e) over span(e).
func (w *rateWindow) rate(e time.Duration) float64 { return w.perSecond(w.count(e), e) }

// perSecond is n events over the time the window's buckets at elapsed
// time e span: the full buckets plus the elapsed part of the current one,
// at least one bucket's width, at most e itself once e exceeds one width.
func (w *rateWindow) perSecond(n uint64, e time.Duration) float64 {
	if e < 0 {
		e = 0
	}
	cur := e / w.width
	span := (windowBuckets-1)*w.width + (e - cur*w.width)
	span = min(span, e)
	span = max(span, w.width)
	return float64(n) / span.Seconds()
}

// count is the events of the current bucket at elapsed time e and the
// windowBuckets-1 before it.
func (w *rateWindow) count(e time.Duration) uint64 {
	if e < 0 {
		e = 0
	}
	cur := e / w.width
	var n uint64
	for i := range time.Duration(windowBuckets) {
		j := cur - i
		if j < 0 {
			break
		}
		v := w.buckets[j%windowBuckets].Load()
		if v>>32 == uint64(uint32(j)) {
			n += v & 0xffffffff
		}
	}
	return n
}
