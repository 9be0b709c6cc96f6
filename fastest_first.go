package balancer

import (
	"math"
	"sync/atomic"
	"time"
)

// FastestFirst in detail. It comes from "fastest first" on OpenResty,
// which rewrote each nginx upstream server's weight, effective_weight and
// current_weight from response times and let nginx pick; FastestFirst
// rewrites the effective and current weights of each Peer (see below). Its
// four laws:
//
//  1. The slower a peer, the less traffic it gets. A peer whose latency
//     estimate e is more than the tolerance (DefaultTolerance, 3×,
//     WithTolerance) above the fastest peer's estimate f gets weight ∝
//     configured weight × (tolerance·f/e)^α (DefaultExponent, α = 2,
//     WithExponent), scaled so the best peer has fastestScale (100) and
//     rounded into [floor, 100]; within the tolerance the weight is full,
//     and a slower peer still gets less because its attempts stay in
//     flight longer (below).
//  2. A failing peer is not removed: a failure counts as a latency slow
//     enough to put its weight at the floor (DefaultFloor, 1 of 100,
//     WithFloor), and at least WithFailurePenalty (DefaultFailurePenalty,
//     5 s), so a peer failing fast never looks fast; the penalty takes the
//     place of nginx's cut of the effective weight. The rest of nginx's
//     failure accounting stays as it is: max_fails failures within
//     fail_timeout take the peer out for fail_timeout. Once that window has
//     passed, the peer gets the next attempt whenever it has nothing in
//     flight, nginx's probe, at most one per fail_timeout; a probe that
//     succeeds clears its failures and restarts its estimate from that
//     reply, so a recovered peer is not held back by its penalty.
//  3. Weights are recomputed only when some peer's estimate leaves the band
//     [e/band, e·band] (DefaultBand, 1.25, WithBand) around the estimate
//     its weight was computed from, or for a peer within the tolerance, only
//     when it leaves the tolerance; otherwise no weight moves.
//  4. The fastest peer is always found again: between its replies a peer's
//     estimate decays toward the fastest one's with the decay time
//     (DefaultFastestDecay, 5 s, WithDecay), as nginx's least_time and
//     Finagle decay an idle peer's cost, so a peer that became fast regains
//     its weight within a few decay times even while it gets no traffic. It
//     decays toward the fastest, not toward zero, so a stale estimate can
//     win a peer the top weight and never more. A peer whose weight rests
//     on that decay rather than on its replies, or on the single reply that
//     cleared its failures, is probed one attempt at a time until
//     exploreConfirm (3) replies in a row bear its weight out: a stale
//     estimate costs a probe, not a burst of attempts into a peer still
//     slow.
//
// The latency estimate of a peer is the peak EWMA of its replies (a reply
// slower than the estimate replaces it at once, faster ones are averaged
// in over the decay time), raised to the time the peer has had attempts in
// flight without answering any. That time is a lower bound on the age of
// its oldest attempt in flight, so on a reply still to come: a peer that
// stalls loses weight as its silence grows, where an estimate built only
// from completed attempts is blind for a whole round trip. A peer not yet
// measured counts as fast as the fastest.
//
// The pick weighs in-flight attempts as nginx's least_conn does, with one
// more: the attempt goes to the eligible peer with the least (in flight +
// 1)/weight, the expected delay of the shortest-expected-delay rule, which
// is also nginx's least_time cost with the latency folded into the weight.
// Loads are compared by cross multiplication; peers tied at the least load
// go through nginx's smooth round-robin step among themselves (each adds
// its effective weight to its current weight, the largest wins, the first
// on a tie, and gives back the total). Idle peers of equal weight are thus
// served in nginx's smooth order, while among unequal ones the heaviest
// takes each attempt until its in-flight count tips the balance: fastest
// first. Picking by weight alone, as the OpenResty original did, ignores
// queues and loses at the tail to the power of two choices: with the sim
// package's identical backends, smooth round-robin had a higher p99 than
// P2CPeakEWMA over static weights (the README's uniform scenario) and, by
// more, over latency-derived ones; counting attempts in flight is what lets
// FastestFirst beat it.
//
// FastestFirst writes the weight it derives into each peer's effective
// weight, the field where nginx keeps the weight that failures lower, and
// picks among tied peers with nginx's current weights: Peer.State reports
// the derived weight as EffectiveWeight, between the floor and 100 (0 for
// a peer configured with weight 0, never chosen while another peer has a
// weight), so unlike nginx's it may exceed the configured weight.
// Peer.Weight stays the configured weight: SetWeight changes it, and Add
// and SetWeight check the sum as for any picker.
//
// Eligibility, failures, backup and down peers, max_conns, per-request
// tries and the single-server rule follow nginx's round-robin module, as in
// SmoothWRR.
//
// Cost: Pick is O(n) in the number of peers under the picker's lock (one
// pass, two when peers tie), plus O(1) to check the bands of the chosen
// peer and of one other peer, taken in turn so that a peer nobody picks is
// still checked every n picks; Done is O(1) under the lock. When an
// estimate has left its band, that Pick or Done recomputes the weights of
// the peer's list in O(n). Neither allocates.

