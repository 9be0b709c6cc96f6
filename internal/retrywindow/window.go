// Package retrywindow is the retry budget's implementation, which package
// retrybudget and the root package's deprecated RetryBudget share: neither
// can import the other's (retrybudget imports the root package).
package retrywindow

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Finagle's RetryBudget defaults, which Linkerd uses too.
const (
	DefaultRatio        = 0.2
	DefaultMinPerSecond = 10
	DefaultWindow       = 10 * time.Second
)

// The bounds Check accepts.
const (
	MinWindow       = time.Second // Finagle's bounds on its ttl
	MaxWindow       = time.Minute
	MaxRatio        = 1000 // Finagle's percentCanRetry bound, as a ratio
	MaxMinPerSecond = 1e6
)

// Stats counts what a Window has done since it was made.
type Stats struct {
	Deposits uint64 // requests counted (Deposit)
	Retries  uint64 // retries allowed and not given back (TryWithdraw true, less Refund)
	Refused  uint64 // retries refused (TryWithdraw false)
}

// Window is Finagle's window budget (see package retrybudget's Budget for
// the contract). Its zero value refuses every retry; Init makes it a
// budget. It is never copied once used.
type Window struct {
	now   func() time.Time
	start time.Time
	width time.Duration // of a bucket: window / Buckets

	// The budget's time is now - start + skew; latest is the newest
	// bucket index it has reached. A clock that steps back more than a
	// bucket behind latest raises skew so that time goes on from latest
	// (see Index).
	skew, latest atomic.Int64

	// reserve is minPerSecond × window; ratio as given.
	reserve, ratio float64

	// deposits counts requests per bucket.
	deposits ring
	// head is the current bucket's retries, packed as deposits' words;
	// every withdrawal is a compare-and-swap on it, so no two can both
	// take the last token. A withdrawal in a later bucket first moves
	// head's count into past (see withdraw).
	head atomic.Uint64
	past [Buckets]atomic.Uint64

	// Counters, for Stats.
	nDeposits, nRetries, nRefused atomic.Uint64
}

// Buckets is how many buckets (tenths) a window is cut into.
const Buckets = 10

// Check reports a ratio outside [0, MaxRatio], a minPerSecond outside [0,
// MaxMinPerSecond], NaN, or a window outside [MinWindow, MaxWindow], in an
// error naming the value (the caller names itself and wraps its sentinel).
func Check(ratio, minPerSecond float64, window time.Duration) error {
	switch {
	case !(ratio >= 0 && ratio <= MaxRatio):
		return fmt.Errorf("ratio %v out of range [0, %v]", ratio, float64(MaxRatio))
	case !(minPerSecond >= 0 && minPerSecond <= MaxMinPerSecond):
		return fmt.Errorf("minPerSecond %v out of range [0, %v]", minPerSecond, float64(MaxMinPerSecond))
	case window < MinWindow || window > MaxWindow:
		return fmt.Errorf("window %v out of range [%v, %v]", window, MinWindow, MaxWindow)
	}
	return nil
}

// Init makes the zero w a budget of ratio, minPerSecond and window, which
// Check accepted, on the clock now.
func (w *Window) Init(ratio, minPerSecond float64, window time.Duration, now func() time.Time) {
	w.now = now
	w.start = now()
	w.width = window / Buckets
	w.reserve = minPerSecond * window.Seconds()
	w.ratio = ratio
}

// Deposit counts one request.
func (w *Window) Deposit() {
	w.nDeposits.Add(1)
	if w.now == nil {
		return // the zero value
	}
	addAt(&w.deposits, w.Index())
}

// TryWithdraw takes one retry, reporting whether the window allows it.
func (w *Window) TryWithdraw() bool {
	if w.withdraw(w.Index()) {
		w.nRetries.Add(1)
		return true
	}
	w.nRefused.Add(1)
	return false
}

