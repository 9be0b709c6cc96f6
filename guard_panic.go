package balancer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Panic mode and the ejection cap: Envoy's healthy_panic_threshold and
// outlier detection's max_ejection_percent over nginx's failure model.
//
// A peer is out for its failures while it is inside its fail window
// (inFailWindow: max_fails failures, the last failure or probe at most
// fail_timeout ago), whether or not a probe of it is in flight. Out peers
// are counted only off the healthy path. A pick that meets a peer inside
// its fail window (one with failures on record, whose window the clock has
// not passed) asks its peer set's guard, through Peer.panics; a pick that
// meets only clean peers reads nothing of it. The guard keeps the last
// count it made (guardView), valid for an epoch and up to a time:
//
//   - the epoch is bumped after every change that can take a peer into or
//     out of its fail window other than the clock: a failure that takes
//     one out (peerSet.failLocked), a success that readmits one
//     (succeedLocked), a probe claimed (Peer.probed, lock-free), and every
//     list change (publishLocked: Add, Remove, Update, SetDown, SetWeight);
//     a failure of a peer already out only moves its window's end, later;
//   - the time is the earliest end of the windows it counted, so a window
//     that ends on the clock, with no report, is seen by the first pick
//     after its end, which counts again.
//
// A count is O(n) and lock-free (atomic loads of the peers of the current
// list); it runs once per epoch and window end, by whichever pick or
// report needs it first (picks racing there may each count), and a count
// made concurrently with a change is tagged with the epoch read before it
// and so never outlives the change. No lock and no allocation but the
// count's own 64-byte view.

// WithPanicThreshold makes the picker ignore failures when fewer than
// percent% of its peers not down are eligible, as Envoy's
// healthy_panic_threshold does (Envoy's default, when set, is 50): in
// panic a peer inside its fail window is picked as though it had no
// failures on record; down, max_conns and the request's tried set still
// hold. With backup peers, panic engages only when neither list could
// serve: the primaries below the threshold and the backups below it too
// (or none not down), so a pool whose primaries are out still moves to
// healthy backups as nginx does. A pick in panic of a peer inside its
// window makes its next report count as a probe's: a success readmits it,
// a failure restarts its window. Panic changes eligibility only: weights
// and latency estimates a failure lowered (nginx's effective weight, the
// latency pickers' failure penalty) recover as they would. Events:
// EventPanic and EventPanicOver, once per transition, found by the first
// pick meeting a peer out, report or Stats after it. percent is in
// [0, 100]; 0 never panics.
// Every picker accepts it. Default: no panic mode, nginx's behaviour.
func WithPanicThreshold(percent float64) Option {
	return option{"WithPanicThreshold", func(c *config) { c.guards.panicPct, c.guards.panicSet = percent, true }}
}

// WithMaxEjectionPercent caps the peers out for their failures at once, as
// Envoy's max_ejection_percent does: a failure that would take a peer out
// is allowed while 100·(out+1)/n ≤ percent, n the peers not down
// (primaries and backups together, as Envoy counts the whole cluster), so
// at most ⌊percent·n/100⌋ peers are out, and always at least one, as
// Envoy's documentation of the field promises. A failure the cap refuses
// is counted (Stats.Failures, the effective weight lowered) but leaves the
// peer one failure short of max_fails, eligible, and reports
// EventEjectionCapped; its next failure asks the cap again. A cap at or
// below 100 − WithPanicThreshold's percent keeps failures from bringing
// panic mode (probes in flight aside, which count as out). percent is in
// [0, 100]. Every picker accepts it. Default: no cap, nginx's behaviour.
func WithMaxEjectionPercent(percent float64) Option {
	return option{"WithMaxEjectionPercent", func(c *config) { c.guards.capPct, c.guards.capSet = percent, true }}
}

// guardOptions are the guards' options, which every picker accepts.
var guardOptions = []string{"WithPanicThreshold", "WithMaxEjectionPercent", "WithEjectionBackoff", "WithSuccessRateEjection"}

// guardConfig holds the guards' options as given.
type guardConfig struct {
	panicPct, capPct float64
	panicSet, capSet bool
}

