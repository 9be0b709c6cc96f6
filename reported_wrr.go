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
// configured weight, and the list runs exactly as SmoothWRR, but for the
// primaries' cold start (reported_wrr_start.go). Otherwise a
// candidate weighted r_i gets x_i = c_i × r_i/max r, one without a weight
// x_i = c_i × mean(r/max r) over the weighted (c_i the configured weight;
// dividing by max r first keeps every product finite), and its smooth-step
// weight is max(1, round(B × x_i / Σx)). B, the budget, is 100 per
// candidate (reportScale: a peer at the mean of an all-default list gets
// 100, so that a share is exact to 0.5/W of the total, W ≈ 100 ×
// candidates), at most 32768 (maxReportedSum), halved until the cycle of
// the weights fits and is cheap to build (W ≤ maxCycle and W × d ≤
// reportedBuildWork, d the distinct weights) or B has come down to the
// candidates; from about 330 candidates on, a share is exact to 0.5/32768
// of the total or coarser, a coarse resolution for each peer at 10,000
// (3.3 a mean peer). The floor at 1 keeps a peer that reports far less
// than the others (or that the division underflows for) in rotation.
//
// A recompute that changes the weight of a peer not down restarts the
// sequence as a list change does: every current weight goes to 0 and the
// cycle is built anew. A cycle of derived weights, whenever it opens from
// current weights at 0 (a recompute, a list change, a recovery), is
// entered at a position drawn uniformly from its length, as grpc-go's
// weighted_round_robin starts each new scheduler at a random index: any
// position is a state of nginx's scan (the one that many picks from 0
// reach), so the order stays nginx's from there. Clients that derive the
// same weights from the same reports at the same time would otherwise
// pick in step, every one the same server at the same moment (a test
// with 16 clients making equal numbers of picks: 16 of 16 on one server
// at every pick; about 7 with the random entry); and restarts as
// frequent as picks would give the first entry, the first heaviest peer,
// every pick. A cycle of configured weights (fewer than two weighted) is
// entered at the position the old cycle's counter had reached, 0 after a
// list change, so that it replays nginx exactly.
//
// What the random entry does not fix (measured in the simulator's fleet
// scenarios, 3 seeds, the short settings of the doc). There the clients'
// counters are already apart, each client's arrivals being its own
// Poisson stream, and the random entry leaves p99 within the confidence
// interval (fleet16 567 to 605 ms, fleet64 still one seed in three
// collapsing, 20% errors). The collapse is not the failure model
// (balance sim -max-fails 0 makes it worse: the queues then grow without
// bound) nor, in a run with the settings changed (not kept as a test),
// the expiration (10 s in place of 2 s: the same). It follows the age of
// the weights: a weight is the report's rps over its utilization, the
// server's service rate over its 1 s window, which the split follows
// open-loop (nothing in it sees a queue), at 0.75 load with speeds
// redrawn about every second; an update period of 1 s in place of
// 100 ms (a run as above) collapses fleet1 and fleet16 too, and each
// client hears from a server only on its own replies, about 0.6 per server and second at 64
// clients against 37 with one, so its weights lag further the more
// clients share the fleet. Once a server's queue passes the 1 s timeout,
// its abandoned attempts still occupy it and their retries load the
// others (a metastable overload). Fresher reports (the out-of-band
// stream) or a term for the reported requests in flight would address
// it; neither is here. The effective weight keeps its fraction
// of the weight across a change (ew' = ew × w'/w, rounded down), so a peer
// recovering from a failure goes on recovering; it recovers, as in nginx,
// by one per scan in which it is eligible, which with weights in the
// hundreds takes hundreds of picks, about its share of one cycle.
//
// When recomputes run. No goroutine, no timer: next holds the unix time at
// which the next one is due; a Done with a usable report (which reads the
// clock anyway) and every checkEvery-th Pick (which reads it only then)
// compare it with the clock, and the caller whose compare-and-swap moves
// it one update period on recomputes (see reweigh: the weights under the
// lock, their cycle outside it). A list change recomputes at once, under
// the lock. So a peer that stops reporting loses its weight at
// the first recompute after its expiration, which the next report of any
// peer or, with none, at most checkEvery picks bring.

