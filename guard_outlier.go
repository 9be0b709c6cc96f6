package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"time"
)

// Success-rate ejection: Envoy's outlier detection by success rate
// (source/common/upstream/outlier_detection_impl.cc,
// successRateEjectionThreshold) as gRFC A50 specifies it for gRPC, over
// nginx's out state.
//
// Every report adds to its peer's counts, one atomic add of a word that
// packs the interval's attempts (high 32 bits) and successes (low 32
// bits): no lock, no allocation. The interval's end is checked with the
// picker's clock by every failure and one success in 16 of each peer (see
// countOutcome): the first interval starts when the picker is made, each
// evaluation starts the next, and the first check past an interval's last
// instant (inclusive, as nginx's fail window is) evaluates it (no timer,
// no goroutine): one report wins the end by
// compare-and-swap and, under the picker's lock, swaps every peer's
// counts to zero, takes those with at least RequestVolume attempts, and,
// when at least MinimumHosts qualify, ejects each whose success rate is
// below mean − StdevFactor × stdev (the population standard deviation,
// as Envoy and A50 compute it), with probability EnforcementPercent.
// Reports alone drive it: without reports nothing is counted, so a pick
// has nothing to evaluate, and an ejected peer comes back through nginx's
// window (its probe), not through the evaluation.
//
// An ejection is nginx's out state: max_fails failures on record and the
// window starting now, so the peer is probed after fail_timeout (or the
// backed-off window under WithEjectionBackoff, whose count the ejection
// raises, as Envoy's ejections share one multiplier); a probe's success
// readmits it, a failure takes it out again. Peers that cannot be out in
// nginx's model are never ejected: down, max_fails 0 (failure accounting
// off), nginx's single server; nor is a peer already out. Being nginx's
// out state, an ejection is what WithPanicThreshold ignores in panic, and
// WithMaxEjectionPercent caps it as it caps failures (Envoy's ejectHost
// checks the cap for every kind of ejection): an outlier the cap keeps in
// reports EventEjectionCapped.

// SuccessRateEjection configures WithSuccessRateEjection. A zero field
// takes its default, which is gRFC A50's (Envoy's for the same fields).
type SuccessRateEjection struct {
	// Interval is how often success rates are compared. Default 10s.
	Interval time.Duration
	// StdevFactor: a peer is an outlier when its success rate is below
	// mean − StdevFactor × stdev. Default 1.9 (Envoy's 1900 / 1000).
	StdevFactor float64
	// EnforcementPercent is the chance, in percent, that an outlier is
	// ejected. Default 100.
	EnforcementPercent float64
	// MinimumHosts is how many peers must have RequestVolume attempts in
	// the interval for any to be ejected. Default 5.
	MinimumHosts int
	// RequestVolume is the attempts a peer needs in the interval to count
	// (reports of attempts abandoned are not attempts here). Default 100.
	RequestVolume int
	// Rand is the source the enforcement draws from, used under the
	// picker's lock. Default: the runtime's generator.
	Rand rand.Source
}

// The largest RequestVolume: the attempts a peer's counter holds in one
// interval before it ends the interval early (see countOutcome).
const maxRequestVolume = 1 << 31

// WithSuccessRateEjection takes out, every interval, the peers whose
// success rate is an outlier among those with enough attempts, as Envoy's
// and gRFC A50's success-rate ejection does: below mean − StdevFactor ×
// stdev of the rates. An ejected peer is out as nginx's failures take it
// out (probed after fail_timeout, or WithEjectionBackoff's window), and
// EventPeerOutlier reports it. Counting costs each Done one atomic add,
// and a clock read for failures and one success in 16; the interval's end
// is seen by the first failure after it or within 16 successes on any
// one peer. Every picker accepts it; a negative, NaN or infinite field, a
// percent above 100 or a RequestVolume above 2^31 is refused with
// ErrInvalidConfig naming it. Default: off.
func WithSuccessRateEjection(c SuccessRateEjection) Option {
	return ownOption("WithSuccessRateEjection", func(s *outlierSetting) { *s = outlierSetting{c, true} })
}