// check refuses a percent out of [0, 100], NaN included, naming it.
func (g guardConfig) check(name string) error {
	for _, o := range [...]struct {
		option string
		set    bool
		v      float64
	}{{"WithPanicThreshold", g.panicSet, g.panicPct}, {"WithMaxEjectionPercent", g.capSet, g.capPct}} {
		if o.set && !(o.v >= 0 && o.v <= 100) {
			return fmt.Errorf("balancer: %s: %s(%v): want a percent in [0, 100]: %w", name, o.option, o.v, ErrInvalidConfig)
		}
	}
	return nil
}

// guard is a peer set's panic mode and ejection cap; nil without either
// option, which is how the default costs nothing.
type guard struct {
	panicPct float64 // 0: no panic mode
	capPct   float64
	capOn    bool

	epoch atomic.Uint64             // see the file's comment
	view  atomic.Pointer[guardView] // the last count; nil before the first

	// panicking is the state the last evaluation found; events fire on
	// its transitions, so once per engagement, not per pick.
	panicking atomic.Bool
	panics    atomic.Uint64 // engagements of panic mode
	capped    atomic.Uint64 // failures the cap kept from taking a peer out
}

// guardView is one count of a peer set's peers, [0] primaries, [1]
// backups. Immutable once stored.
type guardView struct {
	epoch uint64
	until int64 // the count holds through until: the earliest end of a window counted
	live  [2]int
	out   [2]int
	panic bool
}

// newGuard returns the guard cfg asks for, or nil.
func newGuard(cfg guardConfig) *guard {
	if !cfg.panicSet && !cfg.capSet {
		return nil
	}
	return &guard{panicPct: cfg.panicPct, capPct: cfg.capPct, capOn: cfg.capSet}
}

// viewAt returns a count of s's peers valid at now, counting afresh if
// the last one is stale.
func (g *guard) viewAt(s *peerSet, now int64) *guardView {
	e := g.epoch.Load()
	if v := g.view.Load(); v != nil && v.epoch == e && now <= v.until {
		return v
	}
	l := s.list.Load()
	v := &guardView{epoch: e, until: math.MaxInt64}
	for k, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			if p.down.Load() {
				continue
			}
			v.live[k]++
			if l.single || !p.inFailWindow(now) {
				continue // nginx's single server is never out for its failures
			}
			v.out[k]++
			end := p.checked.Load() + p.window()
			if end < p.checked.Load() {
				end = math.MaxInt64 // a window past the last instant
			}
			v.until = min(v.until, end)
		}
	}
	v.panic = g.panicPct > 0 && !v.serves(0, g.panicPct) && !v.serves(1, g.panicPct)
	g.view.Store(v)
	return v
}

// serves reports whether list k has peers not down and at least pct% of
// them eligible.
func (v *guardView) serves(k int, pct float64) bool {
	return v.live[k] > 0 && float64(v.live[k]-v.out[k])*100 >= pct*float64(v.live[k])
}

// panics reports whether s is in panic at now, reporting a change of
// state (EventPanic, EventPanicOver) to the hook.
func (s *peerSet) panics(now int64) bool {
	g := s.guard
	if g == nil || g.panicPct == 0 {
		return false
	}
	in := g.viewAt(s, now).panic
	if g.panicking.Load() != in && g.panicking.CompareAndSwap(!in, in) {
		kind := EventPanicOver
		if in {
			kind = EventPanic
			g.panics.Add(1)
		}
		if s.events != nil {
			s.events(Event{Kind: kind, Time: time.Unix(0, now)})
		}
	}
	return in
}

// panics reports whether the picker holding p is in panic, for a pick
// that met p inside its fail window. Off the healthy path only. The pick
// asks once: its clock keeps the answer for the other peers out it meets
// (a locked scan may meet thousands). Without the guards, one load of p's
// picker and a nil check, once a pick.
func (p *Peer) panics(clk *lazyClock) bool {
	if !clk.asked {
		clk.asked = true
		if s := p.owner.Load(); s != nil && s.guard != nil {
			clk.inPanic = s.panics(clk.get())
		}
	}
	return clk.inPanic
}