// Choosing ReportedWRR, and its costs. The configured weight multiplies the
// reported one, where A58 ignores it: with default weights the shares are
// A58's, and a weight= set still means what it says (weight=2 doubles a
// peer's share among peers that report alike; weight=0 gives it none). A
// sequence over derived weights is entered at a random position, drawn
// from WithRand's source or else the runtime's (see Scheduling). A58's
// defaults (blackout 10 s, expiration 3 min, update 1 s, penalty 1) suit
// slowly changing fleets. For capacities that change within tens of
// seconds, or step (a server slowed or restarted), with a report on every
// reply: ReportedWRRSettings{BlackoutPeriod: -1} (a fresh report is
// trusted at once), a WeightUpdatePeriod of 100ms and a
// WeightExpirationPeriod of a few seconds, long enough for the least picked peer to reply at least once.
// For speeds redrawn every second or so with many clients, LeastConn with
// WithReportedLoad does better: in the simulator's fleet16 (16 clients)
// ReportedWRR's p99 is 605 ms against its 186 ms, and in fleet64 (64
// clients) 1726 ms with 21% errors against 389 ms (docs/SIMULATION.md).
// Pick is SmoothWRR's (O(1), lock-free from the precomputed cycle while the
// primaries are healthy); Done with a report is lock-free and reads the
// clock. A recompute is O(n), and when the weights change O(n + W·d) more
// to build their cycle (W their sum, d the distinct ones, bounded), paid by
// the Done or Pick that runs it while the other picks go on from the old
// cycle.

// reportScale is the smooth-step weight of a peer at the mean, per unit of
// configured weight, on short lists; maxReportedSum bounds the budget of
// the scaled weights (see ReportedWRR in detail).
const (
	reportScale    = 100
	maxReportedSum = 1 << 15
)

// reportedBuildWork bounds the work of building the cycle of derived
// weights, W·d steps (buildCycle), an eighth of maxCycleWork: a recompute
// that changes the weights runs it, once per update period at most, in the
// Done or Pick that found the recompute due. The budget is halved until
// the weights fit.
const reportedBuildWork = maxCycleWork / 8

// checkEvery is how many picks pass between two of Pick's looks at the
// clock for a due recompute: a power of two, since the fast path tests the
// cycle's counter with a mask. A clock read costs several picks; every
// 256th costs a fraction of a nanosecond a pick.
const checkEvery = 256

// ReportedWRR is weighted round robin by the servers' own load reports:
// gRFC A58's weights (grpc-go's weighted_round_robin), RPS / (Utilization
// + EPS/RPS × penalty) from each peer's last Outcome.Load, times its
// configured weight, in nginx's smooth order with nginx's failure model, as
// [SmoothWRR] runs them. A weight counts once the peer has reported without
// a break for the blackout period and lapses after the expiration period
// without a report; peers without one get the mean. While fewer than two
// primaries have one but some have reported (the blackout of a start),
// they are picked as [LeastConn] picks, by this client's attempts in
// flight per unit of configured weight, so that a slow server is not sent
// its equal share before its weight counts (8 servers of speeds 1 to 4 at
// 68% load, A58's 10 s blackout: p99 over the first 30 s 4.1 s by round
// robin, 137 ms so, LeastConn's 134 ms; simulated, median of 5 seeds).
// With no report at all
// a list runs exactly as SmoothWRR. A sequence of derived weights starts
// at a random position (WithRand's source), so that clients seeing the
// same reports do not pick in step.
// No report can take the pool: a weight counts for at most three times the
// median of its list's, and for the median when the peer's replies are
// more than four times as slow as the median peer's (Stats().ClampedWeights
// counts the cuts). Choose it when the servers know their load better than one client can
// (many clients, capacities that differ or change slowly); for speeds that
// change every second, LeastConn with WithReportedLoad does better.
//
// Pick costs what SmoothWRR's does, but in the cold start, where it is
// LeastConn's scan, O(n) under the lock; Done with a report is lock-free.
// Weights are recomputed lazily, at most once per update period, in O(n)
// and a new cycle. The zero value is not usable; use [ReportedWRRSettings.New].
// ReportedWRR is safe for concurrent use.
type ReportedWRR struct {
	smoothRR
	rwrrStart // the cold start (reported_wrr_start.go)

	blackout, expiration, period int64 // nanoseconds
	penalty                      float64

	// next is the unix time (ns) at which the next recompute is due; the
	// caller that moves it on by compare-and-swap recomputes.
	next atomic.Int64

	building atomic.Bool // a recompute is under way (see reweigh)

	slowPicks uint   // picks by the scan; guarded by mu
	version   uint64 // weight and list changes; guarded by mu

	// Where a cycle opened from 0 is entered (enterLocked): derived, the
	// primaries run on weights derived from reports, and wantDerived, the
	// last targetsLocked's weights are; carry, the count of the cycle a
	// recompute replaces, during its reopening. Guarded by mu.
	derived, wantDerived bool
	carry                uint64
	rng                  randSource // the entries' draws: WithRand's source, or the runtime's

	// Scratch for weighLocked, reused so that a recompute that changes
	// nothing allocates nothing; guarded by mu.
	share  []float64
	want   []int64
	sorted []int64
	median []float64 // clampWeights'

	clamped atomic.Uint64 // weights cut to the cap (trust.go)
}