// outlierSetting is WithSuccessRateEjection's.
type outlierSetting struct {
	c   SuccessRateEjection
	set bool
}

// check fills in the defaults and returns the error for a bad field,
// naming the picker, the field and its value.
func (o *outlierSetting) check(picker string) error {
	c := &o.c
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("balancer: %s: WithSuccessRateEjection: %s %v: %s: %w", picker, field, v, why, ErrInvalidConfig)
	}
	switch {
	case c.Interval < 0:
		return bad("Interval", c.Interval, "negative")
	case !(c.StdevFactor >= 0) || math.IsInf(c.StdevFactor, 0):
		return bad("StdevFactor", c.StdevFactor, "want a finite factor ≥ 0")
	case !(c.EnforcementPercent >= 0 && c.EnforcementPercent <= 100):
		return bad("EnforcementPercent", c.EnforcementPercent, "want a percent in [0, 100]")
	case c.MinimumHosts < 0:
		return bad("MinimumHosts", c.MinimumHosts, "negative")
	case c.RequestVolume < 0 || int64(c.RequestVolume) > maxRequestVolume: // int64: 2^31 overflows a 32-bit int
		return bad("RequestVolume", c.RequestVolume, fmt.Sprintf("want [0, %d]", int64(maxRequestVolume)))
	}
	c.Interval = orDefault(c.Interval, 10*time.Second)
	c.StdevFactor = orDefault(c.StdevFactor, 1.9)
	c.EnforcementPercent = orDefault(c.EnforcementPercent, 100)
	c.MinimumHosts = orDefault(c.MinimumHosts, 5)
	c.RequestVolume = orDefault(c.RequestVolume, 100)
	return nil
}

// orDefault returns v, or def for the zero value.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// outlierGuard is a peer set's success-rate ejection; nil without the
// option.
type outlierGuard struct {
	c SuccessRateEjection // defaults filled in; immutable

	// end is the current interval's last instant (unix ns), inclusive as
	// nginx's fail window is: the first report past it evaluates the
	// interval, after winning end by
	// compare-and-swap.
	end atomic.Int64

	// Guarded by the peer set's mu.
	rnd   randSource // Rand, or the runtime's
	peers []*Peer    // scratch: the peers with the volume, this evaluation
	rates []float64  // scratch: their success rates

	ejected atomic.Uint64 // ejections made, for Stats and metrics
}

// The counts word: attempts in the high 32 bits, successes in the low.
const (
	outcomeAttempt = 1 << 32
	outcomeLow     = 1<<32 - 1
)

// newOutlierGuard returns the guard for o, starting its first interval at
// now, or nil if o is not set.
func newOutlierGuard(o outlierSetting, now int64) *outlierGuard {
	if !o.set {
		return nil
	}
	g := &outlierGuard{c: o.c}
	if o.c.Rand != nil {
		g.rnd = randSource{rnd: rand.New(o.c.Rand)}
	}
	g.end.Store(addSat(now, int64(o.c.Interval)))
	return g
}

// outlierClockEvery: a success reads the clock when its peer's count of
// the interval reaches a multiple of it. A clock read costs 30 ns on the
// machine the benchmarks ran on, ten times the atomic add; one in 16
// successes reads it, every failure does.
const outlierClockEvery = 16

// countOutcome adds a report on p to its counts, lock-free: one atomic
// add, and a clock read for a failure and for one success in
// outlierClockEvery of each peer. A report that reads the clock past the
// interval's end evaluates the interval: a failure first (it belongs to the
// next interval), a success after its add (it is counted in the interval
// it ends). So the end is seen by the first failure after it, or within
// outlierClockEvery successes on any one peer. A peer whose attempts reach
// 2^31 in one interval ends it early, so the 32-bit halves never carry.
func (s *peerSet) countOutcome(p *Peer, failed bool) {
	g := s.outlier
	d := uint64(outcomeAttempt + 1)
	if failed {
		d = outcomeAttempt
		if now := s.now(); now > g.end.Load() {
			s.evaluateOutliers(g, now, false)
		}
	}
	v := p.outcomes.Add(d) >> 32
	switch {
	case v >= maxRequestVolume:
		s.evaluateOutliers(g, s.now(), true)
	case !failed && v%outlierClockEvery == 0:
		if now := s.now(); now > g.end.Load() {
			s.evaluateOutliers(g, now, false)
		}
	}
}

