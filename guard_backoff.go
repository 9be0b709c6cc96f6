package balancer

import (
	"fmt"
	"math"
	"time"
)

// Ejection backoff: Envoy's outlier-detection ejection time applied to
// nginx's fail window. Envoy (source/common/upstream/outlier_detection_impl.cc)
// keeps per host a multiplier: an ejection increments it while multiplier ×
// base_ejection_time < max_ejection_time + base_ejection_time (so it stops
// one step past the cap, and decays from there in bounded time), the host
// is out for min(base × multiplier, max), and each interval timer that finds
// the host not ejected decrements it by one.
//
// Here the base is the peer's fail_timeout (nginx's window) and an
// ejection is what EventPeerOut reports: max_fails failures taking the peer
// out, or a failed probe (and, with WithSuccessRateEjection, an outlier
// ejection), but for the failures of picks in panic inside the window (see
// below). There is no timer. The healthy interval is one fail_timeout:
// each whole fail_timeout from the end of the peer's last window (the
// instant it became eligible again, Envoy's uneject) to its next ejection
// takes one off the multiplier, computed at that ejection (lazily, under
// the lock that ejection holds already). fail_timeout is the period nginx
// itself measures health over (max_fails failures within it take a peer
// out), nginx's default equals Envoy's default interval (10 s), and tying
// the decay to the base keeps the rule free of a second knob: a peer out
// for k·fail_timeout is forgiven one step per fail_timeout it then stays in.
// The time after a window passes without a probe (no traffic) counts as
// healthy, as Envoy's un-ejected host with no traffic decrements. Under
// WithPanicThreshold a pick in panic counts as a probe for readmission,
// but its failure is an ejection only once the window of the peer's last
// ejection has ended: a peer that keeps failing in panic is ejected again
// once per window (10, 20, 30 s... with fail_timeout 10 s), as Envoy's
// ejections go on in panic, a host already ejected not ejected again;
// not once per failed request, which would take every peer of a pool
// under load to the cap within a second of a total outage.
//
// The multiplier and the window's end live on the Peer beside fails and
// checked: they are nginx-model state that the shared window test
// (inFailWindow, claimProbe, probeLocked) reads for every picker, as the
// guard is every picker's; no algorithm's per-peer state is involved.

// backoffSetting is WithEjectionBackoff's.
type backoffSetting struct {
	max time.Duration
	set bool
}

// WithEjectionBackoff makes a peer that is taken out again soon after its
// last ejection stay out longer, as Envoy's outlier detection does: its
// fail window is fail_timeout × the number of its recent ejections, at
// most max (and never shorter than fail_timeout). Each fail_timeout the
// peer then spends eligible without an ejection takes one off that number.
// An ejection is what EventPeerOut reports: max_fails failures, or a failed
// probe; under WithPanicThreshold, the failures of picks in panic count
// once per window (a peer out is not ejected again until its window has
// ended, as Envoy's is not). Every picker accepts it; max must be positive. Default: off, every
// window is fail_timeout, as nginx's.
func WithEjectionBackoff(max time.Duration) Option {
	return ownOption("WithEjectionBackoff", func(s *backoffSetting) { *s = backoffSetting{max, true} })
}

// check returns the error for a bad WithEjectionBackoff value, naming the
// picker and the value.
func (b backoffSetting) check(picker string) error {
	if b.set && b.max <= 0 {
		return fmt.Errorf("balancer: %s: WithEjectionBackoff(%v): not positive: %w", picker, b.max, ErrInvalidConfig)
	}
	return nil
}

// mulSat returns a × b for a, b ≥ 0, saturating at math.MaxInt64: an
// ejection count times a fail_timeout of years must not wrap into the past.
func mulSat(a, b int64) int64 {
	if a != 0 && b > math.MaxInt64/a {
		return math.MaxInt64
	}
	return a * b
}

// addSat returns a + b for a, b ≥ 0, saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// initGuards applies the backoff's and the success rate's options of cfg
// to s, refusing a bad value. Called by init.
func (s *peerSet) initGuards(cfg *config) error {
	var b backoffSetting
	applyOwn(cfg, &b)
	if err := b.check(s.picker); err != nil {
		return err
	}
	s.backoffMax = int64(b.max)
	var o outlierSetting
	applyOwn(cfg, &o)
	if err := o.check(s.picker); err != nil {
		return err
	}
	s.outlier = newOutlierGuard(o, s.now())
	return nil
}

// window returns p's fail window, in nanoseconds: fail_timeout, or, under
// WithEjectionBackoff for a peer out for its failures (max_fails reached),
// fail_timeout × its ejection count, at most the cap and never below
// fail_timeout. Below max_fails the window in which failures count stays
// nginx's fail_timeout: the backoff lengthens ejections only. Lock-free;
// one atomic load more than nginx's test for a peer not ejected twice in a
// row.
func (p *Peer) window() int64 {
	if n := p.ejections.Load(); n > 1 && p.maxFails.Load() != 0 && p.fails.Load() >= p.maxFails.Load() {
		return p.backedOff(n)
	}
	return p.failTimeout.Load()
}

// backedOff is window for a count n > 1, capped by the picker that holds
// p last (0, no cap, without the option: fail_timeout).
func (p *Peer) backedOff(n int64) int64 {
	ft := p.failTimeout.Load()
	var limit int64
	if s := p.held.Load(); s != nil {
		limit = s.backoffMax
	}
	return max(ft, min(mulSat(ft, n), limit))
}

// backoffLocked keeps p's ejection count after a report that left p out
// for its failures: a report that took it out (before was not out) is an
// ejection; any failure while out moves the window's end, from which the
// next ejection counts the decay. A failure of a pick in panic before
// that end is not an ejection (the peer was out all along, and Envoy
// ejects a host once per ejection, not per failed request) and leaves the
// end where it is, so that a peer failing on in panic is ejected again
// once per window, as Envoy's is once its ejection time has passed.
// Requires s.mu and the option on.
func (s *peerSet) backoffLocked(p *Peer, before failMark) {
	after, limit := p.markLocked(), p.maxFails.Load()
	if !after.outFor(limit) {
		return
	}
	if before.fails >= limit && !before.outFor(limit) && after.checked <= p.outUntil {
		return // picked in panic (Peer.panicked) inside its last ejection's window
	}
	if !before.outFor(limit) {
		s.ejectedLocked(p, after.checked)
	}
	p.outUntil = addSat(after.checked, p.window())
}

// ejectedLocked counts an ejection of p at now: first the decay, one per
// whole fail_timeout since its last window ended, then Envoy's increment,
// made while count × fail_timeout < cap + fail_timeout, which bounds the
// count by cap/fail_timeout + 1. Requires s.mu.
func (s *peerSet) ejectedLocked(p *Peer, now int64) {
	ft, n := p.failTimeout.Load(), p.ejections.Load()
	if n > 0 && ft > 0 && now > p.outUntil {
		n = max(0, n-(now-p.outUntil)/ft)
	}
	if ft > 0 && mulSat(n, ft) < addSat(s.backoffMax, ft) {
		n++
	}
	p.ejections.Store(n)
}
