package balancer

import "github.com/lbgo/balancer/internal/defaults"

// P2CPeakEWMA in detail. It is the power of two choices (Finagle's P2CPick,
// tower's balance::p2c) over the peak EWMA load of Finagle's PeakEwma.scala
// (tower's load::PeakEwma). Each pick draws two distinct eligible peers at
// random and takes the one with the lower cost
//
//	cost = latency estimate × (in flight + 1) / weight
//
// where the latency estimate is the peak EWMA of the peer's reported
// latencies (a reply slower than the estimate replaces it at once, faster
// ones are averaged in over the decay time, 10 s unless WithDecay says
// otherwise) decayed toward zero for as long as no reply arrives, as
// Finagle's load read decays it: an idle peer's cost sinks until it is tried
// again, which is how it finds a peer that became fast. The in-flight
// factor reacts to a stall before its first slow reply. A failure enters the
// estimate as at least WithFailurePenalty (5 s by default, Linkerd's load
// biaser's), so a peer that fails fast never looks fast.
//
// A peer with no reply yet costs nothing while it has nothing in flight
// and is then probed one attempt at a time: with an attempt in flight and
// still no reply it loses to every measured peer, as Finagle gives it a
// penalty load; two such peers compare by their in-flight counts. Two
// lock-free picks may both send a first attempt to the same unmeasured
// peer; the rule holds from then on.
//
// Weights: with equal weights this is exactly Finagle's pick (uniform
// draws, lower cost wins, the first drawn on a tie). With unequal weights
// it does what nginx's "random two least_conn" does with connection
// counts: each of the two is drawn with probability proportional to its
// weight, and costs are compared per unit of weight. A peer of weight 0 is
// drawn only when no eligible peer has a weight.
//
// Eligibility, failures (max_fails, fail_timeout and the probe after the
// window, claimed by compare-and-swap), backup and down peers, max_conns,
// per-request tries and the single-server rule follow nginx's round-robin
// module, as in SmoothWRR; a draw that lands on an ineligible peer is
// redrawn a few times (p2cEffort), then the eligible peers are counted and
// two drawn among them exactly, so the pair is always two distinct random
// eligible peers whenever two exist.
//
// Cost of a pick: O(1), lock-free and allocation-free (Vose's alias table
// for unequal weights, as in RandomWeighted); O(n) only when the first draws keep landing on
// ineligible peers. Done updates the estimate by compare-and-swap, O(1),
// and takes the picker's lock only for nginx's failure accounting (a
// failure, or a success on a peer with failures on record). With WithRand
// the source is used under a small lock of its own; without it the draws
// come from the runtime's per-thread generator, which no seed can
// reproduce.

// P2CPeakEWMA is Finagle's and Linkerd's balancer: the power of two
// choices over a peak-EWMA load (Finagle's P2CPick and PeakEwma, tower's
// balance::p2c and load::PeakEwma). Each pick draws two distinct eligible
// peers by weight and takes the one with the lower latency estimate ×
// (in flight + 1) / weight. An idle peer's estimate decays ([WithDecay];
// default 10 s), so a peer that became fast is found again; a failure counts as at least
// [WithFailurePenalty]. Choose it for latency-sensitive traffic to peers of
// unknown or changing speed. With [WithReportedLoad], the in-flight count
// takes in the other clients' attempts that peers' servers report.
//
// A pick is O(1) and lock-free; so is Done, unless it must account a
// failure. The zero value is not usable; use
// [NewP2CPeakEWMA]. It is safe for concurrent use.
type P2CPeakEWMA struct {
	twoChoices
	peakEWMA
}

// peakEWMA is P2CPeakEWMA's cost; immutable after construction.
type peakEWMA struct {
	tau     float64      // decay time, ns
	penalty float64      // failure penalty, ns
	rep     reportedLoad // WithReportedLoad
}

// p2cSpec is P2CPeakEWMA's declaration (see pickerSpec).
var p2cSpec = pickerSpec{
	name:    "P2CPeakEWMA",
	options: []string{"WithRand", "WithDecay", "WithFailurePenalty", "WithReportedLoad", "WithSlowStart"},
	latency: true,
}

// NewP2CPeakEWMA returns a P2CPeakEWMA over peers. opts: the shared
// options (see Option).
func NewP2CPeakEWMA(peers []*Peer, opts ...Option) (*P2CPeakEWMA, error) {
	cfg, err := newConfig(p2cSpec, opts)
	if err != nil {
		return nil, err
	}
	lat, err := latencyOptions(p2cSpec.name, &cfg, defaults.Decay)
	if err != nil {
		return nil, err
	}
	rep, err := reportedOptions(p2cSpec.name, &cfg)
	if err != nil {
		return nil, err
	}
	b := &P2CPeakEWMA{peakEWMA: peakEWMA{tau: float64(lat.decay), penalty: float64(lat.penalty), rep: rep}}
	b.fresh = newP2CPeer
	if err := b.initDraws(peers, cfg); err != nil {
		return nil, err
	}
	return b, nil
}

