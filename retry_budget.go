package balancer

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// ErrRetryBudget is matched (errors.Is) by the error of a request whose
// retry the RetryBudget refused; the same error matches the last
// attempt's error too.
var ErrRetryBudget = errors.New("balancer: retry refused by the retry budget")

// Finagle's RetryBudget defaults, which Linkerd uses too: retries may add
// 20% to the requests, plus 10 retries a second, counted over 10 s.
const (
	DefaultRetryRatio        = 0.2
	DefaultRetryMinPerSecond = 10
	DefaultRetryWindow       = 10 * time.Second
)

// The bounds NewRetryBudget accepts.
const (
	MinRetryWindow       = time.Second // Finagle's bounds on its ttl
	MaxRetryWindow       = time.Minute
	MaxRetryRatio        = 1000 // Finagle's percentCanRetry bound, as a ratio
	MaxRetryMinPerSecond = 1e6
)

// RetryBudget bounds the retries of one client's requests, as Finagle's
// RetryBudget does: each request deposits one token (Deposit), each retry
// withdraws one (TryWithdraw), and a retry is allowed while the retries
// made in the last window, this one included, are at most ratio times the
// requests begun in it plus minPerSecond × window. A brownout at rate
// requests a second then costs a client at most 1 + ratio + minPerSecond /
// rate attempts a request once it lasts longer than the window, where
// retrying every failure on the next peer would cost up to one attempt per
// peer. Entries leave the window in tenths of it: one counts for between
// 0.9 and 1 window. A clock that steps back by more than a tenth moves the
// budget's time on from the newest tenth it has seen, so the window keeps
// sliding; a smaller step counts in the newest tenth.
//
// Give one RetryBudget to every Do, Transport or Proxy of one client
// (RetryBudget.Do, Transport.RetryBudget, Proxy.RetryBudget). gRPC
// throttles its own retries, which grpcbalancer leaves to it, with the
// service config's retryThrottling: a token bucket per channel refilled
// by successes only, with no window. A RetryBudget is safe for concurrent use; its methods take
// no lock and allocate nothing. The zero value refuses every retry; use
// NewRetryBudget.
type RetryBudget struct {
	now   func() time.Time
	start time.Time
	width time.Duration // of a bucket: window / budgetBuckets

	// The budget's time is now - start + skew; latest is the newest
	// bucket index it has reached. A clock that steps back more than a
	// bucket behind latest raises skew so that time goes on from latest
	// (see index).
	skew, latest atomic.Int64

	// reserve is minPerSecond × window; ratio as given.
	reserve, ratio float64

	// deposits counts requests per bucket; refunds, the retries given
	// back by PickRetry, by the bucket they were withdrawn in.
	deposits, refunds ring
	// head is the current bucket's retries, packed as deposits' words;
	// every withdrawal is a compare-and-swap on it, so no two can both
	// take the last token. A withdrawal in a later bucket first moves
	// head's count into past (see withdraw).
	head atomic.Uint64
	past [budgetBuckets]atomic.Uint64

	// Counters, for Stats.
	nDeposits, nRetries, nRefused atomic.Uint64
}

// budgetBuckets is how many buckets a window is cut into.
const budgetBuckets = 10

// RetryBudgetStats counts what a RetryBudget has done since it was made.
type RetryBudgetStats struct {
	Deposits uint64 // requests counted (Deposit)
	Retries  uint64 // retries allowed and made (TryWithdraw true less Refund, PickRetry a peer)
	Refused  uint64 // retries refused (TryWithdraw false)
}

// NewRetryBudget returns a budget allowing, over any window, ratio retries
// per request plus minPerSecond × window; Finagle's defaults are
// DefaultRetryRatio, DefaultRetryMinPerSecond and DefaultRetryWindow. It
// accepts WithClock. A ratio outside [0, MaxRetryRatio], a minPerSecond
// outside [0, MaxRetryMinPerSecond], NaN, or a window outside
// [MinRetryWindow, MaxRetryWindow] is ErrInvalidConfig, naming the value.
// Both ratio and minPerSecond 0 give a budget that refuses every retry.
func NewRetryBudget(ratio, minPerSecond float64, window time.Duration, opts ...Option) (*RetryBudget, error) {
	cfg, err := applyOptions("NewRetryBudget", func(name string) bool { return name == "WithClock" }, opts)
	if err != nil {
		return nil, err
	}
	switch {
	case !(ratio >= 0 && ratio <= MaxRetryRatio):
		return nil, fmt.Errorf("balancer: NewRetryBudget: ratio %v out of range [0, %v]: %w", ratio, float64(MaxRetryRatio), ErrInvalidConfig)
	case !(minPerSecond >= 0 && minPerSecond <= MaxRetryMinPerSecond):
		return nil, fmt.Errorf("balancer: NewRetryBudget: minPerSecond %v out of range [0, %v]: %w", minPerSecond, float64(MaxRetryMinPerSecond), ErrInvalidConfig)
	case window < MinRetryWindow || window > MaxRetryWindow:
		return nil, fmt.Errorf("balancer: NewRetryBudget: window %v out of range [%v, %v]: %w", window, MinRetryWindow, MaxRetryWindow, ErrInvalidConfig)
	}
	return &RetryBudget{
		now:     cfg.now,
		start:   cfg.now(),
		width:   window / budgetBuckets,
		reserve: minPerSecond * window.Seconds(),
		ratio:   ratio,
	}, nil
}

