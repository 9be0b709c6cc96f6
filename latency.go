package balancer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer/internal/defaults"
)

// Latency machinery shared by the latency-aware pickers, P2CPeakEWMA and
// FastestFirst: Finagle's peak EWMA (PeakEwma.scala, ported to tower's
// load::PeakEwma and used by Linkerd) on the injected clock, the penalty
// latency that keeps a fast failure from looking fast, and the options that
// tune both.

// latencyStats is the peak EWMA of one peer, kept by each latency-aware
// picker in its own per-peer state (p2cPeer, ffPeer): a state made when
// the picker claims the peer starts unmeasured, since latency measured for
// another picker says nothing here.
//
// The peak EWMA (ewma, stamp, measured) is written by compare-and-swap on
// reports and read without a lock by the picks, hence the atomics. A
// reader may see a new estimate with the previous stamp (they are two
// words); that only decays the new estimate a little more than it should
// for one pick.
type latencyStats struct {
	ewma     atomic.Uint64 // math.Float64bits of the estimate, in nanoseconds
	stamp    atomic.Int64  // unix nanoseconds of the last sample
	measured atomic.Bool   // at least one sample since the picker took the peer

	// unanswered sums, as math.Float64bits (ns), the waits of the
	// attempts abandoned since the peer's last reply, and abandons counts
	// them (see abandon). Lock-free, as observe.
	unanswered atomic.Uint64
	abandons   atomic.Int64
}

// latency returns the estimate (ns), undecayed, and whether a sample was
// taken: what Peer.Stats reports.
func (s *latencyStats) latency() (float64, bool) {
	if !s.measured.Load() {
		return 0, false
	}
	return s.estimate(), true
}

// estimate returns the stored peak EWMA in nanoseconds, undecayed.
func (s *latencyStats) estimate() float64 { return math.Float64frombits(s.ewma.Load()) }

// observe feeds one latency sample (ns) taken at now into the peak EWMA
// with decay time tau (ns). As in Finagle's PeakEwma.observe, a sample
// above the estimate replaces it at once, so a slowdown shows on its first
// reply; a lower one is averaged in with weight 1−exp(−Δt/τ), Δt being the
// time since the previous sample, so a long-idle peer takes its next sample
// almost whole. The first sample is taken as is. A clock that steps back
// counts as Δt = 0.
//
// observe is lock-free: the estimate moves by compare-and-swap, so two
// concurrent reports on one peer both count, in some order. The stamp is a
// second word, stored after the estimate: a report that reads the previous
// stamp with the new estimate decays it over a little more time than it
// should, weighing its own sample a little more; two first samples racing
// may keep only one of them.
func (s *latencyStats) observe(now int64, sample, tau float64) {
	for {
		old := s.ewma.Load()
		e := sample
		if s.measured.Load() {
			if cur := math.Float64frombits(old); sample <= cur {
				w := decayWeight(now-s.stamp.Load(), tau)
				e = cur*w + sample*(1-w)
			}
		}
		if s.ewma.CompareAndSwap(old, math.Float64bits(e)) {
			break
		}
	}
	s.stamp.Store(now)
	s.measured.Store(true)
}

// restartLocked replaces the estimate by sample, as if it were the first:
// FastestFirst does this when a probe clears a peer's failures, so the
// penalty that kept it at the floor while it failed does not outlive the
// failure. Requires the owner's lock (or the peer's, for FastestFirst).
func (s *latencyStats) restartLocked(now int64, sample float64) {
	s.ewma.Store(math.Float64bits(sample))
	s.stamp.Store(now)
	s.measured.Store(true)
}

// atLeast takes bound (ns), how long an abandoned attempt had run when its
// caller gave up, as a lower bound on the peer's latency: if the estimate,
// decayed to now as P2CPeakEWMA reads it, is below bound, the estimate
// becomes bound, as a slower reply would make it; otherwise nothing
// changes, since a bound below the estimate says nothing new. An unmeasured
// peer takes bound as its first estimate. Lock-free, as observe.
func (s *latencyStats) atLeast(now int64, bound, tau float64) {
	for {
		old := s.ewma.Load()
		if s.measured.Load() && math.Float64frombits(old)*decayWeight(now-s.stamp.Load(), tau) >= bound {
			return
		}
		if s.ewma.CompareAndSwap(old, math.Float64bits(bound)) {
			break
		}
	}
	s.stamp.Store(now)
	s.measured.Store(true)
}