// evaluateOutliers ends the interval at now, if this call wins its end
// (force: whatever the end), and ejects the outliers under s.mu.
func (s *peerSet) evaluateOutliers(g *outlierGuard, now int64, force bool) {
	end := g.end.Load()
	if (now <= end && !force) || !g.end.CompareAndSwap(end, addSat(now, int64(g.c.Interval))) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outliersLocked(g, now)
}

// outliersLocked takes every peer's counts of the interval and ejects the
// outliers: Envoy's successRateEjectionThreshold over the peers not down,
// not out, with RequestVolume attempts, when at least MinimumHosts have
// them. An ejection republishes the list, as SetDown does, so that every
// picker's derived state (a precomputed cycle, a list of failing peers)
// sees it. Requires s.mu.
func (s *peerSet) outliersLocked(g *outlierGuard, now int64) {
	l := s.load()
	g.peers, g.rates = g.peers[:0], g.rates[:0]
	var sum float64
	for _, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			v := p.outcomes.Swap(0)
			att := v >> 32
			if att < uint64(g.c.RequestVolume) || p.down.Load() || p.inFailWindow(now) {
				continue
			}
			r := float64(v&outcomeLow) / float64(att)
			g.peers, g.rates = append(g.peers, p), append(g.rates, r)
			sum += r
		}
	}
	n := len(g.rates)
	if n == 0 || n < g.c.MinimumHosts {
		return
	}
	mean := sum / float64(n)
	var v2 float64
	for _, r := range g.rates {
		v2 += (r - mean) * (r - mean)
	}
	threshold := mean - g.c.StdevFactor*math.Sqrt(v2/float64(n))
	ejected := false
	for i, p := range g.peers {
		if g.rates[i] >= threshold || l.single || p.maxFails.Load() == 0 {
			continue
		}
		// rand.Float64's construction: the top 53 bits as a fraction.
		if g.c.EnforcementPercent < 100 && float64(g.rnd.uint64()>>11)*0x1p-53*100 >= g.c.EnforcementPercent {
			continue
		}
		if cg := s.guard; cg != nil && cg.capOn && !cg.mayEject(s, now) {
			cg.capped.Add(1)
			if s.events != nil {
				s.events(Event{Kind: EventEjectionCapped, Peer: p, Time: time.Unix(0, now)})
			}
			continue
		}
		s.ejectOutlierLocked(g, p, now)
		s.guard.invalidate() // the next ejection's cap counts this one
		ejected = true
	}
	if ejected {
		s.publishLocked(append(slices.Clip(l.primary), l.backup...))
	}
}

// ejectOutlierLocked takes p out at now in nginx's way: max_fails failures
// on record and both times now, so that its window starts now; with
// WithEjectionBackoff the ejection counts. Requires s.mu.
func (s *peerSet) ejectOutlierLocked(g *outlierGuard, p *Peer, now int64) {
	p.fails.Store(max(p.fails.Load(), p.maxFails.Load()))
	p.accessed.Store(now)
	p.checked.Store(now)
	if s.backoffMax != 0 {
		s.ejectedLocked(p, now)
		p.outUntil = addSat(now, p.window())
	}
	g.ejected.Add(1)
	if s.events != nil {
		s.events(Event{Kind: EventPeerOutlier, Peer: p, Time: time.Unix(0, now)})
	}
}

// OutlierEjectionCount returns how many peers WithSuccessRateEjection has
// taken out since the picker was made, one per EventPeerOutlier; 0
// without the option. Lock-free.
//
// Deprecated: use Stats().OutlierEjections.
func (s *peerSet) OutlierEjectionCount() uint64 {
	if s.outlier == nil {
		return 0
	}
	return s.outlier.ejected.Load()
}