// reportedWRRSpec is ReportedWRR's declaration (see pickerSpec).
var reportedWRRSpec = pickerSpec{
	name:     "ReportedWRR",
	options:  []string{"WithRand", "WithBlackoutPeriod", "WithWeightExpirationPeriod", "WithWeightUpdatePeriod", "WithErrorUtilizationPenalty", "WithSlowStart"},
	settings: "ReportedWRRSettings",
}

// ReportedWRRSettings are ReportedWRR's own settings, gRFC A58's; New
// builds a ReportedWRR with them. The zero value of a field is its
// default, A58's, so ReportedWRRSettings{} is every default. A value out
// of range is ErrInvalidConfig naming the field and the value.
type ReportedWRRSettings struct {
	// BlackoutPeriod is how long ReportedWRR waits, after a peer's first
	// report (or its first after an expiration), before its reported
	// weight counts: A58's blackout_period. Not negative; 0: 10s, so
	// none (the first report counts at once) is written -1.
	BlackoutPeriod time.Duration

	// WeightExpirationPeriod is how old a peer's last report may be
	// before its weight is dropped (A58's weight_expiration_period).
	// Above 0; 0: 3m.
	WeightExpirationPeriod time.Duration

	// WeightUpdatePeriod is how often, at most, the weights are
	// recomputed (A58's weight_update_period); at least 1ms, where A58
	// takes 100ms. 0: 1s.
	WeightUpdatePeriod time.Duration

	// ErrorUtilizationPenalty is the utilization added per unit of error
	// rate (EPS/RPS) when a report is weighed (A58's
	// error_utilization_penalty). Finite, not negative; 0: 1, so no
	// penalty is written -1.
	ErrorUtilizationPenalty float64
}

// New returns a ReportedWRR over peers with the settings s. opts: the
// shared options (see Option).
func (s ReportedWRRSettings) New(peers []*Peer, opts ...Option) (*ReportedWRR, error) {
	return NewReportedWRR(peers, append([]Option{s.Option()}, opts...)...)
}

// Option returns s as an Option, for a ReportedWRR built by name
// (Algorithm.New), as balancerflag's flags and the gRPC configs build
// one: ReportedWRR's constructors apply it where it stands among opts, and
// every other picker refuses it. Name the picker statically with New.
func (s ReportedWRRSettings) Option() Option {
	return ownOption(reportedWRRSpec.settings, func(c *reportedWRRSettings) {
		const n = "ReportedWRRSettings."
		field(&c.blackout, n+"BlackoutPeriod", s.BlackoutPeriod, true)
		field(&c.expiration, n+"WeightExpirationPeriod", s.WeightExpirationPeriod, false)
		field(&c.period, n+"WeightUpdatePeriod", s.WeightUpdatePeriod, false)
		field(&c.penalty, n+"ErrorUtilizationPenalty", s.ErrorUtilizationPenalty, true)
	})
}