// Refund gives back one retry TryWithdraw allowed: it takes one retry
// off the newest bucket that holds one (head, else the window's newest
// recorded bucket), which is the withdrawal's own bucket unless another
// retry was withdrawn in a later bucket since. The window's count thus
// never goes below the retries actually kept, nor wraps, and a refund
// with no retry left to give back changes nothing; when a later bucket
// took it, the count is exact until the withdrawal's bucket leaves the
// window, then one short until the later bucket does. Stats' Retries
// goes down by one, never below zero.
func (w *Window) Refund() {
	if w.now == nil {
		return // the zero value allows no retry to give back
	}
	w.unwithdraw()
	for {
		n := w.nRetries.Load()
		if n == 0 || w.nRetries.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// unwithdraw takes one retry off head, or off the newest bucket of the
// window recorded in past, and reports whether it found one. A head
// whose count a withdrawal in a later bucket has recorded in past already
// (see withdraw) has its record taken down too: a record never exceeds
// head's count of its bucket, so both stay in step, and a record made
// later copies the lowered count. A saturated count (countMask) stays
// so. A recorder descheduled with an older, larger count may still write
// it back: the refund is then lost, which only refuses more.
func (w *Window) unwithdraw() bool {
	for {
		h := w.head.Load()
		tag, n := h>>idxShift, h&countMask
		if n == 0 || n == countMask {
			break
		}
		if w.head.CompareAndSwap(h, h-1) {
			p := &w.past[tag%Buckets]
			for {
				v := p.Load()
				if v>>idxShift != tag || v&countMask == 0 || p.CompareAndSwap(v, v-1) {
					return true
				}
			}
		}
	}
	cur := w.Index()
	for i := uint64(0); i < Buckets && i <= cur; i++ {
		p := &w.past[(cur-i)%Buckets]
		for {
			v := p.Load()
			if v>>idxShift != cur-i || v&countMask == 0 || v&countMask == countMask {
				break
			}
			if p.CompareAndSwap(v, v-1) {
				return true
			}
		}
	}
	return false
}

// Stats returns the counters, each read atomically.
func (w *Window) Stats() Stats {
	return Stats{Deposits: w.nDeposits.Load(), Retries: w.nRetries.Load(), Refused: w.nRefused.Load()}
}

// Index is the current bucket's index: the budget's time, now - start +
// skew, in bucket widths, never below latest. A clock one bucket behind
// latest (a step back within a bucket, or a reader that read the clock
// just before another's later read) counts in latest; one further behind
// that a second clock read confirms (a reader descheduled after its first
// read is not a step) has stepped back, and skew grows by the step, so
// that the buckets go on
// from latest instead of freezing at it until the clock catches up (an
// hour back would otherwise pile an hour's deposits into one bucket). The
// index stays below 2^37 (MaxInt64 ns over the narrowest bucket, 100 ms),
// the room a packed word has (idxShift).
func (w *Window) Index() uint64 {
	if w.now == nil {
		return 0 // the zero value
	}
	e := int64(w.now().Sub(w.start))
	wd := int64(w.width)
	for reread := false; ; {
		skew, latest := w.skew.Load(), w.latest.Load()
		v := satAdd(e, skew)
		i := v / wd
		if v < 0 {
			i = (v - wd + 1) / wd // floor
		}
		switch {
		case i == latest || i == latest-1:
			return uint64(latest)
		case i > latest:
			if w.latest.CompareAndSwap(latest, i) {
				return uint64(i)
			}
		case !reread:
			// A reader that was descheduled between its clock read and
			// here has a stale time, not a clock that stepped back: a
			// second read tells them apart.
			e, reread = int64(w.now().Sub(w.start)), true
		default: // stepped back: time goes on from latest's start
			w.skew.CompareAndSwap(skew, satAdd(skew, satSub(latest*wd, v)))
		}
	}
}

// satSub is a - b, saturated to the int64 range.
func satSub(a, b int64) int64 {
	s := a - b
	switch {
	case b < 0 && s < a:
		return math.MaxInt64
	case b > 0 && s > a:
		return math.MinInt64
	}
	return s
}

// satAdd is a + b, saturated to the int64 range.
func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case a > 0 && b > 0 && s < 0:
		return math.MaxInt64
	case a < 0 && b < 0 && s >= 0:
		return math.MinInt64
	}
	return s
}

