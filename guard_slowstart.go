package balancer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Slow start, the guard every weighted picker shares. Envoy's rule
// (EdfLoadBalancerBase::applySlowStartFactor): a peer in slow start counts
// for weight · max(min, (t/window)^(1/aggression)), t the time since its
// slow start began, at least 1 ms (Envoy counts whole milliseconds from 1),
// and nothing more once t reaches the window.
//
// When a peer enters slow start:
//
//   - Added by Add or Update after construction. The peers given to the
//     constructor do not warm, as in Envoy, whose latest_host_added_time
//     starts at the balancer's construction so that the hosts of the first
//     update are not in slow start: a fleet that starts together has
//     nothing to ramp against (the factor would cancel out), and warming it
//     would only starve it of nothing.
//   - Readmitted after failures: the success that clears the failures of a
//     peer that was out (EventPeerReadmitted), not the probe that precedes
//     it, which may still fail. Envoy re-enters slow start when a host
//     passes an active health check after failing it; the probe's success
//     is this library's health check.
//   - Brought back up after being down, by SetDown(p, false) or by an
//     Update that keeps it: balancerhttp's health checks drive SetDown,
//     the other analogue of Envoy's unhealthy-to-healthy transition; nginx
//     Plus's slow_start=time ramps a server "from zero to its nominal
//     value" when it becomes healthy again.
//
// Per picker. The weighted round robins (SmoothWRR, ReportedWRR through
// the smooth scan, ClassicWRR through rounds classicWarmScale times as
// long), LeastConn and FastestFirst scale the weight where nginx's step or
// the load comparison reads it: those are exact, deterministic and under
// the lock they already take. The random and two-choice pickers (Random,
// RandomTwo, RandomWeighted, P2CPeakEWMA) keep their tables, built from
// the configured weights, and thin each draw: a draw that lands on a
// warming peer stands with probability factor (one more draw from the
// picker's source), else it is drawn again, which draws in proportion to
// weight · factor exactly (rejection sampling); their exact fallbacks,
// past a few fruitless draws, weigh by weight · factor too. The
// two-choice costs still compare per configured weight: the draw is where
// their weight enters. FastestFirst's (in flight + 1)/weight uses the
// scaled weight, so with every peer idle a warming peer, whose expected
// delay is the larger, gets nothing; under load it takes its scaled share.
// Hash, ConsistentHash and IPHash refuse it: a key's peer is fixed, and
// sending a share of a warming peer's keys elsewhere would break the
// affinity they exist for. RoundRobin ignores weights; Prequal picks by
// probed load and latency.
//
// Cost. The picker keeps, in until, the latest end of a warm-up in
// progress, 0 when none is: a pick loads it and, while it is 0, does
// nothing else (one load and one branch). While it is not, the pick reads
// the clock once and the weights it uses are scaled by each peer's factor;
// the first pick past until clears it (by compare-and-swap, so that a peer
// entering slow start meanwhile is never lost). Each peer's start is a
// field of the Peer (warmFrom), written under the picker's lock when the
// peer enters slow start and read lock-free by the picks.
//
// Integer weights. nginx's smooth step and the least-connections
// comparisons work on integers, and weights are small (1 by default), so
// weight·factor would round to 0 or 1. While a peer warms, those pickers
// scale every weight by slowScale (warmUnits) and the current weights with
// them: the smooth sequence of weights all multiplied by one constant is
// the sequence of the weights, so the non-warming peers keep their
// relative order, and a warming peer's step is its effective weight ·
// slowScale · factor, rounded. When the last warm-up ends, the current
// weights go back to 0, as after a weight change (SetWeight), and the
// precomputed cycle may open again.

// slowScale is the fixed point of the scaled weights while a peer warms:
// factors resolve to 1/1024, and weights (at most MaxWeightSum, 2^30) stay
// below 2^40, current weights far from overflow.
const slowScale = 1 << 10

// minWarmT is the least time into a warm-up the factor reads, Envoy's 1 ms.
const minWarmT = int64(time.Millisecond)

// slowStartSetting is WithSlowStart's setting, applied by peerSet.init.
type slowStartSetting struct {
	window             time.Duration
	aggression, minPct float64
	set                bool
}