// Pick draws two distinct eligible peers and returns the one with the lower
// cost. It is O(1), without a lock.
func (b *P2CPeakEWMA) Pick(r *Request) (*Peer, error) {
	return b.pick(r, &b.peakEWMA)
}

// less reports whether p costs less than q. Both costs decay by the same
// clock, so they compare at the later of their stamps as they would now:
// the ratio of exp(−(t−s_p)/τ) to exp(−(t−s_q)/τ) is the same at every t
// past both stamps. That reads no clock and takes one exponential, not two.
// The reported loads (WithReportedLoad) are not a ratio, so they are read
// at the pick's time, clk.
func (m *peakEWMA) less(p, q *Peer, pst, qst *peerState, clk lazyClock) bool {
	ps, qs := p2cState(pst), p2cState(qst)
	at := max(ps.lat.stamp.Load(), qs.lat.stamp.Load())
	pp, pc := m.cost(p, ps, at, &clk)
	qp, qc := m.cost(q, qs, at, &clk)
	return cheaper(pp, pc, p.weight.Load(), qp, qc, q.weight.Load())
}

// cost returns p's load at now: whether it is being probed for its first
// reply, and the peak EWMA decayed over its idle time times (in flight+1),
// the in-flight count being the reported load with WithReportedLoad; for a
// probed peer, its in-flight count.
func (m *peakEWMA) cost(p *Peer, st *p2cPeer, now int64, clk *lazyClock) (probing bool, c float64) {
	own := p.inFlight()
	lat := &st.lat
	if !lat.measured.Load() {
		if own > 0 {
			return true, float64(own)
		}
		return false, 0
	}
	pending := float64(own)
	if m.rep.on() {
		pending = m.rep.load(&st.srv, own, clk)
	}
	e := lat.estimate() * decayWeight(now-lat.stamp.Load(), m.tau)
	return false, e * (pending + 1)
}

// Done also feeds the attempt's latency (or the failure penalty, if
// higher) into p's estimate, and with WithReportedLoad keeps the count the
// outcome's Load reports, lock-free, in O(1).
func (b *P2CPeakEWMA) Done(p *Peer, o Outcome) error {
	return b.donePeak(&b.peakEWMA, p, o)
}

// donePeak is P2CPeakEWMA's Done over the peak-EWMA cost m, which Prequal
// shares.
func (b *twoChoices) donePeak(m *peakEWMA, p *Peer, o Outcome) error {
	if err := b.finish(p, o); err != nil {
		return err
	}
	if p.owner.Load() != &b.peerSet {
		return nil // removed while in flight
	}
	now := b.now()
	if o.Failed || p.needsLockOnSuccess() {
		b.mu.Lock()
		b.doneLocked(b.load(), p, o) // rechecks the owner under the lock
		b.mu.Unlock()
	}
	// A report racing a Remove and an Add to another picker may feed this
	// one sample into the new picker's estimate: one sample, which the
	// decay soon outweighs, against a lock on every report.
	st := p2cOf(p)
	if m.rep.on() {
		st.srv.note(o.Load, p.inFlight(), now)
		b.sawReply(p, o, reportsInFlight(o.Load)) // sight.go
	}
	lat := &st.lat
	switch {
	case o.Superseded:
		lat.superseded(now, float64(o.Latency), m.tau)
	case o.Abandoned:
		lat.abandon(now, float64(o.Latency), m.tau)
	default:
		lat.answered()
		lat.observe(now, sampleOf(o, m.penalty), m.tau)
	}
	return nil
}

// p2cPeer is P2CPeakEWMA's per-peer state (peerstate.go): the peer's peak
// EWMA, lock-free (see latencyStats).
type p2cPeer struct {
	peerState
	lat latencyStats
	srv serverCount // WithReportedLoad's reports
}

func newP2CPeer(int64) *peerState {
	s := &p2cPeer{}
	s.own = s
	return &s.peerState
}

func (s *p2cPeer) latency() (float64, bool) { return s.lat.latency() }

// p2cNone is the state p2cOf returns for a peer that holds none of
// P2CPeakEWMA's: a report that raced the peer's claim by another picker
// writes its sample here, where nothing reads it.
var p2cNone p2cPeer

// p2cOf returns P2CPeakEWMA's state of p. Lock-free.
func p2cOf(p *Peer) *p2cPeer { return p2cState(p.state.Load()) }

// p2cState returns the P2CPeakEWMA state h heads (Prequal's holds one),
// or p2cNone.
func p2cState(h *peerState) *p2cPeer {
	if h != nil {
		switch s := h.own.(type) {
		case *p2cPeer:
			return s
		case *prequalPeer:
			return &s.p2cPeer
		}
	}
	return &p2cNone
}
