package balancer

// nginx's eligibility test and the per-peer steps around a pick, in one
// place and under one set of names. RR.c is ngx_http_upstream_round_robin.c
// of nginx 1.22.1, and every RR.c line number in this package is that of
// release-1.22.1:
//
//   - eligible: may the peer take an attempt now (down, fail window,
//     max_conns; RR.c 550-563). A request's tried set is checked by the
//     caller, which knows the peer's index in its list.
//   - acquire: count an attempt in flight, respecting max_conns.
//   - take: eligible and acquire as one lock-free step, claiming the probe
//     of a peer whose fail window has passed (RR.c 591-593).
//   - probeLocked: RR.c 591-593 under the picker's lock.
//   - failLocked, succeedLocked: the report's accounting (RR.c 629-660).
//   - release: end an attempt in flight.
//
// Hot scans (the smooth scans, RoundRobin's and RandomWeighted's first
// draw) write the test out inline where a call would not inline; each such
// place says so.

// lazyClock reads a picker's clock at most once per pick, and only if a
// peer with failures on record needs it: most picks never read it. A
// locked picker that has read the time already sets t and ok.
type lazyClock struct {
	now func() int64
	t   int64
	ok  bool

	// asked and inPanic hold the guards' answer for this pick, once a
	// peer out has asked it (Peer.panics, guard_panic.go).
	asked, inPanic bool
}

func (c *lazyClock) get() int64 {
	if !c.ok {
		c.t, c.ok = c.now(), true
	}
	return c.t
}

// clockAt returns a clock that has read now.
func clockAt(now int64) lazyClock { return lazyClock{t: now, ok: true} }

// inFailWindow reports whether the peer is inside its fail window at now:
// it has max_fails failures and the last failure or probe was at most
// fail_timeout ago (RR.c 554-556; the window is longer under
// WithEjectionBackoff, see window). Like nginx we compare with <=, so a peer
// that failed at t with fail_timeout 10s stays out through t+10s; nginx
// reads whole seconds, this reads the injected clock at full resolution.
func (p *Peer) inFailWindow(now int64) bool {
	return p.maxFails.Load() != 0 && p.fails.Load() >= p.maxFails.Load() &&
		now-p.checked.Load() <= p.window()
}

// full reports whether the peer is at its max_conns limit.
func (p *Peer) full() bool {
	return p.maxConns.Load() != 0 && p.inFlight() >= p.maxConns.Load()
}

// eligible reports whether the peer may take an attempt now, not counting
// a request's tried set: nginx's test, RR.c 550-563, or, inside its fail
// window, its picker in panic (guard_panic.go). The clock is read only for
// a peer with failures on record.
func (p *Peer) eligible(clk *lazyClock) bool {
	return !p.down.Load() && !p.full() && (p.fails.Load() == 0 || !p.inFailWindow(clk.get()) || p.panics(clk))
}

// clean reports whether p is not down and has no failures on record and no
// max_conns: eligible now without reading the clock (no fail window
// without a failure) and never full, so a pick counts it in flight with
// one atomic add (pick), no compare-and-swap. The lock-free fast paths take
// a peer only while it is clean, and the cycles open only while every
// primary not down is.
func (p *Peer) clean() bool {
	return p.fails.Load() == 0 && !p.down.Load() && p.maxConns.Load() == 0
}

// acquire counts an attempt on p in flight unless p is at max_conns, by
// compare-and-swap when p has a limit, so that concurrent picks never push
// it past the limit.
func (p *Peer) acquire() bool {
	limit := p.maxConns.Load()
	if limit == 0 {
		p.slots.Add(pickUnit)
		return true
	}
	for {
		c := p.slots.Load()
		if c&connMask >= limit {
			return false
		}
		if p.slots.CompareAndSwap(c, c+pickUnit) {
			return true
		}
	}
}

// The slots word: a pick adds pickUnit, one attempt in flight and one
// picked, in one atomic add (a second counter would be a second locked
// instruction on every pick); a report subtracts 1. The in-flight count
// has connBits bits, far more attempts than one peer can hold at once;
// the picks above it wrap at 2^(64-connBits), about 1.1·10^12.
const (
	connBits = 24
	connMask = 1<<connBits - 1
	pickUnit = 1<<connBits | 1
)