// Deposit counts one request.
func (b *RetryBudget) Deposit() {
	b.nDeposits.Add(1)
	if b.now == nil {
		return // the zero value
	}
	addAt(&b.deposits, b.index())
}

// TryWithdraw takes one retry from the budget, reporting whether it was
// allowed. A caller that may then find no peer to retry on uses
// PickRetry, which gives the retry back.
func (b *RetryBudget) TryWithdraw() bool {
	if _, ok := b.withdraw(b.index()); ok {
		b.nRetries.Add(1)
		return true
	}
	b.nRefused.Add(1)
	return false
}

// Refund gives back one retry that TryWithdraw allowed and that was not
// made (its pick found no peer), as PickRetry gives back its own. It
// counts in the window's current tenth, not the one the retry was taken
// in: a retry given back in a later tenth frees its place a little
// longer than the retry held it, never more than a window. The counts of
// the window never go below zero.
func (b *RetryBudget) Refund() {
	if b.now == nil {
		return // the zero value
	}
	addAt(&b.refunds, b.index())
	for {
		n := b.nRetries.Load()
		if n == 0 || b.nRetries.CompareAndSwap(n, n-1) {
			return
		}
	}
}

// PickRetry picks the peer of a retry of r from p if the budget allows the
// retry, and returns ErrRetryBudget if it does not. A retry that finds no
// peer (Pick's error, returned as is) is given back to the budget. A
// request that has made as many attempts as Pick allows it gets
// ErrTriesExhausted, as Pick would give, and takes nothing from the budget
// nor counts as refused. Otherwise the budget is asked before Pick, so a
// refused retry leaves p as it was (a Pick then Abandoned would still move
// a round-robin's weights): a refusal when Pick would have found every
// remaining peer down or full (ErrNoLivePeer) is ErrRetryBudget, counted
// as refused.
func (b *RetryBudget) PickRetry(p Picker, r *Request) (*Peer, error) {
	if r != nil && r.attempts > 0 && r.attempts >= r.limit {
		return nil, ErrTriesExhausted // Pick's answer, without a pick
	}
	idx, ok := b.withdraw(b.index())
	if !ok {
		b.nRefused.Add(1)
		return nil, ErrRetryBudget
	}
	peer, err := p.Pick(r)
	if err != nil {
		addAt(&b.refunds, idx)
		return nil, err
	}
	b.nRetries.Add(1)
	return peer, nil
}

// Stats returns the budget's counters.
func (b *RetryBudget) Stats() RetryBudgetStats {
	return RetryBudgetStats{Deposits: b.nDeposits.Load(), Retries: b.nRetries.Load(), Refused: b.nRefused.Load()}
}