// reportedWRRSettings are ReportedWRR's own settings as given.
type reportedWRRSettings struct {
	blackout, expiration, period own[time.Duration]
	penalty                      own[float64]
}

// minWeightUpdatePeriod is the shortest
// ReportedWRRSettings.WeightUpdatePeriod takes. A58 floors it at 100 ms to bound a timer's work; here nothing runs
// without a report or a pick to drive it, a recompute that changes nothing
// is O(n) and allocates nothing, and simulations and fast-changing fleets
// want periods well under A58's, so the floor only keeps the recompute from
// running on every report.
const minWeightUpdatePeriod = time.Millisecond

// WithBlackoutPeriod sets ReportedWRRSettings.BlackoutPeriod to d; 0
// trusts the first report.
//
// Deprecated: use ReportedWRRSettings.BlackoutPeriod (-1 for none).
func WithBlackoutPeriod(d time.Duration) Option {
	return ownOption("WithBlackoutPeriod", func(s *reportedWRRSettings) { s.blackout.give("WithBlackoutPeriod", d) })
}

// WithWeightExpirationPeriod sets
// ReportedWRRSettings.WeightExpirationPeriod to d.
//
// Deprecated: use ReportedWRRSettings.WeightExpirationPeriod.
func WithWeightExpirationPeriod(d time.Duration) Option {
	return ownOption("WithWeightExpirationPeriod", func(s *reportedWRRSettings) { s.expiration.give("WithWeightExpirationPeriod", d) })
}

// WithWeightUpdatePeriod sets ReportedWRRSettings.WeightUpdatePeriod to d.
//
// Deprecated: use ReportedWRRSettings.WeightUpdatePeriod.
func WithWeightUpdatePeriod(d time.Duration) Option {
	return ownOption("WithWeightUpdatePeriod", func(s *reportedWRRSettings) { s.period.give("WithWeightUpdatePeriod", d) })
}

// WithErrorUtilizationPenalty sets
// ReportedWRRSettings.ErrorUtilizationPenalty to x; 0 is no penalty.
//
// Deprecated: use ReportedWRRSettings.ErrorUtilizationPenalty (-1 for
// none).
func WithErrorUtilizationPenalty(x float64) Option {
	return ownOption("WithErrorUtilizationPenalty", func(s *reportedWRRSettings) { s.penalty.give("WithErrorUtilizationPenalty", x) })
}

// check returns an error naming the first setting out of range.
func (s reportedWRRSettings) check() error {
	bad := func(by string, why string) error {
		return fmt.Errorf("balancer: ReportedWRR: %s: %s: %w", by, why, ErrInvalidConfig)
	}
	switch {
	case s.blackout.v < 0:
		return bad(s.blackout.by, "negative")
	case s.expiration.v <= 0:
		return bad(s.expiration.by, "not above 0")
	case s.period.v < minWeightUpdatePeriod:
		return bad(s.period.by, "below "+minWeightUpdatePeriod.String())
	case math.IsNaN(s.penalty.v) || math.IsInf(s.penalty.v, 0) || s.penalty.v < 0:
		return bad(s.penalty.by, "not a finite number ≥ 0")
	}
	return nil
}

