package balancer

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// ReportedWRR in detail. The weights are gRFC A58's, as grpc-go's
// balancer/weightedroundrobin computes them: a report (Outcome.Load) with
// utilization u > 0 and rps q > 0 gives the peer the weight
// q / (u + eps/q × penalty); one with u or q at 0, or whose weight is not
// a positive finite number, is ignored. A peer's weight counts from the
// first recompute at which it is fresh (its last report younger than the
// expiration period) and out of blackout (its current run of reports,
// begun by its first report or by the first after a gap of the expiration
// period, older than the blackout period; A58's non_empty_since).
//
// Scheduling. Each list (primaries, backups) is weighed on its own over its
// candidates, the peers not down with a configured weight above 0. With
// fewer than two candidates weighted, every peer's smooth-step weight is its
// configured weight, and the list runs exactly as SmoothWRR. Otherwise a
// candidate weighted r_i gets x_i = c_i × r_i/max r, one without a weight
// x_i = c_i × mean(r/max r) over the weighted (c_i the configured weight;
// dividing by max r first keeps every product finite), and its smooth-step
// weight is max(1, round(B × x_i / Σx)). B, the budget, is 100 per candidate
// (reportScale: a peer at the mean of an all-default list gets 100, so that
// a share is exact to 0.5/W of the total, W ≈ 100 × candidates), at most
// 32768 (maxReportedSum), halved until the cycle of the weights can be built
// (W ≤ MaxCycle and W × d ≤ maxCycleWork, d the distinct weights) or B has
// come down to the candidates; from about 330 candidates on, a share is
// exact to 0.5/32768 of the total, a coarse resolution for each peer at
// 10,000 (3.3 a mean peer). The floor at 1 keeps a peer that reports far
// less than the others (or that the division underflows for) in rotation.
//
// A recompute that changes the weight of a peer not down restarts the
// sequence as a list change does: every current weight goes to 0 and the
// cycle is built anew, so a peer's picks never lag its share by more than
// the one pick the restart can cost it. The effective weight keeps its
// fraction of the weight across a change (ew' = ew × w'/w, rounded down),
// so a peer recovering from a failure goes on recovering; it recovers, as
// in nginx, by one per scan in which it is eligible, which with weights in
// the hundreds takes hundreds of picks, about its share of one cycle.
//
// When recomputes run. No goroutine, no timer: next holds the unix time at
// which the next one is due; a Done with a usable report (which reads the
// clock anyway) and every checkEvery-th Pick (which reads it only then)
// compare it with the clock, and the caller whose compare-and-swap moves
// it one update period on recomputes, under the lock. A list change
// recomputes at once. So a peer that stops reporting loses its weight at
// the first recompute after its expiration, which the next report of any
// peer or, with none, at most checkEvery picks bring.

// reportScale is the smooth-step weight of a peer at the mean, per unit of
// configured weight, on short lists; maxReportedSum bounds the budget of
// the scaled weights (see ReportedWRR in detail).
const (
	reportScale    = 100
	maxReportedSum = 1 << 15
)

// checkEvery is how many picks pass between two of Pick's looks at the
// clock for a due recompute: a power of two, since the fast path tests the
// cycle's counter with a mask. A clock read costs several picks; every
// 256th costs a fraction of a nanosecond a pick.
const checkEvery = 256