// panicTake is take's step for a peer inside its fail window: in panic it
// is taken, and marked so that its report counts as a probe's.
func (p *Peer) panicTake(clk *lazyClock) bool {
	if !p.panics(clk) {
		return false
	}
	p.panicked(clk.get())
	return true
}

// panicked marks p, picked in panic inside its fail window, as probed:
// its last failure time moves to 1 ns before its check time, so that a
// success clears its failures as a probe's would (succeedLocked) and its
// window stays where it was. Lock-free (a compare-and-swap that loses to a
// concurrent failure, which restarts the window, changes nothing).
func (p *Peer) panicked(now int64) {
	if !p.inFailWindow(now) {
		return
	}
	c, a := p.checked.Load(), p.accessed.Load()
	if a >= c {
		p.accessed.CompareAndSwap(a, c-1)
	}
}

// invalidate makes the next evaluation count afresh. Runs after the
// change it reports.
func (g *guard) invalidate() {
	if g != nil {
		g.epoch.Add(1)
	}
}

// failLocked applies a failed attempt on p at now, with the guards: the
// ejection cap may keep p in, and a failure that takes p out invalidates
// the count. Requires s.mu.
func (s *peerSet) failLocked(p *Peer, now int64) {
	g := s.guard
	if g == nil {
		p.failLocked(now)
		return
	}
	limit := p.maxFails.Load()
	ejects := limit != 0 && p.fails.Load()+1 >= limit && !p.down.Load() && !p.inFailWindow(now)
	if ejects && g.capOn && !g.mayEject(s, now) {
		p.failLocked(now)
		p.fails.Store(limit - 1)
		g.capped.Add(1)
		if s.events != nil {
			s.events(Event{Kind: EventEjectionCapped, Peer: p, Time: time.Unix(0, now)})
		}
		return
	}
	p.failLocked(now)
	if ejects {
		g.invalidate()
	}
}

// mayEject reports whether the cap lets one more peer out at now: Envoy's
// ejectHost, 100·(out+1)/n ≤ percent with n the peers not down, or no
// peer out yet. The peer asking is not out (failLocked checked), so the
// count does not include it.
func (g *guard) mayEject(s *peerSet, now int64) bool {
	v := g.viewAt(s, now)
	out, n := v.out[0]+v.out[1], v.live[0]+v.live[1]
	return out == 0 || float64(100*(out+1)) <= g.capPct*float64(n)
}

// succeedLocked applies a successful attempt on p (nginx's test,
// Peer.succeedLocked) and reports whether it readmitted p, which
// invalidates the guards' count. Requires s.mu.
func (s *peerSet) succeedLocked(p *Peer) bool {
	g := s.guard
	if g == nil {
		p.succeedLocked()
		return false
	}
	limit := p.maxFails.Load()
	was := limit != 0 && p.fails.Load() >= limit
	p.succeedLocked()
	if !was || p.fails.Load() != 0 {
		return false
	}
	g.invalidate()
	return true
}

// recheck evaluates panic mode again at now if it is engaged, after a
// change that can end it (a readmission, a probe claimed), so that its end
// is reported when that change brings it rather than at the next pick
// meeting a peer out.
func (s *peerSet) recheck(now int64) {
	if g := s.guard; g != nil && g.panicking.Load() {
		s.panics(now)
	}
}

// PanicCount returns how many times panic mode (WithPanicThreshold) has
// engaged since the picker was made; 0 without the option. Lock-free.
//
// Deprecated: use Stats().Panics.
func (s *peerSet) PanicCount() uint64 {
	if s.guard == nil {
		return 0
	}
	return s.guard.panics.Load()
}

// InPanic reports whether the picker is in panic mode now. Lock-free; it
// counts the peers, O(n), if its last count is stale, and reports a change
// it finds to the WithEvents hook, as a pick would.
//
// Deprecated: use Stats().InPanic.
func (s *peerSet) InPanic() bool { return s.panics(s.now()) }

// EjectionCappedCount returns how many failures WithMaxEjectionPercent
// kept from taking a peer out since the picker was made. Lock-free.
//
// Deprecated: use Stats().EjectionsCapped.
func (s *peerSet) EjectionCappedCount() uint64 {
	if s.guard == nil {
		return 0
	}
	return s.guard.capped.Load()
}