// NewReportedWRR returns a ReportedWRR over peers. Until two of its
// primaries' weights count (the blackout, 10 s by default) it picks them
// by its own attempts in flight, as LeastConn, once a peer has reported:
// on 8 servers of speeds 1, 1, 1, 1, 2, 2, 4, 4 at 68% load its p99 over
// the first 30 s is then 1.00 to 1.05 times LeastConn's (simulated, 5
// seeds; 0.94 to 1.05 on loopback HTTP servers, time scaled, 3 seeds),
// where round robin in the blackout made it 29 to 31 times (2.1 to 2.9 on
// loopback), and its shares once the weights count are within 1.1 points
// of capacity. It takes the default settings (ReportedWRRSettings.New sets
// them). opts: the shared options (see Option).
func NewReportedWRR(peers []*Peer, opts ...Option) (*ReportedWRR, error) {
	cfg, err := newConfig(reportedWRRSpec, opts)
	if err != nil {
		return nil, err
	}
	set := reportedWRRSettings{blackout: own[time.Duration]{v: 10 * time.Second}, expiration: own[time.Duration]{v: 3 * time.Minute},
		period: own[time.Duration]{v: time.Second}, penalty: own[float64]{v: 1}}
	applyOwn(&cfg, &set)
	if err := set.check(); err != nil {
		return nil, err
	}
	s := &ReportedWRR{
		blackout:   int64(set.blackout.v),
		expiration: int64(set.expiration.v),
		period:     int64(set.period.v),
		penalty:    set.penalty.v,
	}
	s.rng = newRandSource(cfg)
	s.entry = s.enterLocked
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
					return s.pickedLooking(c.list, r, int(i), p)
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

// pickedLooking ends Pick's fast path for primary i of l, p, on the pick
// that looks at the clock; kept out of Pick so that the call leaves the
// fast path's registers alone.
func (s *ReportedWRR) pickedLooking(l *peerList, r *Request, i int, p *Peer) (*Peer, error) {
	s.due(s.now())
	return fastFirst(l, r, i, p)
}

// pickSlow is Pick's exact scan, under the lock; every checkEvery-th of
// them looks at the clock after it.
func (s *ReportedWRR) pickSlow(r *Request) (*Peer, error) {
	s.mu.Lock()
	s.slowPicks++
	look := s.slowPicks%checkEvery == 0
	var p *Peer
	var err error
	if s.cold {
		p, err = s.pickColdLocked(r)
	} else {
		p, err = s.pickLocked(r)
	}
	s.mu.Unlock()
	if look {
		s.due(s.now())
	}
	return p, err
}

// Done implements Picker.Done. A report in o.Load that gives a usable
// weight is recorded for p, lock-free, and may run a due recompute, or,
// if it begins p's run while no peer has a fresh report, the recompute
// that starts the cold start.
func (s *ReportedWRR) Done(p *Peer, o Outcome) error {
	if err := s.report(p, o); err != nil {
		return err
	}
	rwrrOf(p).replies.observe(float64(o.Latency)) // trust.go
	w, ok := a58Weight(o.Load, s.penalty)         // false for no report: sawReply counts it
	s.sawReply(p, o, ok)                          // sight.go
	if !ok {
		return nil
	}
	now := s.now()
	st := rwrrOf(p)
	// A58's non_empty_since: a report that starts a run (the first, or
	// the first after a gap of the expiration period) restarts the
	// blackout; stored before last, so that no reader pairs the new last
	// with the old run.
	started := false
	if last := st.last.Load(); last == noReport || now-last >= s.expiration {
		st.since.Store(now)
		started = true
	}
	st.weight.Store(math.Float64bits(w))
	st.last.Store(now)
	if started && s.plain.Load() {
		s.reweigh(now) // the cold start begins at once (reported_wrr_start.go)
		return nil
	}
	s.due(now)
	return nil
}

// a58Weight returns A58's weight for l, and false for no report (nil), one
// A58 ignores (utilization or rps 0) or one whose weight is not a positive
// finite number.
func a58Weight(l *ServerLoad, penalty float64) (float64, bool) {
	if l == nil || l.Utilization == 0 || l.RPS == 0 {
		return 0, false
	}
	w := l.RPS / (l.Utilization + l.EPS/l.RPS*penalty)
	return w, w > 0 && !math.IsInf(w, 0) // NaN fails w > 0
}

// due recomputes the weights if one is due at now: the caller whose
// compare-and-swap moves the deadline on does.
func (s *ReportedWRR) due(now int64) {
	next := s.next.Load()
	if now < next || !s.next.CompareAndSwap(next, addClamped(now, s.period)) {
		return
	}
	s.reweigh(now)
}

// addClamped returns t + d, d ≥ 0, saturated at the last representable
// instant.
func addClamped(t, d int64) int64 {
	if t > math.MaxInt64-d {
		return math.MaxInt64
	}
	return t + d
}

// reweigh recomputes the weights from the reports at now in three steps,
// so that picks go on from the old cycle while the new one is built: the
// new weights under the lock; if one changed, their cycle without it (the
// O(W·d) part); both installed under the lock again, unless the peer list
// changed in between (its change weighed the list itself). One runs at a
// time: a due recompute that finds another still building is skipped.
func (s *ReportedWRR) reweigh(now int64) {
	if !s.building.CompareAndSwap(false, true) {
		return
	}
	defer s.building.Store(false)
	s.mu.Lock()
	l, version := s.load(), s.version
	changed := s.targetsLocked(l, now)
	derived := s.wantDerived
	cold := s.coldLocked(l, now)
	var want []int64
	if changed {
		want = slices.Clone(s.want)
	} else {
		s.switchColdLocked(l, cold)
	}
	s.mu.Unlock()
	if !changed {
		return
	}
	c := prebuilt(l, want)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.version != version {
		return
	}
	s.version++
	s.applyLocked(l, want)
	// As a list change leaves them (publishLocked), for the new cycle.
	var served uint64
	if old := s.cycle.Load(); old != nil {
		served = old.ctr.Load() &^ closedBit
	}
	s.closeLocked()
	for _, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			p.currentWeight = 0
		}
	}
	s.built = c // nil: built under the lock once it can open, if it can
	s.derived = derived
	s.markColdLocked(cold)
	s.carry = served
	s.smoothRR.changedLocked(l)
	s.carry = 0
}