// ReportedWRR is weighted round robin by the servers' own load reports:
// the weights are gRFC A58's (grpc-go's weighted_round_robin), scheduled by
// nginx's smooth weighted round robin with nginx's failure model, as
// [SmoothWRR] runs them. A peer's weight is RPS / (Utilization + EPS/RPS ×
// penalty) from the Outcome.Load of its last report, counted once it has
// reported without a break for the blackout period and dropped when its
// last report is older than the expiration period (it then goes through the
// blackout again); a report with Utilization or RPS 0 is ignored. Peers
// without a weight get the mean; while fewer than two peers of a list have
// one, the list runs on the configured weights alone, exactly as SmoothWRR.
// The configured weight multiplies the reported one (with default weights
// the shares are A58's; weight=2 doubles a peer's share among peers that
// report alike; weight=0 is never picked), where A58 ignores it.
//
// Weights are recomputed at most once per update period, lazily: by the
// Done with a report, or else the 256th Pick, that finds the period over;
// a server that stops reporting expires at the first recompute after its
// expiration period. Choose it when the servers know their load better
// than one client can (many clients, a fleet with different capacities);
// A58's defaults (blackout 10 s, expiration 3 min, update 1 s, penalty 1)
// suit slowly changing fleets. For capacities that change within seconds,
// with a report on every reply: WithBlackoutPeriod(0) (a fresh report is
// trusted at once), WithWeightUpdatePeriod(100*time.Millisecond) and an
// expiration of a few seconds, long enough for the least picked peer to
// reply at least once.
//
// Pick costs what SmoothWRR's does (O(1), lock-free from the precomputed
// cycle while the primaries are healthy); Done with a report is lock-free
// but for the recompute, O(n + W·d) when the weights change. The zero
// value is not usable; use [NewReportedWRR]. ReportedWRR is safe for
// concurrent use.
type ReportedWRR struct {
	smoothRR

	blackout, expiration, period int64 // nanoseconds
	penalty                      float64

	// next is the unix time (ns) at which the next recompute is due; the
	// caller that moves it on by compare-and-swap recomputes.
	next atomic.Int64

	slowPicks uint // picks by the scan since the last clock check; guarded by mu

	// Scratch for weighLocked, reused so that a recompute that changes
	// nothing allocates nothing; guarded by mu.
	share  []float64
	want   []int64
	sorted []int64
}

// reportedWRRSpec is ReportedWRR's declaration (see pickerSpec).
var reportedWRRSpec = pickerSpec{
	name:    "ReportedWRR",
	options: []string{"WithBlackoutPeriod", "WithWeightExpirationPeriod", "WithWeightUpdatePeriod", "WithErrorUtilizationPenalty"},
}

// reportedWRRSettings are ReportedWRR's own options, defaults first.
type reportedWRRSettings struct {
	blackout, expiration, period time.Duration
	penalty                      float64
}

// minWeightUpdatePeriod is the shortest update period WithWeightUpdatePeriod
// takes. A58 floors it at 100 ms to bound a timer's work; here nothing runs
// without a report or a pick to drive it, a recompute that changes nothing
// is O(n) and allocates nothing, and simulations and fast-changing fleets
// want periods well under A58's, so the floor only keeps the recompute from
// running on every report.
const minWeightUpdatePeriod = time.Millisecond

// WithBlackoutPeriod sets how long ReportedWRR waits, after a peer's first
// report (or its first after an expiration), before its reported weight
// counts: A58's blackout_period. 0 trusts the first report. Default 10s.
func WithBlackoutPeriod(d time.Duration) Option {
	return ownOption("WithBlackoutPeriod", func(s *reportedWRRSettings) { s.blackout = d })
}

// WithWeightExpirationPeriod sets how old a peer's last report may be
// before ReportedWRR drops its weight (A58's weight_expiration_period);
// above 0. Default 3m.
func WithWeightExpirationPeriod(d time.Duration) Option {
	return ownOption("WithWeightExpirationPeriod", func(s *reportedWRRSettings) { s.expiration = d })
}

// WithWeightUpdatePeriod sets how often, at most, ReportedWRR recomputes
// its weights (A58's weight_update_period); at least 1ms, where A58 takes
// 100ms. Default 1s.
func WithWeightUpdatePeriod(d time.Duration) Option {
	return ownOption("WithWeightUpdatePeriod", func(s *reportedWRRSettings) { s.period = d })
}