// FastestFirst derives nginx weights from measured latency, after
// OpenResty's "fastest first", and sends each attempt to the eligible peer
// with the least (in flight + 1)/weight, nginx's smooth round-robin
// breaking ties. Its four laws: a peer slower than the fastest by more
// than [WithTolerance] gets less weight, the slower the less; a failing
// peer drops to the floor weight ([WithFloor]), and out after max_fails as
// in nginx; weights move only when an estimate leaves its band
// ([WithBand]); an idle peer's estimate decays toward the fastest's
// ([WithDecay]), so the fastest peer is always found again. Choose it for
// latency-sensitive traffic when nginx's failure model and smooth order
// matter. A pick is O(n) under a lock. The zero value is not usable; use
// [NewFastestFirst]. FastestFirst is safe for concurrent use.
type FastestFirst struct {
	peerSet

	// Immutable after construction.
	tau      float64 // decay time, ns
	penalty  float64 // failure penalty, ns
	band     float64
	exponent float64
	floor    int64
	tol      float64

	// Written under mu.
	fastest    [2]atomic.Uint64 // math.Float64bits of the fastest estimate (ns) of the primary and backup lists at their last recompute
	cursor     int              // the peer the next Pick checks besides its own
	recomputes uint64           // weight recomputations, for tests

	// The sampled mode (more than ffExactMax peers): the draw table over
	// the derived weights, rebuilt by every recompute, and the peers with
	// failures on record, rebuilt when one starts or stops failing; nil in
	// the exact mode.
	lockFree bool // guarded by mu
	draw     atomic.Pointer[ffTable]
}

var _ Picker = (*FastestFirst)(nil)

// How FastestFirst's defaults were chosen. They were tuned with the sim
// package's scenarios (heterogeneous servers, brownout, blackholes, jitter
// and herd, several seeds each): there the p99 stayed within its
// confidence interval over a wide range of decay times, exponents and
// bands around the defaults, while a tighter tolerance, or none, cost a
// clear share of the p99.
//
// The decay time is half the 10 s of Finagle, Linkerd and Envoy, which only
// rank peers, because FastestFirst's estimates must also fall back for a
// recovered peer to be readmitted, which takes a few decay times.
//
// The band: Finagle's aperture acts outside the load band [0.875, 1.125];
// with exponent 2 a factor of 1.25 moves a weight by at least 1.25² ≈ 1.56×.
//
// The exponent 2 follows the square-root rule, the best static split over
// M/M/1 servers, under which the rate sent to a server grows about as the
// square of 1/latency.
//
// The tolerance: a peak EWMA of exponential service times is dominated by
// its recent maximum, so the estimates of identical peers differ by a small
// factor, up to about the default tolerance; within that, the in-flight
// counts balance load better than noisy weights do.