// WithSlowStart ramps up the weight of a peer that joins (Add, or Update
// adding it, after construction), is readmitted after failures (the success
// that clears them), or comes back up (SetDown, or Update, from down), as
// Envoy's slow start does: for window it counts for weight ·
// max(minWeightPercent/100, (max(t, 1 ms)/window)^(1/aggression)), t the
// time since, on the picker's clock. The peers given to the constructor do
// not warm, nor does a peer readmitted while the picker is in panic mode
// (WithPanicThreshold), which would then get less than the peers still
// out. Envoy's defaults are aggression 1 and minWeightPercent 10;
// nginx Plus's server parameter slow_start=time is the analogue: a server
// that becomes healthy recovers its weight from zero over time.
//
// The pickers a weight drives accept it; Hash, ConsistentHash, IPHash,
// RoundRobin and Prequal refuse it, saying why, and RandomWeighted refuses
// it beside RandomWeightedSettings.Warmup, Dubbo's exact ramp, which it otherwise replaces. A window ≤ 0, an aggression not positive and
// finite, or a minWeightPercent outside [0, 100] is refused with
// ErrInvalidConfig. Default: off. While no peer warms, a pick costs one
// atomic load more; while one does, a clock read, and SmoothWRR,
// ClassicWRR and ReportedWRR pick under their lock (their lock-free cycle
// holds fixed weights). No pick allocates.
func WithSlowStart(window time.Duration, aggression, minWeightPercent float64) Option {
	return ownOption("WithSlowStart", func(s *slowStartSetting) {
		*s = slowStartSetting{window, aggression, minWeightPercent, true}
	})
}

// slowStartRefused says why a picker refuses WithSlowStart, for its error.
var slowStartRefused = map[string]string{
	"Hash":           "a key's peer is fixed, so a warming peer cannot take a share of the keys",
	"ConsistentHash": "a key's peer is fixed, so a warming peer cannot take a share of the keys",
	"IPHash":         "a client's peer is fixed, so a warming peer cannot take a share of the clients",
	"RoundRobin":     "it ignores weights; SmoothWRR ramps them",
	"Prequal":        "it picks by probed load and latency, not by weight",
}

// refusedWhy returns why the picker called picker refuses option, or "".
func refusedWhy(picker, option string) string {
	if option == "WithSlowStart" {
		return slowStartRefused[picker]
	}
	return ""
}

// slowStart is a picker's slow-start guard (peerSet.slow). Its settings
// are set by init, before the picker is in use, and read-only after.
type slowStart struct {
	window  int64   // nanoseconds; 0: off
	inv     float64 // 1/aggression
	minimum float64 // min_weight_percent/100

	// until is the latest end (unix nanoseconds) of a warm-up in progress,
	// 0 when none is: raised under the owner's lock when a peer enters
	// slow start, cleared by the first pick past it.
	until atomic.Int64

	// ready is set once the constructor's peers are in: they do not warm.
	// Set before the picker is in use.
	ready bool

	// scaled reports whether the current weights of the owner's peers are
	// in units of 1/unit (enterScaleLocked: slowScale, or ClassicWRR's
	// classicWarmScale); guarded by the owner's lock.
	scaled bool
	unit   int64
}

// setup checks and applies WithSlowStart, if given, for the picker called
// picker.
func (w *slowStart) setup(picker string, cfg *config) error {
	var s slowStartSetting
	applyOwn(cfg, &s)
	if !s.set {
		return nil
	}
	bad := func(what string) error {
		return fmt.Errorf("balancer: %s: WithSlowStart(%v, %v, %v): %s: %w", picker, s.window, s.aggression, s.minPct, what, ErrInvalidConfig)
	}
	switch {
	case s.window <= 0:
		return bad(fmt.Sprintf("window %v is not positive", s.window))
	case math.IsNaN(s.aggression) || math.IsInf(s.aggression, 0) || s.aggression <= 0:
		return bad(fmt.Sprintf("aggression %v is not positive and finite", s.aggression))
	case math.IsNaN(s.minPct) || s.minPct < 0 || s.minPct > 100:
		return bad(fmt.Sprintf("minWeightPercent %v is outside [0, 100]", s.minPct))
	}
	w.window, w.inv, w.minimum = int64(s.window), 1/s.aggression, s.minPct/100
	return nil
}

// on reports whether slow start is configured.
func (w *slowStart) on() bool { return w.window != 0 }

// startLocked puts p in slow start from now. Requires the owner's lock.
func (w *slowStart) startLocked(p *Peer, now int64) {
	if w.window == 0 || !w.ready {
		return
	}
	if now == 0 {
		now = 1 // 0 means none: a clock at the epoch starts 1 ns late
	}
	p.warmFrom.Store(now)
	end := now + w.window
	if end < now {
		end = math.MaxInt64 // a window past the last instant saturates
	}
	if end == 0 {
		end = 1 // 0 means none
	}
	if end > w.until.Load() {
		w.until.Store(end)
	}
}

// idleLocked reports, in a load and a branch, that no peer warms nor has
// since the last pick: a locked pick checks it before the warm-up's step
// (scaleLocked, warmLocked, classicWarmLocked), which is a call. Requires
// the owner's lock.
func (w *slowStart) idleLocked() bool { return w.until.Load() == 0 && !w.scaled }

// warming reports whether a peer may be warming at clk's time, reading the
// clock only if a warm-up is in progress, and clears until past its end.
func (w *slowStart) warming(clk *lazyClock) bool {
	u := w.until.Load()
	return u != 0 && w.warmingUntil(u, clk)
}