// index is the current bucket's index: the budget's time, now - start +
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
func (b *RetryBudget) index() uint64 {
	if b.now == nil {
		return 0 // the zero value
	}
	e := int64(b.now().Sub(b.start))
	w := int64(b.width)
	for reread := false; ; {
		skew, latest := b.skew.Load(), b.latest.Load()
		v := satAdd(e, skew)
		i := v / w
		if v < 0 {
			i = (v - w + 1) / w // floor
		}
		switch {
		case i == latest || i == latest-1:
			return uint64(latest)
		case i > latest:
			if b.latest.CompareAndSwap(latest, i) {
				return uint64(i)
			}
		case !reread:
			// A reader that was descheduled between its clock read and
			// here has a stale time, not a clock that stepped back: a
			// second read tells them apart.
			e, reread = int64(b.now().Sub(b.start)), true
		default: // stepped back: time goes on from latest's start
			b.skew.CompareAndSwap(skew, satAdd(skew, satSub(latest*w, v)))
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

// withdraw takes one retry in bucket idx if the window allows it, and
// returns the bucket it was counted in. head holds the newest bucket's
// retries; a withdrawal in a later bucket first records head's count in
// past (keeping the larger of two records of one bucket, since a slow
// writer may record an older count), then moves head to its bucket, so
// a retry is counted in exactly one place at any time.
func (b *RetryBudget) withdraw(idx uint64) (uint64, bool) {
	if b.now == nil {
		return 0, false // the zero value
	}
	for {
		h := b.head.Load()
		tag, n := h>>idxShift, h&countMask
		if idx > tag && n > 0 {
			b.record(tag, n)
		}
		if idx <= tag { // the same bucket, or a reader behind another
			idx = tag
		} else {
			n = 0
		}
		if n == countMask {
			return idx, false
		}
		made := b.pastRetries(idx) + n
		made -= min(made, sumAt(&b.refunds, idx))
		if float64(made+1) > b.allowed(idx) {
			return idx, false
		}
		if b.head.CompareAndSwap(h, idx<<idxShift|(n+1)) {
			return idx, true
		}
	}
}

// record keeps n retries as bucket tag's in past, unless its word holds a
// later bucket already (a withdrawer that loaded head a window ago and
// was descheduled must not erase the newer count) or a larger count of
// the same bucket.
func (b *RetryBudget) record(tag, n uint64) {
	w := &b.past[tag%budgetBuckets]
	for {
		old := w.Load()
		if t := old >> idxShift; t > tag || t == tag && old&countMask >= n {
			return
		}
		if w.CompareAndSwap(old, tag<<idxShift|n) {
			return
		}
	}
}

// pastRetries sums the retries of the budgetBuckets-1 buckets before
// bucket cur.
func (b *RetryBudget) pastRetries(cur uint64) uint64 {
	var n uint64
	for i := uint64(1); i < budgetBuckets && i <= cur; i++ {
		v := b.past[(cur-i)%budgetBuckets].Load()
		if v>>idxShift == cur-i {
			n += v & countMask
		}
	}
	return n
}

// allowed is how many retries the window ending in bucket cur allows:
// the reserve plus ratio times its deposits. The small slack keeps a
// product such as 0.1 × 30 from rounding below the whole number it is.
func (b *RetryBudget) allowed(cur uint64) float64 {
	return b.reserve + b.ratio*float64(sumAt(&b.deposits, cur)) + 1e-9
}

// A packed word holds a bucket's index above idxShift and its count
// below: 37 bits of index hold every index index gives (below 2^37), so
// a tag never wraps; 27 bits of count (134,217,727) hold the largest
// reserve, MaxRetryMinPerSecond × MaxRetryWindow = 6e7. A count that
// reaches countMask stays there (refusing retries, ignoring deposits).
const (
	idxShift  = 27
	countMask = 1<<idxShift - 1
)

// ring is a window's counts, one packed word a bucket, so that a bucket
// reused for a later index resets and counts in one compare-and-swap and
// a reader never mixes an old count with a new index.
type ring = [budgetBuckets]atomic.Uint64

// addAt counts one in bucket idx of r. A word already holding a later
// bucket (a reader behind another) takes the count.
func addAt(r *ring, idx uint64) {
	w := &r[idx%budgetBuckets]
	for {
		old := w.Load()
		next := idx<<idxShift | 1
		if old>>idxShift >= idx {
			if old&countMask == countMask {
				return // saturated
			}
			next = old + 1
		}
		if w.CompareAndSwap(old, next) {
			return
		}
	}
}

// sumAt sums the counts of bucket cur and the budgetBuckets-1 before it.
func sumAt(r *ring, cur uint64) uint64 {
	var n uint64
	for i := uint64(0); i < budgetBuckets && i <= cur; i++ {
		v := r[(cur-i)%budgetBuckets].Load()
		if v>>idxShift == cur-i {
			n += v & countMask
		}
	}
	return n
}

// WithRetryBudget makes Do take each retry from b, as b.Do does. Only Do
// accepts it; WithRetryBudget(nil) is refused.
//
// Deprecated: use b.Do (RetryBudget.Do) in place of Do. As an Option, a
// budget could be handed to a picker's constructor, which refuses it only
// at run time; as the receiver of Do it cannot.
func WithRetryBudget(b *RetryBudget) Option {
	return option{"WithRetryBudget", func(c *config) { c.budget = b; c.set |= optBudget }}
}