// Defaults of FastestFirst's tuning.
const (
	// DefaultFastestDecay is FastestFirst's decay time, half the 10 s of
	// Finagle, Linkerd and Envoy: its estimates must also fall back for a
	// recovered peer to be readmitted.
	DefaultFastestDecay = 5 * time.Second

	// DefaultBand is the hysteresis of the weights: they are recomputed when
	// a peer's estimate moves by more than this factor from the one its
	// weight was set for.
	DefaultBand = 1.25

	// DefaultExponent is α in weight ∝ (tolerance·fastest/estimate)^α: 2,
	// the square-root rule, the best static split over M/M/1 servers.
	DefaultExponent = 2.0

	// DefaultFloor is the weight, out of 100 for the best peer, below which
	// no peer falls: 1, the OpenResty original's floor.
	DefaultFloor = 1

	// DefaultTolerance is how many times slower than the fastest peer a
	// peer may look before its weight drops: 3. Within it, the in-flight
	// counts balance load better than noisy weights do.
	DefaultTolerance = 3.0
)

// fastestScale is the weight of the best peer: derived weights are integers
// in [floor, fastestScale], 1% resolution, as in the OpenResty original.
const fastestScale = 100

// exploreConfirm is how many replies in a row, each within the band of
// the estimate its weight assumed, end the probing of a peer whose weight
// rested on the decay of its estimate, or on a single reply after its
// failures: one reply can be lucky (a server ten times slower, with
// exponential service times, answers within 3× the fast ones' time one
// time in four), three in a row much more rarely.
const exploreConfirm = 3

// maxExponent bounds WithExponent: beyond it the weights are a switch that
// no band keeps from flapping.
const maxExponent = 8

// NewFastestFirst returns a FastestFirst over peers. It accepts WithClock,
// WithDecay, WithFailurePenalty, WithBand, WithExponent, WithFloor and
// WithTolerance.
func NewFastestFirst(peers []*Peer, opts ...Option) (*FastestFirst, error) {
	cfg, err := newConfig("FastestFirst", optClock|fastestOptions, opts)
	if err != nil {
		return nil, err
	}
	c := &cfg
	if err := c.checkLatency("FastestFirst", DefaultFastestDecay); err != nil {
		return nil, err
	}
	if err := c.checkFastest(); err != nil {
		return nil, err
	}
	f := &FastestFirst{
		tau:      float64(c.decay),
		penalty:  float64(c.penalty),
		band:     c.band,
		exponent: c.exponent,
		floor:    int64(c.floor),
		tol:      c.tol,
	}
	if err := f.init(peers, cfg, f.changedLocked); err != nil {
		return nil, err
	}
	return f, nil
}