// warmingUntil is warming once a warm-up ending at u is on record: a call
// of its own, so that warming, on every pick, inlines to a load and a
// branch.
func (w *slowStart) warmingUntil(u int64, clk *lazyClock) bool {
	if clk.get() < u {
		return true
	}
	w.until.CompareAndSwap(u, 0)
	return false
}

// factor returns p's slow-start factor at now, in (0, 1]: 1 for a peer not
// warming.
func (w *slowStart) factor(p *Peer, now int64) float64 {
	from := p.warmFrom.Load()
	if from == 0 || w.window == 0 {
		return 1
	}
	t := now - from
	if t >= w.window {
		return 1
	}
	t = max(t, minWarmT) // a clock behind the start reads as the start
	f := float64(t) / float64(w.window)
	if w.inv != 1 {
		f = math.Pow(f, w.inv)
	}
	return min(1, max(f, w.minimum))
}

// scaledWeight returns weight ew in slowScale units, scaled by p's factor
// at now, at least 1 if ew is positive: a warming peer with a minimum of 0
// still counts, for very little.
func (w *slowStart) scaledWeight(p *Peer, ew int64, now int64) int64 {
	f := w.factor(p, now)
	if f >= 1 {
		return ew * slowScale
	}
	s := int64(math.Round(float64(ew*slowScale) * f))
	if s < 1 && ew > 0 {
		s = 1
	}
	return s
}

// accepts reports whether a draw that landed on p at now stands: with
// probability p's factor, by one draw of rng, taken only for a peer that
// warms (factor below 1). Redrawing the rejected ones draws each peer in
// proportion to weight · factor.
func (w *slowStart) accepts(p *Peer, now int64, rng *randSource) bool {
	f := w.factor(p, now)
	return f >= 1 || float64(rng.uint64()>>11)*(1.0/(1<<53)) < f
}

// stands is accepts for a draw by a picker that may be warming: true at
// once for a nil w (no peer warming), else as accepts.
func (w *slowStart) stands(p *Peer, clk *lazyClock, rng *randSource) bool {
	return w == nil || w.accepts(p, clk.get(), rng)
}

// enterScaleLocked puts the current weights of l's peers in slowScale
// units, if they are not already: the smooth sequence is unchanged by it.
// Requires the owner's lock, and the current weights in the peers' own
// fields (a cycle closed, groups materialized).
func (w *slowStart) enterScaleLocked(l *peerList, k int64) {
	if w.scaled {
		return
	}
	w.scaled, w.unit = true, k
	for _, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			p.currentWeight *= k
		}
	}
}

// scaleLocked is enterScaleLocked or leaveScaleLocked, as the pick at
// clk's time finds a peer warming or not, for the pickers whose current
// weights need nothing else (LeastConn's ties, slowScale units); it
// reports whether a peer may be warming. Requires the owner's lock.
func (s *peerSet) scaleLocked(l *peerList, clk *lazyClock, k int64) bool {
	if !s.slow.warming(clk) {
		s.slow.leaveScaleLocked(l)
		return false
	}
	s.slow.enterScaleLocked(l, k)
	return true
}

// currentLocked returns current weight cw, as the owner keeps it, in
// nginx's units, for Peer.State. Requires the owner's lock.
func (w *slowStart) currentLocked(cw int64) int64 {
	if w.scaled {
		return cw / w.unit
	}
	return cw
}

// leaveScaleLocked ends the scaled units once no peer warms: every current
// weight goes back to 0, as after a weight change. It reports whether the
// units changed. Requires the owner's lock.
func (w *slowStart) leaveScaleLocked(l *peerList) bool {
	return w.scaled && w.unscaleLocked(l)
}

// unscaleLocked is leaveScaleLocked's work, a call of its own so that
// leaveScaleLocked, on every locked pick, inlines to a branch. Requires
// the owner's lock.
func (w *slowStart) unscaleLocked(l *peerList) bool {
	w.scaled = false
	for _, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			p.currentWeight = 0
			p.warmFrom.Store(0) // every warm-up is over
		}
	}
	return true
}

// readmittedLocked starts the slow start of p, whose failures a success
// is clearing while it is out for them (max_fails on record), if its
// owner has slow start on and is not in panic mode: in panic the peers
// still out take their full weight, and a readmitted peer warming beside
// them would be the least picked of all, the one that answers. Requires
// the owner's lock.
func (p *Peer) readmittedLocked() {
	if s := p.owner.Load(); s != nil && s.slow.on() && !(s.guard != nil && s.guard.panicking.Load()) {
		s.slow.startLocked(p, s.now())
	}
}

// outForFails reports whether p has max_fails failures on record, the state
// a readmission clears.
func (p *Peer) outForFails() bool {
	limit := p.maxFails.Load()
	return limit != 0 && p.fails.Load() >= limit
}

// settleLocked lets p out of slow start once its warm-up is over, so that
// the weight groups take it back. Requires the owner's lock.
func (w *slowStart) settleLocked(p *Peer, now int64) {
	if from := p.warmFrom.Load(); from != 0 && now-from >= w.window {
		p.warmFrom.Store(0)
	}
}