// withdraw takes one retry in bucket idx if the window allows it. head
// holds the newest bucket's retries; a withdrawal in a later bucket first
// records head's count in past (keeping the larger of two records of one
// bucket, since a slow writer may record an older count), then moves head
// to its bucket, so a retry is counted in exactly one place at any time.
func (w *Window) withdraw(idx uint64) bool {
	if w.now == nil {
		return false // the zero value
	}
	for {
		h := w.head.Load()
		tag, n := h>>idxShift, h&countMask
		if idx > tag && n > 0 {
			w.record(tag, n)
		}
		if idx <= tag { // the same bucket, or a reader behind another
			idx = tag
		} else {
			n = 0
		}
		if n == countMask {
			return false
		}
		if made := w.pastRetries(idx) + n; float64(made+1) > w.allowed(idx) {
			return false
		}
		if w.head.CompareAndSwap(h, idx<<idxShift|(n+1)) {
			return true
		}
	}
}

// record keeps n retries as bucket tag's in past, unless its word holds a
// later bucket already (a withdrawer that loaded head a window ago and
// was descheduled must not erase the newer count) or a larger count of
// the same bucket.
func (w *Window) record(tag, n uint64) {
	p := &w.past[tag%Buckets]
	for {
		old := p.Load()
		if t := old >> idxShift; t > tag || t == tag && old&countMask >= n {
			return
		}
		if p.CompareAndSwap(old, tag<<idxShift|n) {
			return
		}
	}
}

// pastRetries sums the retries of the Buckets-1 buckets before bucket
// cur.
func (w *Window) pastRetries(cur uint64) uint64 {
	var n uint64
	for i := uint64(1); i < Buckets && i <= cur; i++ {
		v := w.past[(cur-i)%Buckets].Load()
		if v>>idxShift == cur-i {
			n += v & countMask
		}
	}
	return n
}

// allowed is how many retries the window ending in bucket cur allows:
// the reserve plus ratio times its deposits. The small slack keeps a
// product such as 0.1 × 30 from rounding below the whole number it is.
func (w *Window) allowed(cur uint64) float64 {
	return w.reserve + w.ratio*float64(sumAt(&w.deposits, cur)) + 1e-9
}

// A packed word holds a bucket's index above idxShift and its count
// below: 37 bits of index hold every index Index gives (below 2^37), so
// a tag never wraps; 27 bits of count (134,217,727) hold the largest
// reserve, MaxMinPerSecond × MaxWindow = 6e7. A count that reaches
// countMask stays there (refusing retries, ignoring deposits and
// refunds).
const (
	idxShift  = 27
	countMask = 1<<idxShift - 1
)

// ring is a window's counts, one packed word a bucket, so that a bucket
// reused for a later index resets and counts in one compare-and-swap and
// a reader never mixes an old count with a new index.
type ring = [Buckets]atomic.Uint64

// addAt counts one in bucket idx of r. A word already holding a later
// bucket (a reader behind another) takes the count.
func addAt(r *ring, idx uint64) {
	p := &r[idx%Buckets]
	for {
		old := p.Load()
		next := idx<<idxShift | 1
		if old>>idxShift >= idx {
			if old&countMask == countMask {
				return // saturated
			}
			next = old + 1
		}
		if p.CompareAndSwap(old, next) {
			return
		}
	}
}

// sumAt sums the counts of bucket cur and the Buckets-1 before it.
func sumAt(r *ring, cur uint64) uint64 {
	var n uint64
	for i := uint64(0); i < Buckets && i <= cur; i++ {
		v := r[(cur-i)%Buckets].Load()
		if v>>idxShift == cur-i {
			n += v & countMask
		}
	}
	return n
}