// Pick returns the eligible peer with the least expected delay, (in flight
// + 1)/weight, nginx's smooth round-robin breaking ties, and counts the
// attempt in flight until Done. A peer whose fail window has passed and
// has nothing in flight is probed first. Pick is O(n) under the picker's
// lock, and O(n) more when the chosen peer's estimate has left its band.
func (f *FastestFirst) Pick(r *Request) (*Peer, error) {
	if t := f.draw.Load(); t != nil {
		return f.pickSampled(t, r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.load()
	now := f.now()
	p, err := pickFrame(l, r, func(peers []*Peer, _ bool) int {
		return scanFastest(peers, r, now)
	})
	if err != nil {
		return nil, err
	}
	if l.single && p.conns.Load() == 1 {
		p.lat.since.Store(now) // as in scanFastest, for the frame's single peer
	}
	f.reweighLocked(l, p, now, false)
	// Peers that are not picked must be checked too, or a silent stall or
	// an idle peer's decaying estimate would never move its weight: one
	// more peer per pick, in turn, so each is checked every n picks.
	if all := len(l.primary) + len(l.backup); all > 1 {
		f.cursor = (f.cursor + 1) % all
		q := f.cursor
		if q < len(l.primary) {
			f.reweighLocked(l, l.primary[q], now, false)
		} else {
			f.reweighLocked(l, l.backup[q-len(l.primary)], now, false)
		}
	}
	return p, nil
}

// scanFastest chooses among one list's eligible peers: a failed peer due
// for its probe if there is one, else the least loaded, ties going through
// nginx's smooth round-robin step. Requires the owner's lock.
//
// Done lowers in-flight counts without the lock, so each count is read once
// per comparison and the tied peers are matched against the winner's count
// as first read; a count that drops meanwhile can only make a peer look
// busier than it is for this one pick.
func scanFastest(peers []*Peer, r *Request, now int64) int {
	if i := scanFastestGated(peers, r, now, true); i >= 0 {
		return i
	}
	// Every eligible peer is being explored and has its attempt out: the
	// one-at-a-time rule is a preference, and a healthy peer must not be
	// refused, so the attempt goes to the least loaded of them.
	return scanFastestGated(peers, r, now, false)
}

// scanFastestGated is scanFastest's pass; with gate set it skips the peers
// being explored that have their one attempt out.
func scanFastestGated(peers []*Peer, r *Request, now int64, gate bool) int {
	clk := clockAt(now)
	var least, probe *Peer
	var at, probeAt int // least's position in peers
	var conns, w int64  // least's in-flight count + 1 and weight, as read
	var many bool       // another peer ties with least
	for i, p := range peers {
		if r.isTried(i) || !p.eligible(&clk) || gate && p.lat.exploring.Load() && p.conns.Load() != 0 {
			continue // a peer being probed has its one attempt out
		}
		pc, pw := p.conns.Load()+1, p.effectiveWeight
		// nginx probes a failed peer on its first selection after the
		// window; a least-delay pick would hardly ever select a peer at
		// the floor, so the probe is made explicit. The oldest goes first.
		// A peer of weight 0 is never chosen while another has weight,
		// probe or not.
		if p.fails.Load() != 0 && p.weight.Load() != 0 && pc == 1 && now-p.checked.Load() > p.failTimeout.Load() &&
			(probe == nil || p.checked.Load() < probe.checked.Load()) {
			probe, probeAt = p, i
		}
		if least == nil {
			least, at, conns, w, many = p, i, pc, pw, false
			continue
		}
		switch c := compareLoad(pc, pw, conns, w); {
		case c < 0:
			least, at, conns, w, many = p, i, pc, pw, false
		case c == 0:
			many = true
		}
	}
	if probe != nil {
		probe.probeLocked(now)
		takeFastest(probe, now)
		return probeAt
	}
	if least == nil {
		return -1
	}
	best, bestAt := least, at
	if many {
		var total int64
		for i := at; i < len(peers); i++ {
			p := peers[i]
			if r.isTried(i) || !p.eligible(&clk) || gate && p.lat.exploring.Load() && p.conns.Load() != 0 {
				continue
			}
			if p != least && compareLoad(p.conns.Load()+1, p.effectiveWeight, conns, w) != 0 {
				continue
			}
			// nginx's step, except that the effective weight, which
			// FastestFirst derives, does not climb back to the configured
			// weight.
			p.currentWeight += p.effectiveWeight
			total += p.effectiveWeight
			if p.currentWeight > best.currentWeight {
				best, bestAt = p, i
			}
		}
		best.currentWeight -= total
	}
	best.probeLocked(now)
	takeFastest(best, now)
	return bestAt
}

// takeFastest counts an attempt on p in flight; a peer idle until now starts
// its silence now. Requires the owner's lock.
func takeFastest(p *Peer, now int64) {
	if p.conns.Add(1) == 1 {
		p.lat.since.Store(now)
	}
}

// Done reports the outcome of an attempt on p: it ends the attempt, applies
// nginx's failure accounting and feeds the latency (for a failure, at least
// the penalty) into p's estimate. O(1) under the picker's lock, and O(n)
// when the estimate leaves its band.
func (f *FastestFirst) Done(p *Peer, o Outcome) error {
	if err := f.finish(p, o); err != nil {
		return err
	}
	if f.draw.Load() != nil && f.doneSampled(p, o) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.owner.Load() != &f.peerSet {
		return nil // removed while in flight
	}
	l := f.load()
	now := f.now()
	failing := p.fails.Load() != 0
	first := !p.lat.measured.Load()
	// nginx lowers the effective weight on a failure; here the penalty
	// latency does that, through the derived weight.
	ew := p.effectiveWeight
	f.doneLocked(l, p, o)
	p.effectiveWeight = ew
	cleared := failing && p.fails.Load() == 0
	if f.lockFree && failing != (p.fails.Load() != 0) {
		f.publishFailingLocked(l)
	}
	if o.Abandoned {
		// No reply: the time the caller waited is a lower bound on the
		// peer's latency, which can only raise its estimate; the silence
		// of the peer's other attempts goes on. An abandoned probe that
		// cleared nginx's failure count confirms nothing.
		p.lat.abandon(now, float64(o.Latency), f.tau)
		if p.lat.abandons.Load() >= exploreConfirm {
			// As many attempts abandoned in a row as replies it takes to
			// confirm a weight: the peer is not answering. Its weight
			// goes to the floor, as for a failure, but nginx's failure
			// count is left alone.
			p.lat.atLeast(now, f.floorEstimate(p), f.tau)
		}
		if p.lat.exploring.Load() || cleared {
			p.lat.exploring.Store(true)
			p.lat.confirmed.Store(0)
		}
		if p.conns.Load() == 0 {
			p.lat.since.Store(now)
		}
		f.reweighLocked(l, p, now, first || cleared)
		return nil
	}
	if p.lat.exploring.Load() {
		// A reply within the band of what the peer's weight assumed
		// confirms it; exploreConfirm of them in a row end the probing.
		if !o.Failed && float64(o.Latency) <= f.estimateLocked(p, f.fastestOf(p), now)*f.band {
			p.lat.confirmed.Add(1)
		} else {
			p.lat.confirmed.Store(0)
		}
		p.lat.exploring.Store(p.lat.confirmed.Load() < exploreConfirm)
	}
	p.lat.answered()
	if o.Failed {
		p.lat.observe(now, max(float64(o.Latency), f.penalty, f.floorEstimate(p)), f.tau)
	} else if cleared {
		p.lat.restartLocked(now, float64(o.Latency))
		p.lat.exploring.Store(true)
		p.lat.confirmed.Store(1)
	} else {
		p.lat.observe(now, float64(o.Latency), f.tau)
	}
	p.lat.since.Store(now) // an answer ends the silence
	f.reweighLocked(l, p, now, first || cleared)
	return nil
}

// floorEstimate returns an estimate at which p's weight is surely at the
// floor: tolerance × fastest × (100/floor)^(1/α), widened by the band so
// that the next recompute keeps it there; 0 while nothing is measured.
func (f *FastestFirst) floorEstimate(p *Peer) float64 {
	m := f.fastestOf(p)
	if m <= 0 || f.exponent == 0 {
		return 0
	}
	return f.tol * m * math.Pow(fastestScale/float64(f.floor), 1/f.exponent) * f.band
}

// listOf returns the index of p's list in FastestFirst.fastest.
func listOf(p *Peer) int {
	if p.backup.Load() {
		return 1
	}
	return 0
}

// estimateLocked returns p's latency estimate (ns) at now, m being the
// fastest estimate of its list: the peak EWMA decayed toward m over the
// time since its last reply (law 4), or m if it has none, raised to the
// time it has had attempts in flight without an answer. Requires f.mu.
func (f *FastestFirst) estimateLocked(p *Peer, m float64, now int64) float64 {
	e := m
	if p.lat.measured.Load() {
		e = p.lat.estimate()
		if e > m {
			e = m + (e-m)*decayWeight(now-p.lat.stamp.Load(), f.tau)
		}
	}
	if p.conns.Load() > 0 {
		e = max(e, float64(now-p.lat.since.Load()))
	}
	return e
}

// reweighLocked recomputes the weights of p's list when p's estimate has left
// its band, or when force is set. Requires f.mu.
func (f *FastestFirst) reweighLocked(l *peerList, p *Peer, now int64, force bool) {
	if l.single {
		return // a single server is picked whatever its weight
	}
	if !force && p.lat.inBand(f.estimateLocked(p, f.fastestOf(p), now)) {
		return
	}
	if p.backup.Load() {
		f.recomputeLocked(l.backup, 1, now)
	} else {
		f.recomputeLocked(l.primary, 0, now)
	}
}

// recomputeLocked derives the weights of one list (which: 0 primary, 1
// backup) from the estimates at now and sets the bands they hold for.
// Requires f.mu.
//
// The fastest estimate m is the least raw estimate (peak EWMA and silence,
// without the decay toward m, which would be circular) among the measured
// peers that are up and have a configured weight. Peer i then gets
//
//	s_i = base_i × min(1, tol·m/e_i)^α,  weight_i = round(100 · s_i / max s)
//
// clamped to [floor, 100]. Until some peer is measured the weights follow
// the configured ones alone; a peer's first reply forces a recompute.
func (f *FastestFirst) recomputeLocked(peers []*Peer, which int, now int64) {
	f.recomputes++
	if f.lockFree {
		defer f.publishDrawLocked(f.load())
	}
	m, measured := math.Inf(1), false
	for _, p := range peers {
		if p.down.Load() || p.weight.Load() == 0 || !p.lat.measured.Load() {
			continue
		}
		raw := p.lat.estimate()
		if p.conns.Load() > 0 {
			raw = max(raw, float64(now-p.lat.since.Load()))
		}
		m, measured = min(m, raw), true
	}
	if !measured {
		m = 0
	}
	f.fastest[which].Store(math.Float64bits(m))

	var top float64
	for _, p := range peers {
		p.lat.est, p.lat.share = 0, 0
		if p.down.Load() || p.weight.Load() == 0 {
			continue
		}
		if measured {
			p.lat.est = f.estimateLocked(p, m, now)
		}
		p.lat.share = float64(p.weight.Load()) * f.ratio(m, p.lat.est)
		if measured && p.lat.measured.Load() && p.lat.estimate() > p.lat.est*f.band {
			// The weight rests on the decay, not on replies.
			p.lat.exploring.Store(true)
			p.lat.confirmed.Store(0)
		}
		top = max(top, p.lat.share)
	}
	for _, p := range peers {
		if p.down.Load() || p.weight.Load() == 0 {
			// A down peer is never picked; a weightless one stays at 0.
			p.lat.setBand(0, math.Inf(1))
			if p.weight.Load() == 0 {
				p.effectiveWeight = 0
			}
			continue
		}
		w := int64(math.Round(fastestScale * p.lat.share / top))
		w = min(max(w, f.floor), fastestScale)
		f.setBandLocked(p, m, top, w, measured)
		p.effectiveWeight = w
	}
	f.reweighed(peers, now)
}

// ratio returns min(1, tol·m/e)^α.
func (f *FastestFirst) ratio(m, e float64) float64 {
	m *= f.tol
	if e <= m {
		return 1
	}
	x := m / e
	if f.exponent == 2 {
		return x * x
	}
	return math.Pow(x, f.exponent)
}

// setBandLocked sets the band of estimates p's new weight w holds for:
// [e/band, e·band] around its estimate e, except where a wider band
// changes no weight. Within the tolerance the weight is full, so the band
// runs from m/band, where p would become the fastest, to the tolerance
// itself: the weight is continuous there, and once past it the band
// around the new estimate keeps it from crossing back for noise. At the
// floor the weight cannot go lower, so the band is open above, and it
// reaches down to where the weight would leave the floor. Requires f.mu.
func (f *FastestFirst) setBandLocked(p *Peer, m, top float64, w int64, measured bool) {
	e := p.lat.est
	switch {
	case !measured:
		p.lat.setBand(0, math.Inf(1))
	case e > m && e <= f.tol*m:
		p.lat.setBand(m/f.band, f.tol*m)
	case w == f.floor && f.exponent > 0 && e > f.tol*m:
		// The weight leaves the floor when 100·base·(tol·m/e)^α/top
		// reaches floor + ½.
		up := f.tol * m * math.Pow(fastestScale*float64(p.weight.Load())/(top*(float64(f.floor)+0.5)), 1/f.exponent)
		p.lat.setBand(min(e, up)/f.band, math.Inf(1))
	default:
		p.lat.setBand(e/f.band, e*f.band)
	}
}

// changedLocked starts the peers new to the picker unmeasured and
// recomputes every weight. Publishing has set every current weight to 0.
func (f *FastestFirst) changedLocked(l *peerList) {
	now := f.now()
	f.lockFree = len(l.primary)+len(l.backup) > ffExactMax && !l.single
	f.recomputeLocked(l.primary, 0, now)
	f.recomputeLocked(l.backup, 1, now)
	if f.lockFree {
		f.publishDrawLocked(l)
	} else {
		f.draw.Store(nil)
	}
}

// fastestOf returns the fastest estimate of p's list at its last
// recompute.
func (f *FastestFirst) fastestOf(p *Peer) float64 {
	return math.Float64frombits(f.fastest[listOf(p)].Load())
}