// abandon takes an attempt abandoned after waited (ns) as a lower bound on
// the peer's latency (atLeast), the bound being the sum of the waits of
// every attempt abandoned since the peer's last reply, this one included.
// One abandoned attempt says only "slower than the caller's patience"; k of
// them in a row with no reply between say the peer has given nothing back
// for k such waits, and a peer that stalls then loses to the responsive
// ones within a few attempts instead of looking like a peer just over the
// deadline forever. A peer whose replies always come after the caller's
// deadline is as useless to that caller as one that never replies, so the
// sum overstating its latency costs nothing. Any reply (answered) starts
// the sum again. Lock-free, as observe.
func (s *latencyStats) abandon(now int64, waited, tau float64) {
	var sum float64
	for {
		old := s.unanswered.Load()
		sum = math.Float64frombits(old) + waited
		if s.unanswered.CompareAndSwap(old, math.Float64bits(sum)) {
			break
		}
	}
	s.abandons.Add(1)
	s.atLeast(now, sum, tau)
}

// superseded takes an attempt cancelled after waited (ns) because another
// attempt of its request ended it (Outcome.Superseded) as a lower bound on
// the peer's latency, on its own: its wait is not added to the run of
// abandoned attempts, nor counted in it, since a hedge that answered first
// is no sign that this peer would not have answered. Nor does it end the
// run: the peer did not reply. Lock-free, as observe.
func (s *latencyStats) superseded(now int64, waited, tau float64) {
	s.atLeast(now, waited, tau)
}

// answered ends a run of abandoned attempts, if any: the peer replied. It
// writes nothing when there was none, so a report on a healthy peer keeps
// the line clean.
func (s *latencyStats) answered() {
	// Either word may be set alone by a concurrent abandon between the
	// two stores below: test both.
	if s.abandons.Load() != 0 || s.unanswered.Load() != 0 {
		s.unanswered.Store(0)
		s.abandons.Store(0)
	}
}

// decayWeight returns exp(−dt/tau), 1 for a negative dt. For dt below
// tau/1000, the common case of a busy peer, it takes 1 − x + x²/2, whose
// relative error is below x³/6 < 2·10⁻¹⁰, for a third of the cost of
// math.Exp.
func decayWeight(dt int64, tau float64) float64 {
	if dt <= 0 {
		return 1
	}
	x := float64(dt) / tau
	if x < 1e-3 {
		return 1 - x*(1-x*0.5)
	}
	return math.Exp(-x)
}

// sampleOf returns the latency (ns) an outcome counts as: its latency, or
// for a failure at least penalty (ns).
func sampleOf(o Outcome, penalty float64) float64 {
	s := float64(o.Latency)
	if o.Failed && s < penalty {
		s = penalty
	}
	return s
}

// latencySettings are the peak EWMA's options, which the latency-aware
// pickers (P2CPeakEWMA, Prequal, FastestFirst) accept, each with its own
// default decay.
type latencySettings struct {
	decay   time.Duration
	penalty time.Duration
}

// WithDecay sets the decay time τ of the peak EWMA of latency: a sample
// older by Δt weighs exp(−Δt/τ) as much as a new one, so an estimate
// forgets a peak in a few τ. A shorter τ follows changes faster and
// readmits a recovered peer sooner; a longer one is steadier. It must be
// positive. P2CPeakEWMA, Prequal and FastestFirst accept it. Default: the
// picker's own, 10 s for P2CPeakEWMA and Prequal (the decay time of
// Finagle's p2cPeakEwma, Linkerd and Envoy's Peak EWMA), 5 s for
// FastestFirst, which also needs a recovered peer's estimate to fall back
// before it is readmitted: one option, one meaning (the decay time), a
// default per picker.
func WithDecay(d time.Duration) Option {
	return ownOption("WithDecay", func(s *latencySettings) { s.decay = d })
}

// WithFailurePenalty sets the least latency a failed attempt counts as, so
// that a peer that fails fast never looks fast: a failure enters the peak
// EWMA as max(its latency, d); FastestFirst raises it further, to a latency
// that puts the peer's weight at its floor. It must be positive. Default:
// 5 s, the penalty of Linkerd's load biaser. P2CPeakEWMA, Prequal and
// FastestFirst accept it.
func WithFailurePenalty(d time.Duration) Option {
	return ownOption("WithFailurePenalty", func(s *latencySettings) { s.penalty = d })
}

// latencyOptions applies cfg's latency options over the defaults, decay
// being the picker's own, and checks them.
func latencyOptions(picker string, cfg *config, decay time.Duration) (latencySettings, error) {
	s := latencySettings{decay: decay, penalty: defaults.FailurePenalty}
	applyOwn(cfg, &s)
	if s.decay <= 0 {
		return s, fmt.Errorf("balancer: %s: WithDecay(%v): not positive: %w", picker, s.decay, ErrInvalidConfig)
	}
	if s.penalty <= 0 {
		return s, fmt.Errorf("balancer: %s: WithFailurePenalty(%v): not positive: %w", picker, s.penalty, ErrInvalidConfig)
	}
	return s, nil
}