// prebuilt returns the cycle of l's primaries at the smooth-step weights
// want (primaries first, as targetsLocked lays them out), or nil if it
// cannot be one. It takes no lock: it reads only the down flags, and a
// change of one is a list change, after which the cycle is dropped.
func prebuilt(l *peerList, want []int64) *cycle {
	if l.single {
		return nil
	}
	weights := make([]int64, len(l.primary))
	var w int64
	for i, p := range l.primary {
		if !p.down.Load() {
			weights[i] = want[i]
			w += want[i]
		}
	}
	if w == 0 || w > maxCycle {
		return nil
	}
	return cycleOf(l, weights, w)
}

// enterLocked returns the position at which a cycle of length w, opened
// from all current weights at 0, is entered: uniformly random over derived
// weights; over configured weights the count of the cycle a recompute
// replaces, modulo w (0 after a list change or a failure's recovery, as in
// nginx). Requires s.mu.
func (s *ReportedWRR) enterLocked(w uint64) uint64 {
	if s.derived {
		return uint64(s.rng.int64N(int64(w)))
	}
	return s.carry % w
}

// changedLocked runs after every peer-list change: the weights are
// recomputed for the new list at once, and the sequence starts over it.
func (s *ReportedWRR) changedLocked(l *peerList) {
	now := s.now()
	s.targetsLocked(l, now)
	s.version++
	s.applyLocked(l, s.want)
	s.derived = s.wantDerived
	s.markColdLocked(s.coldLocked(l, now))
	s.next.Store(addClamped(now, s.period))
	s.smoothRR.changedLocked(l)
}

// targetsLocked sets s.want to the smooth-step weight of every peer of l,
// primaries then backups, from the reports at now, and reports whether
// that of one not down differs from its current one. Requires s.mu.
func (s *ReportedWRR) targetsLocked(l *peerList, now int64) bool {
	n := len(l.primary) + len(l.backup)
	s.want = slices.Grow(s.want[:0], n)[:n]
	s.wantDerived = s.weighLocked(l.primary, now, s.want[:len(l.primary)])
	s.weighLocked(l.backup, now, s.want[len(l.primary):])
	for i, p := range l.primary {
		if !p.down.Load() && s.want[i] != p.smooth {
			return true
		}
	}
	for i, p := range l.backup {
		if !p.down.Load() && s.want[len(l.primary)+i] != p.smooth {
			return true
		}
	}
	return false
}