// WithErrorUtilizationPenalty sets the utilization ReportedWRR adds per unit
// of error rate (EPS/RPS) when it weighs a report (A58's
// error_utilization_penalty); finite, not negative. Default 1.
func WithErrorUtilizationPenalty(x float64) Option {
	return ownOption("WithErrorUtilizationPenalty", func(s *reportedWRRSettings) { s.penalty = x })
}

// check returns an error naming the first setting out of range.
func (s reportedWRRSettings) check() error {
	bad := func(opt string, v any, why string) error {
		return fmt.Errorf("balancer: ReportedWRR: %s(%v): %s: %w", opt, v, why, ErrInvalidConfig)
	}
	switch {
	case s.blackout < 0:
		return bad("WithBlackoutPeriod", s.blackout, "negative")
	case s.expiration <= 0:
		return bad("WithWeightExpirationPeriod", s.expiration, "not above 0")
	case s.period < minWeightUpdatePeriod:
		return bad("WithWeightUpdatePeriod", s.period, "below "+minWeightUpdatePeriod.String())
	case math.IsNaN(s.penalty) || math.IsInf(s.penalty, 0) || s.penalty < 0:
		return bad("WithErrorUtilizationPenalty", s.penalty, "not a finite number ≥ 0")
	}
	return nil
}

// NewReportedWRR returns a ReportedWRR over peers. It accepts WithClock,
// WithBlackoutPeriod, WithWeightExpirationPeriod, WithWeightUpdatePeriod
// and WithErrorUtilizationPenalty.
func NewReportedWRR(peers []*Peer, opts ...Option) (*ReportedWRR, error) {
	cfg, err := newConfig(reportedWRRSpec, opts)
	if err != nil {
		return nil, err
	}
	set := reportedWRRSettings{blackout: 10 * time.Second, expiration: 3 * time.Minute, period: time.Second, penalty: 1}
	applyOwn(&cfg, &set)
	if err := set.check(); err != nil {
		return nil, err
	}
	s := &ReportedWRR{
		blackout:   int64(set.blackout),
		expiration: int64(set.expiration),
		period:     int64(set.period),
		penalty:    set.penalty,
	}
	s.currentWeight = s.impliedLocked
	s.fresh = newRWRRPeer
	if err := s.init(peers, cfg, s.changedLocked); err != nil {
		return nil, err
	}
	return s, nil
}

// Pick returns the next peer in nginx's smooth order over the weights of
// the last recompute. It is O(1) and lock-free while those weights and the
// primaries' health are static and r is fresh, as SmoothWRR's; one pick in
// 256 also reads the clock, and the one that finds a recompute due runs
// it.
func (s *ReportedWRR) Pick(r *Request) (*Peer, error) {
	// SmoothWRR's fast paths, spelled out for the same reason (cycle.go),
	// with the look at the clock on the cycle's counter.
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			v := c.ctr.Add(1)
			if i := c.slot(v); i >= 0 {
				p := c.list.primary[i]
				p.pick()
				if v%checkEvery == 0 {
					s.due(s.now())
				}
				return fastFirst(c.list, r, int(i), p)
			}
		} else if l := s.load(); l.single {
			// One server: picked whatever its weight (RR.c 449-460).
			if p := l.primary[0]; !p.down.Load() && p.acquire() {
				return fastFirst(l, r, 0, p)
			}
		}
	}
	return s.pickSlow(r)
}

// pickSlow is Pick's exact scan, under the lock, every checkEvery-th of
// them after a look at the clock.
func (s *ReportedWRR) pickSlow(r *Request) (*Peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slowPicks++; s.slowPicks%checkEvery == 0 {
		now := s.now()
		if next := s.next.Load(); now >= next && s.next.CompareAndSwap(next, addClamped(now, s.period)) {
			s.reweighLocked(now)
		}
	}
	return s.pickLocked(r)
}