// inFlight returns the attempts picked on p and not yet reported.
func (p *Peer) inFlight() int64 { return p.slots.Load() & connMask }

// picked returns the attempts ever picked on p, modulo 2^40.
func (p *Peer) picked() uint64 { return uint64(p.slots.Load()) >> connBits }

// pick counts an attempt on p, picked and in flight, where no max_conns
// can refuse it (a locked picker that has checked full, or a peer with no
// limit), and returns the attempts now in flight.
func (p *Peer) pick() int64 { return p.slots.Add(pickUnit) & connMask }

// unpick undoes an acquire that did not become an attempt (take's probe
// claim lost): neither in flight nor picked. It never takes the in-flight
// count below 0, even if a stray duplicate Done consumed this attempt in
// between (a borrow would corrupt the picks above it).
func (p *Peer) unpick() {
	for {
		c := p.slots.Load()
		d := int64(pickUnit)
		if c&connMask == 0 {
			d = 1 << connBits
		}
		if p.slots.CompareAndSwap(c, c-d) {
			return
		}
	}
}

// take checks that p is eligible and, if so, counts an attempt on it in
// flight, lock-free: eligible followed by nginx's step on the chosen peer
// (RR.c 591-593). The slot is acquired first; then, for a peer with failures
// on record, claimProbe both excludes a peer inside its fail window and,
// past the window, lets exactly one concurrent pick have the probe. Claiming
// the probe last means a probe is never used up on a peer that was full.
func (p *Peer) take(clk *lazyClock) bool {
	if p.down.Load() || !p.acquire() {
		return false
	}
	if p.fails.Load() != 0 && !p.claimProbe(clk.get()) && !p.panicTake(clk) {
		p.unpick()
		return false
	}
	return true
}

// probeLocked starts a new fail_timeout window when a peer whose window has
// passed is selected: this selection is the probe, and if it fails too the
// peer is out for another fail_timeout (RR.c 591-593). Requires the owner's
// lock.
func (p *Peer) probeLocked(now int64) {
	if now-p.checked.Load() > p.window() {
		p.checked.Store(now)
		p.probed(now)
	} else if p.fails.Load() != 0 {
		p.panicked(now) // chosen inside its window: a pick in panic
	}
}

// claimProbe is probeLocked for lock-free pickers. When the peer's window
// has passed and it is eligible only as a probe, concurrent pickers race for
// the probe by compare-and-swap and the losers report false and look
// elsewhere.
func (p *Peer) claimProbe(now int64) bool {
	for {
		c := p.checked.Load()
		if now-c <= p.window() {
			// Inside the window: a probe is claimed only past it, so this
			// peer is eligible only because it is below max_fails.
			return !p.inFailWindow(now)
		}
		if p.checked.CompareAndSwap(c, now) {
			p.probed(now)
			return true
		}
	}
}

// failLocked applies a failed attempt (RR.c 629-651): fails++, both times set
// to now, and effective_weight lowered by weight/max_fails in integer
// division (weight: the smooth step's, Peer.smooth), clamped at 0.
// Requires the owner's lock.
func (p *Peer) failLocked(now int64) {
	p.fails.Add(1)
	p.accessed.Store(now)
	p.checked.Store(now)
	if p.maxFails.Load() != 0 {
		p.setEffectiveLocked(max(0, p.effectiveWeight-p.smooth/p.maxFails.Load()))
	}
}

// succeedLocked applies a successful attempt (RR.c 657-659): the failure
// count is cleared only when the peer has been checked since its last
// failure, that is, when this success answers a probe. Requires the owner's
// lock.
func (p *Peer) succeedLocked() {
	if p.accessed.Load() < p.checked.Load() {
		if p.outForFails() {
			p.readmittedLocked() // slow start, if on (guard_slowstart.go)
		}
		p.fails.Store(0)
	}
}

// needsLockOnSuccess reports whether a success on p can change more than the
// in-flight count, so that a lock-free Done can skip the lock.
func (p *Peer) needsLockOnSuccess() bool { return p.fails.Load() != 0 }

// release ends one in-flight attempt and reports whether there was one.
func (p *Peer) release() bool {
	for {
		c := p.slots.Load()
		if c&connMask == 0 {
			return false
		}
		if p.slots.CompareAndSwap(c, c-1) {
			return true
		}
	}
}