// applyLocked gives every peer of l its smooth-step weight from want
// (primaries then backups). The effective weight keeps its fraction of the
// weight, so that a failure's cut and its recovery carry over. A down peer
// keeps its weight until it is up, which is a list change. Requires s.mu.
func (s *ReportedWRR) applyLocked(l *peerList, want []int64) {
	for k, peers := range [2][]*Peer{l.primary, l.backup} {
		off := 0
		if k == 1 {
			off = len(l.primary)
		}
		for i, p := range peers {
			if w := want[off+i]; !p.down.Load() && w != p.smooth {
				ew := w
				if p.smooth > 0 && p.effectiveWeight < p.smooth {
					ew = p.effectiveWeight * w / p.smooth // both ≤ 2^30: no overflow
				}
				p.smooth = w
				p.setEffectiveLocked(ew)
			}
			rwrrOf(p).derived.Store(p.smooth)
		}
	}
}

// weighLocked sets want[i] to the smooth-step weight of peers[i], one list,
// from the reports at now (see ReportedWRR in detail), and reports whether
// they are derived from reports (false: the configured weights, with fewer
// than two weighted). Requires s.mu.
func (s *ReportedWRR) weighLocked(peers []*Peer, now int64, want []int64) bool {
	n := len(peers)
	s.share = slices.Grow(s.share[:0], n)[:n]
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
			want[i] = p.weight.Load()
		}
		return false
	}
	if cut := s.trustLocked(peers); cut > 0 { // trust.go
		s.clamped.Add(uint64(cut))
		top = slices.Max(s.share)
	}
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
		if s.scaleLocked(peers, float64(budget)/total, want) || budget <= int64(candidates) {
			return true
		}
	}
}

// scaleLocked sets want to the smooth-step weights of peers for the
// shares in s.share at k weight units per unit of share (0 for a peer not
// a candidate, at least 1 for one), and reports whether the precomputed
// cycle can hold them and be built within reportedBuildWork (see
// buildCycle). Requires s.mu.
func (s *ReportedWRR) scaleLocked(peers []*Peer, k float64, want []int64) bool {
	var w, top int64
	for i, p := range peers {
		v := int64(0)
		if p.weight.Load() > 0 && !p.down.Load() {
			v = max(1, int64(math.Round(k*s.share[i])))
		} else if p.down.Load() {
			v = p.smooth // kept: see weighLocked
		}
		want[i] = v
		if !p.down.Load() {
			w += v
			top = max(top, v)
		}
	}
	if w > maxCycle {
		return false
	}
	if w*min(top, int64(len(peers))) <= reportedBuildWork {
		return true // no more distinct weights than that
	}
	s.sorted = s.sorted[:0]
	for i, p := range peers {
		if !p.down.Load() && want[i] > 0 {
			s.sorted = append(s.sorted, want[i])
		}
	}
	slices.Sort(s.sorted)
	return w*int64(len(slices.Compact(s.sorted))) <= reportedBuildWork
}

// reportedLocked returns p's reported weight at now, 0 if it has none that
// counts: no report, the last one expired, or still in its blackout.
func (s *ReportedWRR) reportedLocked(p *Peer, now int64) float64 {
	st := rwrrOf(p)
	last := st.last.Load()
	if last == noReport || now-last >= s.expiration {
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
	last    atomic.Int64  // unix ns of the last usable report; noReport: none
	since   atomic.Int64  // unix ns at which the current run of reports began
	derived atomic.Int64  // the smooth-step weight of the last recompute

	replies replyLatency // its replies' smoothed latency (trust.go)
}

// noReport is rwrrPeer.last before any report: no clock reading gives it
// (time.Time's UnixNano is undefined there), unlike 0, which is the unix
// epoch an injected clock may read.
const noReport = math.MinInt64

func newRWRRPeer(int64) *peerState {
	st := &rwrrPeer{}
	st.last.Store(noReport)
	st.own = st
	return &st.peerState
}

// derivedWeight is the smooth-step weight ReportedWRR gives the peer, for
// PeerStats.DerivedWeight.
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
