package balancer

import (
	"fmt"
	"math"
	"sync/atomic"

	"github.com/lbgo/balancer/internal/defaults"
)

// FastestFirst derives weights from measured latency, after OpenResty's
// "fastest first", and sends each attempt to the eligible peer with the
// least (in flight + 1)/derived weight, nginx's smooth round-robin breaking
// ties. Its four laws: a peer slower than the fastest by more than
// [FastestFirstSettings.Tolerance] gets less weight, the slower the less;
// a failing peer drops to the floor weight ([FastestFirstSettings.Floor]),
// and out after max_fails as in nginx; weights move only when an estimate
// leaves its band ([FastestFirstSettings.Band]);
// an idle peer's estimate decays toward the fastest's ([WithDecay]; default
// 5 s), so the fastest peer is always found again. Choose it for latency-sensitive
// traffic when nginx's failure model and smooth order matter. With
// [WithReportedLoad], in flight takes in the other clients' attempts that
// peers' servers report.
//
// The derived weight is the configured weight times a latency factor,
// min(1, tolerance·fastest/estimate)^exponent, scaled to 100 for the
// largest ([PeerStats].DerivedWeight; EffectiveWeight stays nginx's,
// lowered by a failure, though above 32 peers it climbs back one step per
// report on the peer rather than per pick, as no pick there takes the
// lock). It
// is not a share of requests: a pick takes the least (in flight +
// 1)/weight, so the weights split only the attempts in flight together.
// One request at a time finds nothing in flight and goes to the peer of
// the largest derived weight every time, or in smooth turn among peers tied
// for it (weights 5:3:1 at equal latencies: all to the first); under
// concurrent load the attempts in flight split as the derived weights (90
// held at once: 50/30/10).
//
// Cost: up to 32 peers a pick is an exact O(n) scan under a lock; above,
// it takes the least loaded of three peers drawn by derived weight, O(1)
// and lock-free, and a report is O(1) amortized whatever the latencies:
// lock-free while its estimate stays in its band, otherwise one peer
// reweighed under the lock, with the O(n) recompute of every weight
// deferred to one in n such reports. The zero value is not usable; use
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
	rand     randSource   // the sampled mode's draws
	rep      reportedLoad // WithReportedLoad

	// Written under mu.
	fastest    [2]atomic.Uint64 // math.Float64bits of the fastest estimate (ns) of the primary and backup lists at their last recompute
	known      [2]atomic.Bool   // some peer of the list was measured at its last recompute
	top        [2]float64       // the largest unscaled weight of each list at its last recompute
	pending    [2]atomic.Int64  // single-peer reweighs of each list since its last recompute; written under mu, read lock-free by refresh
	cursor     int              // the peer the next Pick checks besides its own
	recomputes uint64           // weight recomputations, for tests
	work       uint64           // peers visited by recomputes and table rebuilds, for tests

	// The sampled mode (more than ffExactMax peers): the draw table over
	// the derived weights, rebuilt by every recompute, and the peers with
	// failures on record, rebuilt when one starts or stops failing; nil in
	// the exact mode.
	lockFree bool // guarded by mu
	draw     atomic.Pointer[ffTable]
}

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

// maxExponent bounds FastestFirstSettings.Exponent: beyond it the weights are a switch that
// no band keeps from flapping.
const maxExponent = 8

// fastestFirstSpec is FastestFirst's declaration (see pickerSpec).
var fastestFirstSpec = pickerSpec{
	name: "FastestFirst",
	options: []string{"WithRand", "WithDecay", "WithFailurePenalty",
		"WithBand", "WithExponent", "WithFloor", "WithTolerance", "WithReportedLoad", "WithSlowStart"},
	latency:  true,
	settings: "FastestFirstSettings",
}

// NewFastestFirst returns a FastestFirst over peers with the default
// settings (FastestFirstSettings.New sets them). opts: the shared options
// (see Option); WithRand draws the sampled mode's peers, above 32.
func NewFastestFirst(peers []*Peer, opts ...Option) (*FastestFirst, error) {
	cfg, err := newConfig(fastestFirstSpec, opts)
	if err != nil {
		return nil, err
	}
	lat, err := latencyOptions(fastestFirstSpec.name, &cfg, defaults.FastestDecay)
	if err != nil {
		return nil, err
	}
	c, err := fastestOptions(&cfg)
	if err != nil {
		return nil, err
	}
	rep, err := reportedOptions(fastestFirstSpec.name, &cfg)
	if err != nil {
		return nil, err
	}
	f := &FastestFirst{
		tau:      float64(lat.decay),
		penalty:  float64(lat.penalty),
		band:     c.band.v,
		exponent: c.exponent.v,
		floor:    int64(c.floor.v),
		tol:      c.tol.v,
		rand:     newRandSource(cfg),
		rep:      rep,
	}
	f.fresh = newFFPeer
	if err := f.init(peers, cfg, f.changedLocked); err != nil {
		return nil, err
	}
	return f, nil
}