// Done implements Picker.Done. A report in o.Load that gives a usable
// weight is recorded for p, lock-free, and may run a due recompute.
func (s *ReportedWRR) Done(p *Peer, o Outcome) error {
	if err := s.report(p, o); err != nil || o.Load == nil {
		return err
	}
	w, ok := a58Weight(o.Load, s.penalty)
	if !ok {
		return nil
	}
	now := s.now()
	st := rwrrOf(p)
	// A58's non_empty_since: a report that starts a run (the first, or
	// the first after a gap of the expiration period) restarts the
	// blackout; stored before last, so that no reader pairs the new last
	// with the old run.
	if last := st.last.Load(); last == 0 || now-last >= s.expiration {
		st.since.Store(now)
	}
	st.weight.Store(math.Float64bits(w))
	st.last.Store(now)
	s.due(now)
	return nil
}

// a58Weight returns A58's weight for l, and false for a report A58 ignores
// (utilization or rps 0) or whose weight is not a positive finite number.
func a58Weight(l *ServerLoad, penalty float64) (float64, bool) {
	if l.Utilization == 0 || l.RPS == 0 {
		return 0, false
	}
	w := l.RPS / (l.Utilization + l.EPS/l.RPS*penalty)
	return w, w > 0 && !math.IsInf(w, 0) // NaN fails w > 0
}

// due recomputes the weights if one is due at now: the caller whose
// compare-and-swap moves the deadline on does, under the lock.
func (s *ReportedWRR) due(now int64) {
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, addClamped(now, s.period)) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reweighLocked(now)
}

// addClamped returns t + d, d ≥ 0, saturated at the last representable
// instant.
func addClamped(t, d int64) int64 {
	if t > math.MaxInt64-d {
		return math.MaxInt64
	}
	return t + d
}

// reweighLocked recomputes every peer's weight from the reports at now and,
// if one that is not down changed, restarts the sequence over the new
// weights. Requires s.mu.
func (s *ReportedWRR) reweighLocked(now int64) {
	l := s.load()
	changed := s.weighLocked(l.primary, now)
	if s.weighLocked(l.backup, now) || changed {
		// As a list change leaves them (publishLocked), for the cycle.
		s.closeLocked()
		for _, peers := range [2][]*Peer{l.primary, l.backup} {
			for _, p := range peers {
				p.currentWeight = 0
			}
		}
		s.built = nil // built for the old weights
		s.smoothRR.changedLocked(l)
	}
}

// changedLocked runs after every peer-list change: the weights are
// recomputed for the new list at once, and the sequence starts over it.
func (s *ReportedWRR) changedLocked(l *peerList) {
	now := s.now()
	s.weighLocked(l.primary, now)
	s.weighLocked(l.backup, now)
	s.next.Store(addClamped(now, s.period))
	s.smoothRR.changedLocked(l)
}

// weighLocked sets the smooth-step weight of each of peers, one list, from
// the reports at now (see ReportedWRR in detail), and reports whether one
// not down changed. A down peer keeps its weight until it is up, which is
// a list change. Requires s.mu.
func (s *ReportedWRR) weighLocked(peers []*Peer, now int64) bool {
	n := len(peers)
	s.share = slices.Grow(s.share[:0], n)[:n]
	s.want = slices.Grow(s.want[:0], n)[:n]
	var top float64
	weighted, candidates := 0, 0
	for i, p := range peers {
		r := 0.0
		if !p.down.Load() && p.weight.Load() > 0 {
			candidates++
			if r = s.reportedLocked(p, now); r > 0 {
				weighted++
				top = max(top, r)
			}
		}
		s.share[i] = r
	}
	if weighted < 2 {
		for i, p := range peers {
			s.want[i] = p.weight.Load()
		}
	} else {
		var sum float64
		for _, r := range s.share {
			sum += r / top // 0 for the unweighted
		}
		mean := sum / float64(weighted)
		var total float64
		for i, p := range peers {
			x := 0.0
			if c := p.weight.Load(); c > 0 && !p.down.Load() {
				x = mean
				if r := s.share[i]; r > 0 {
					x = r / top
				}
				x *= float64(c)
			}
			s.share[i] = x
			total += x
		}
		for budget := min(int64(candidates)*reportScale, maxReportedSum); ; budget /= 2 {
			if s.scaleLocked(peers, float64(budget)/total) || budget <= int64(candidates) {
				break
			}
		}
	}
	changed := false
	for i, p := range peers {
		w := s.want[i]
		if p.down.Load() || w == p.smooth {
			rwrrOf(p).derived.Store(p.smooth)
			continue
		}
		changed = true
		// The effective weight keeps its fraction of the weight, so that
		// a failure's cut and its recovery carry over.
		ew := w
		if p.smooth > 0 && p.effectiveWeight < p.smooth {
			ew = p.effectiveWeight * w / p.smooth // both ≤ 2^30: no overflow
		}
		p.smooth = w
		p.setEffectiveLocked(ew)
		rwrrOf(p).derived.Store(w)
	}
	return changed
}