// Pick returns the eligible peer with the least expected delay, (in flight
// + 1)/weight, nginx's smooth round-robin breaking ties. A peer whose fail
// window has passed and has nothing in flight is probed first. Up to 32
// peers Pick is O(n) under the picker's lock, and O(n) more when the chosen peer's estimate has left
// its band; above, it chooses among three peers drawn by derived weight,
// O(1) and lock-free (the ties then go to the first drawn).
func (f *FastestFirst) Pick(r *Request) (*Peer, error) {
	if t := f.draw.Load(); t != nil {
		return f.pickSampled(t, r)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	l := f.load()
	now := f.now()
	clk := clockAt(now)
	var ws *slowStart // non-nil while a peer may be warming (guard_slowstart.go)
	if !f.slow.idleLocked() && f.scaleLocked(l, &clk, slowScale) {
		ws = &f.slow
	}
	p, err := pickFrame(l, r, func(peers []*Peer, _ bool) int {
		return scanFastest(peers, r, now, f.rep, ws)
	})
	if err != nil {
		return nil, err
	}
	if l.single && p.inFlight() == 1 {
		ffOf(p).since.Store(now) // as in scanFastest, for the frame's single peer
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
// busier than it is for this one pick. With rep on, in flight is the
// reported load (reported_load.go), read the same way.
//
// With ws set (a peer may be warming), every derived weight is in
// slowScale units, scaled by the peer's slow-start factor, in the delays
// compared and in the step among ties.
func scanFastest(peers []*Peer, r *Request, now int64, rep reportedLoad, ws *slowStart) int {
	if i := scanFastestGated(peers, r, now, true, rep, ws); i >= 0 {
		return i
	}
	// Every eligible peer is being explored and has its attempt out: the
	// one-at-a-time rule is a preference, and a healthy peer must not be
	// refused, so the attempt goes to the least loaded of them.
	return scanFastestGated(peers, r, now, false, rep, ws)
}

// scanFastestGated is scanFastest's pass; with gate set it skips the peers
// being explored that have their one attempt out.
func scanFastestGated(peers []*Peer, r *Request, now int64, gate bool, rep reportedLoad, ws *slowStart) int {
	clk := clockAt(now)
	var least, probe *Peer
	var at, probeAt int // least's position in peers
	var conns, w int64  // least's in-flight count + 1 and weight, as read
	var load float64    // least's reported load + 1, with rep on
	var many bool       // another peer ties with least
	for i, p := range peers {
		if r.isTried(i) || !p.eligible(&clk) {
			continue
		}
		st := ffOf(p)
		if gate {
			recoverEffective(p) // once a pick, as nginx's scan
			if st.exploring.Load() && p.inFlight() != 0 {
				continue // a peer being probed has its one attempt out
			}
		}
		pc, pw := p.inFlight()+1, st.derived.Load()
		if ws != nil {
			pw = ws.scaledWeight(p, pw, now)
		}
		var pl float64
		if rep.on() {
			pl = rep.load(&st.srv, pc-1, &clk) + 1
		}
		// nginx probes a failed peer on its first selection after the
		// window; a least-delay pick would hardly ever select a peer at
		// the floor, so the probe is made explicit. The oldest goes first.
		// A peer of weight 0 is never chosen while another has weight,
		// probe or not.
		if p.fails.Load() != 0 && p.weight.Load() != 0 && pc == 1 && now-p.checked.Load() > p.window() &&
			(probe == nil || p.checked.Load() < probe.checked.Load()) {
			probe, probeAt = p, i
		}
		if least == nil {
			least, at, conns, w, load, many = p, i, pc, pw, pl, false
			continue
		}
		switch c := rep.compare(pc, pl, pw, conns, load, w); {
		case c < 0:
			least, at, conns, w, load, many = p, i, pc, pw, pl, false
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
			st := ffOf(p)
			if r.isTried(i) || !p.eligible(&clk) || gate && st.exploring.Load() && p.inFlight() != 0 {
				continue
			}
			d := st.derived.Load()
			if ws != nil {
				d = ws.scaledWeight(p, d, now)
			}
			if p != least {
				pc := p.inFlight() + 1
				var pl float64
				if rep.on() {
					pl = rep.load(&st.srv, pc-1, &clk) + 1
				}
				if rep.compare(pc, pl, d, conns, load, w) != 0 {
					continue
				}
			}
			// nginx's step over the derived weights.
			p.currentWeight += d
			total += d
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

// recoverEffective moves p's effective weight, nginx's, which a failure
// lowers and FastestFirst reports but does not balance by, one step back
// toward its weight, as nginx's scan does for each peer it considers.
// Requires the owner's lock.
func recoverEffective(p *Peer) {
	if ew := p.effectiveWeight; ew < p.weight.Load() {
		p.setEffectiveLocked(ew + 1)
	}
}

// takeFastest counts an attempt on p in flight; a peer idle until now starts
// its silence now. Requires the owner's lock.
func takeFastest(p *Peer, now int64) {
	if p.pick() == 1 {
		ffOf(p).since.Store(now)
	}
}

// Done also feeds the latency (for a failure, at least the penalty; for an
// abandoned attempt, a lower bound) into p's estimate. Up to 32 peers it
// takes the picker's lock, and recomputes every weight,
// O(n), when an estimate leaves its band. Above, a success is lock-free
// while the estimate stays in its band; failures, abandoned attempts and
// estimates out of their band take the lock for O(1), and one such report
// in n, or one report in n at random, recomputes every weight: O(1)
// amortized, but for the O(n) rebuild of the list of failing peers when a
// peer starts or stops failing.
func (f *FastestFirst) Done(p *Peer, o Outcome) error {
	if err := f.finish(p, o); err != nil {
		return err
	}
	if f.rep.on() && o.Load != nil && p.owner.Load() == &f.peerSet {
		ffOf(p).srv.note(o.Load, p.inFlight(), f.now())
	}
	if f.rep.on() {
		f.sawReply(p, o, reportsInFlight(o.Load)) // sight.go
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
	st := ffOf(p)
	first := !st.lat.measured.Load()
	// nginx lowers the effective weight on a failure, and so does
	// doneLocked; the derived weight drops through the penalty latency.
	f.doneLocked(l, p, o)
	if f.lockFree && !o.Failed {
		recoverEffective(p) // the sampled pick takes no lock: the report does it
	}
	// Connected cleared the failures; read before written, so that the
	// common report, with no Connected before it, writes nothing here.
	connected := st.connected.Load()
	if connected {
		st.connected.Store(false)
	}
	cleared := failing && p.fails.Load() == 0 || connected
	if f.lockFree && failing != (p.fails.Load() != 0) {
		f.publishFailingLocked(l)
	}
	if o.Abandoned {
		// No reply: the time the caller waited is a lower bound on the
		// peer's latency, which can only raise its estimate; the silence
		// of the peer's other attempts goes on. An abandoned probe that
		// cleared nginx's failure count confirms nothing. A loser to
		// another attempt of its request is a lower bound on its own
		// and no part of a run (latencyStats.superseded).
		if o.Superseded {
			st.lat.superseded(now, float64(o.Latency), f.tau)
		} else {
			st.lat.abandon(now, float64(o.Latency), f.tau)
		}
		if !o.Superseded && st.lat.abandons.Load() >= exploreConfirm {
			// As many attempts abandoned in a row as replies it takes to
			// confirm a weight: the peer is not answering. Its weight
			// goes to the floor, as for a failure, but nginx's failure
			// count is left alone.
			st.lat.atLeast(now, f.floorEstimate(p), f.tau)
		}
		if st.exploring.Load() || cleared {
			st.exploring.Store(true)
			st.confirmed.Store(0)
		}
		if p.inFlight() == 0 {
			st.since.Store(now)
		}
		f.reweighLocked(l, p, now, first || cleared)
		return nil
	}
	if st.exploring.Load() {
		// A reply within the band of what the peer's weight assumed
		// confirms it; exploreConfirm of them in a row end the probing.
		if !o.Failed && float64(o.Latency) <= f.estimateLocked(p, f.fastestOf(p), now)*f.band {
			st.confirmed.Add(1)
		} else {
			st.confirmed.Store(0)
		}
		st.exploring.Store(st.confirmed.Load() < exploreConfirm)
	}
	st.lat.answered()
	if o.Failed {
		st.lat.observe(now, max(float64(o.Latency), f.penalty, f.floorEstimate(p)), f.tau)
	} else if cleared {
		st.lat.restartLocked(now, float64(o.Latency))
		st.exploring.Store(true)
		st.confirmed.Store(1)
	} else {
		st.lat.observe(now, float64(o.Latency), f.tau)
	}
	st.since.Store(now) // an answer ends the silence
	f.reweighLocked(l, p, now, first || cleared)
	return nil
}

// changedLocked recomputes every weight; the peers new to the picker hold
// fresh, unmeasured states (newFFPeer). Publishing has set every current weight to 0.
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

// ffPeer is FastestFirst's per-peer state (peerstate.go). The peak EWMA
// is lock-free (see latencyStats); the rest is written under the picker's
// lock, except that its lock-free picks and reports (above ffExactMax
// peers) write since and read the rest; est and share are a recompute's
// scratch, under the lock.
type ffPeer struct {
	peerState
	lat       latencyStats
	since     atomic.Int64  // unix ns: last completion, or when the peer last became busy
	lo, hi    atomic.Uint64 // math.Float64bits of the band (ns) the current weight was set for
	exploring atomic.Bool   // probed one attempt at a time: its weight is not borne out by replies
	confirmed atomic.Int64  // replies in a row that bore out the weight while exploring
	connected atomic.Bool   // failures cleared by Connected, which Done then treats as its own
	derived   atomic.Int64  // the weight derived from latency, out of fastestScale; read by Peer.State
	est       float64       // scratch of a recompute: the estimate (ns)
	share     float64       // scratch of a recompute: the unscaled weight
	srv       serverCount   // WithReportedLoad's reports
}

func newFFPeer(int64) *peerState {
	s := &ffPeer{}
	s.own = s
	return &s.peerState
}

// ffNone is the state ffOf returns for a peer that holds none of
// FastestFirst's: a lock-free report that raced the peer's claim by
// another picker writes its atomics here, where nothing reads them.
var ffNone ffPeer

// ffOf returns FastestFirst's state of p. Lock-free.
func ffOf(p *Peer) *ffPeer {
	if h := p.state.Load(); h != nil {
		if s, ok := h.own.(*ffPeer); ok {
			return s
		}
	}
	return &ffNone
}

func (s *ffPeer) latency() (float64, bool) { return s.lat.latency() }

func (s *ffPeer) derivedWeight() int64 { return s.derived.Load() }

// setBand stores the band [lo, hi].
func (s *ffPeer) setBand(lo, hi float64) {
	s.lo.Store(math.Float64bits(lo))
	s.hi.Store(math.Float64bits(hi))
}

// inBand reports whether e lies in the band.
func (s *ffPeer) inBand(e float64) bool {
	return e >= math.Float64frombits(s.lo.Load()) && e <= math.Float64frombits(s.hi.Load())
}

// FastestFirstSettings are FastestFirst's own settings; New builds a
// FastestFirst with them. The zero value of a field is its default, so
// FastestFirstSettings{} is every default. A value out of range is
// ErrInvalidConfig naming the field and the value.
type FastestFirstSettings struct {
	// Band is the hysteresis factor h: a peer's weight is computed from
	// its estimate e, and the weights are recomputed only when some
	// estimate leaves its [e/h, e·h]. In (1, 16]; 0: 1.25, weights
	// recomputed once an estimate moves up by more than a quarter or down
	// by more than a fifth.
	Band float64

	// Exponent is α in weight ∝ configured weight ×
	// (tolerance·fastest/estimate)^α: 1 weighs in inverse proportion to
	// latency, higher values favor the fastest more. In [0, 8]; 0: 2, the
	// square-root rule, the best static split over M/M/1 servers, so
	// α = 0 (weights that ignore latency, as LeastConn weighs) is written
	// -1.
	Exponent float64

	// Floor is the least weight a peer configured with a weight gets, out
	// of 100 for the best one. In [1, 100]; 0: 1, the OpenResty original's
	// floor.
	Floor int

	// Tolerance is how many times slower than the fastest peer a peer may
	// look before its weight is lowered. In [1, 100]; 0: 3: within it, the
	// in-flight counts balance load better than noisy weights do.
	Tolerance float64
}

// New returns a FastestFirst over peers with the settings s. opts: the
// shared options (see Option).
func (s FastestFirstSettings) New(peers []*Peer, opts ...Option) (*FastestFirst, error) {
	return NewFastestFirst(peers, append([]Option{s.Option()}, opts...)...)
}

// Option returns s as an Option, for a FastestFirst built by name
// (Algorithm.New), as balancerflag's flags and the gRPC configs build
// one: FastestFirst's constructors apply it where it stands among opts,
// and every other picker refuses it. Name the picker statically with New.
func (s FastestFirstSettings) Option() Option {
	return ownOption(fastestFirstSpec.settings, func(c *fastestSettings) {
		const n = "FastestFirstSettings."
		field(&c.band, n+"Band", s.Band, false)
		field(&c.exponent, n+"Exponent", s.Exponent, true)
		field(&c.floor, n+"Floor", s.Floor, false)
		field(&c.tol, n+"Tolerance", s.Tolerance, false)
	})
}

// fastestSettings are FastestFirst's own settings as given.
type fastestSettings struct {
	band, exponent, tol own[float64]
	floor               own[int]
}

// WithBand sets FastestFirstSettings.Band to h.
//
// Deprecated: use FastestFirstSettings.Band.
func WithBand(h float64) Option {
	return ownOption("WithBand", func(s *fastestSettings) { s.band.give("WithBand", h) })
}

// WithExponent sets FastestFirst's α (FastestFirstSettings.Exponent) to
// a; 0 ignores latency.
//
// Deprecated: use FastestFirstSettings.Exponent (-1 for α = 0).
func WithExponent(a float64) Option {
	return ownOption("WithExponent", func(s *fastestSettings) { s.exponent.give("WithExponent", a) })
}

// WithFloor sets FastestFirstSettings.Floor to w.
//
// Deprecated: use FastestFirstSettings.Floor.
func WithFloor(w int) Option {
	return ownOption("WithFloor", func(s *fastestSettings) { s.floor.give("WithFloor", w) })
}

// WithTolerance sets FastestFirstSettings.Tolerance to x.
//
// Deprecated: use FastestFirstSettings.Tolerance.
func WithTolerance(x float64) Option {
	return ownOption("WithTolerance", func(s *fastestSettings) { s.tol.give("WithTolerance", x) })
}

// fastestOptions applies cfg's FastestFirst settings over their defaults
// and checks them.
func fastestOptions(cfg *config) (fastestSettings, error) {
	c := fastestSettings{band: own[float64]{v: defaults.Band}, exponent: own[float64]{v: defaults.Exponent},
		floor: own[int]{v: defaults.Floor}, tol: own[float64]{v: defaults.Tolerance}}
	applyOwn(cfg, &c)
	switch {
	case !(c.band.v > 1 && c.band.v <= 16):
		return c, fmt.Errorf("balancer: FastestFirst: %s: out of (1, 16]: %w", c.band.by, ErrInvalidConfig)
	case !(c.exponent.v >= 0 && c.exponent.v <= maxExponent):
		return c, fmt.Errorf("balancer: FastestFirst: %s: out of [0, %d]: %w", c.exponent.by, maxExponent, ErrInvalidConfig)
	case c.floor.v < 1 || c.floor.v > fastestScale:
		return c, fmt.Errorf("balancer: FastestFirst: %s: out of [1, %d]: %w", c.floor.by, fastestScale, ErrInvalidConfig)
	case !(c.tol.v >= 1 && c.tol.v <= 100):
		return c, fmt.Errorf("balancer: FastestFirst: %s: out of [1, 100]: %w", c.tol.by, ErrInvalidConfig)
	}
	return c, nil
}

// Connected also restarts the latency estimate of a peer it readmits, from
// the next reply Done reports, as when Done itself readmits a probe: the
// estimate a failing peer dropped to says nothing about the peer that
// answers again.
func (f *FastestFirst) Connected(p *Peer) error {
	if err := f.connectable(p); err != nil || p.fails.Load() == 0 {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.connectable(p); err != nil {
		return err
	}
	if f.connectedLocked(p) {
		ffOf(p).connected.Store(true)
		if f.lockFree {
			f.publishFailingLocked(f.load()) // p no longer has failures on record
		}
	}
	return nil
}