// scaleLocked sets s.want to the smooth-step weights of peers for the
// shares in s.share at k weight units per unit of share (0 for a peer not
// a candidate, at least 1 for one), and reports whether the precomputed
// cycle can hold them (see buildCycle). Requires s.mu.
func (s *ReportedWRR) scaleLocked(peers []*Peer, k float64) bool {
	var w, top int64
	for i, p := range peers {
		v := int64(0)
		if p.weight.Load() > 0 && !p.down.Load() {
			v = max(1, int64(math.Round(k*s.share[i])))
		} else if p.down.Load() {
			v = p.smooth // kept: see weighLocked
		}
		s.want[i] = v
		if !p.down.Load() {
			w += v
			top = max(top, v)
		}
	}
	if w > MaxCycle {
		return false
	}
	if w*min(top, int64(len(peers))) <= maxCycleWork {
		return true // no more distinct weights than that
	}
	s.sorted = s.sorted[:0]
	for i, p := range peers {
		if !p.down.Load() && s.want[i] > 0 {
			s.sorted = append(s.sorted, s.want[i])
		}
	}
	slices.Sort(s.sorted)
	return w*int64(len(slices.Compact(s.sorted))) <= maxCycleWork
}

// reportedLocked returns p's reported weight at now, 0 if it has none that
// counts: no report, the last one expired, or still in its blackout.
func (s *ReportedWRR) reportedLocked(p *Peer, now int64) float64 {
	st := rwrrOf(p)
	last := st.last.Load()
	if last == 0 || now-last >= s.expiration {
		return 0
	}
	if s.blackout > 0 && now-st.since.Load() < s.blackout {
		return 0
	}
	return math.Float64frombits(st.weight.Load())
}

// rwrrPeer is ReportedWRR's per-peer state (peerstate.go): the last usable
// report, lock-free, and the weight of the last recompute, for State.
type rwrrPeer struct {
	peerState
	weight  atomic.Uint64 // float64 bits: the last usable report's weight
	last    atomic.Int64  // unix ns of the last usable report; 0: none
	since   atomic.Int64  // unix ns at which the current run of reports began
	derived atomic.Int64  // the smooth-step weight of the last recompute
}

func newRWRRPeer(int64) *peerState {
	st := &rwrrPeer{}
	st.own = st
	return &st.peerState
}

// derivedWeight is the smooth-step weight ReportedWRR gives the peer, for
// PeerState.DerivedWeight.
func (st *rwrrPeer) derivedWeight() int64 { return st.derived.Load() }

// rwrrNone is the state rwrrOf returns for a peer that holds none of
// ReportedWRR's: a report that raced the peer's claim by another picker
// writes here, where nothing reads it.
var rwrrNone rwrrPeer

// rwrrOf returns ReportedWRR's state of p, or rwrrNone. Lock-free.
func rwrrOf(p *Peer) *rwrrPeer {
	if h := p.state.Load(); h != nil {
		if st, ok := h.own.(*rwrrPeer); ok {
			return st
		}
	}
	return &rwrrNone
}
