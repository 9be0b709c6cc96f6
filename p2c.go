package balancer

import (
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
)

// P2CPeakEWMA is Finagle's and Linkerd's latency-aware balancer: the power
// of two choices (Finagle's P2CPick, tower's balance::p2c) over the peak
// EWMA load of Finagle's PeakEwma.scala (tower's load::PeakEwma). Each pick
// draws two distinct eligible peers at random and takes the one with the
// lower cost
//
//	cost = latency estimate × (in flight + 1) / weight
//
// where the latency estimate is the peak EWMA of the peer's reported
// latencies (a reply slower than the estimate replaces it at once, faster
// ones are averaged in over the decay time, 10 s by default, see WithDecay)
// decayed toward zero for as long as no reply arrives, as Finagle's load
// read decays it: an idle peer's cost sinks until it is tried again, which
// is how it finds a peer that became fast. The in-flight factor reacts to a
// stall before its first slow reply. A failure enters the estimate as at
// least WithFailurePenalty (5 s, Linkerd's load biaser), so a peer that
// fails fast never looks fast.
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
// redrawn a few times, then the eligible peers are counted and two drawn
// among them exactly, so the pair is always two distinct random eligible
// peers whenever two exist.
//
// Cost of a pick: O(1) with equal weights, O(log n) otherwise, lock-free,
// and allocation-free; O(n) only when the first draws keep landing on
// ineligible peers. Done takes the picker's lock for O(1) to update the
// estimate. With WithRand the source is used under a small lock of its
// own; without it the draws come from math/rand/v2's top-level functions,
// which no seed can reproduce.
//
// The zero value is not usable; use NewP2CPeakEWMA. P2CPeakEWMA is safe for
// concurrent use by multiple goroutines.
type P2CPeakEWMA struct {
	peerSet

	// Immutable after construction.
	rnd     *rand.Rand // nil: math/rand/v2's top-level functions
	tau     float64    // decay time, ns
	penalty float64    // failure penalty, ns

	rmu  sync.Mutex // serializes rnd
	draw atomic.Pointer[drawTable]
}

var _ Picker = (*P2CPeakEWMA)(nil)

// p2cEffort is how many pairs a pick draws before it counts the eligible
// peers and draws among them exactly: Finagle's older P2C re-picked up to
// maxEffort = 5 times.
const p2cEffort = 5

// drawTable is what the draws need for one peer list, rebuilt on every
// change.
type drawTable struct {
	list    *peerList
	primary drawList
	backup  drawList
}

// drawList holds the cumulative weights of one list: cum[i] is the sum of
// the weights of peers 0..i.
type drawList struct {
	cum     []int64
	uniform bool // every weight equal: draw indices directly
}

func newDrawList(peers []*Peer) drawList {
	d := drawList{cum: make([]int64, len(peers)), uniform: true}
	var sum int64
	for i, p := range peers {
		w := p.weight.Load()
		sum += w
		d.cum[i] = sum
		if w != peers[0].weight.Load() {
			d.uniform = false
		}
	}
	if sum == 0 {
		d.uniform = true // all weights 0: every peer counts as one
	}
	return d
}

// NewP2CPeakEWMA returns a P2CPeakEWMA over peers. It accepts WithClock,
// WithRand, WithDecay and WithFailurePenalty.
func NewP2CPeakEWMA(peers []*Peer, opts ...Option) (*P2CPeakEWMA, error) {
	cfg, err := newConfig("P2CPeakEWMA", optClock|optRand|latencyOptions, opts)
	if err != nil {
		return nil, err
	}
	if err := cfg.checkLatency("P2CPeakEWMA", DefaultDecay); err != nil {
		return nil, err
	}
	b := &P2CPeakEWMA{tau: float64(cfg.decay), penalty: float64(cfg.penalty)}
	if cfg.src != nil {
		b.rnd = rand.New(cfg.src)
	}
	if err := b.init(peers, cfg, b.changedLocked); err != nil {
		return nil, err
	}
	return b, nil
}

// changedLocked rebuilds the draw table after a change and starts every
// peer new to the picker unmeasured.
func (b *P2CPeakEWMA) changedLocked(l *peerList) {
	b.draw.Store(&drawTable{list: l, primary: newDrawList(l.primary), backup: newDrawList(l.backup)})
}

// Pick draws two distinct eligible peers and returns the one with the lower
// cost, counting the attempt in flight until Done. It is O(1) with equal
// weights and O(log n) otherwise, without a lock.
func (b *P2CPeakEWMA) Pick(r *Request) (*Peer, error) {
	t := b.draw.Load()
	if t == nil {
		return nil, ErrNoPeers
	}
	now := b.now()
	return pickFrame(t.list, r, func(peers []*Peer, backup bool) int {
		if backup {
			return b.choose(peers, &t.backup, r, now)
		}
		return b.choose(peers, &t.primary, r, now)
	})
}

// choose returns the index of the winner of a pair of distinct eligible
// peers of one list, with its attempt already counted in flight, or -1 if
// no peer of the list is eligible.
func (b *P2CPeakEWMA) choose(peers []*Peer, d *drawList, r *Request, now int64) int {
	if len(peers) == 0 { // a list of backups only: nothing to draw from the primaries
		return -1
	}
	clk := clockAt(now)
	for range p2cEffort + 1 {
		a, c := -1, -1
		for try := 0; try < p2cEffort; try++ {
			a, c = b.drawPair(d, len(peers))
			if eligibleAt(peers, a, r, now) && (c < 0 || eligibleAt(peers, c, r, now)) {
				break
			}
			a, c = -1, -1
		}
		if a < 0 {
			// The draws keep missing: draw exactly among the eligible.
			a, c = b.drawEligible(peers, r, now)
			if a < 0 {
				return -1
			}
		}
		// Take the cheaper; if another pick claimed its probe or filled
		// its max_conns meanwhile, the other one; if both went, draw again.
		if c >= 0 && b.cheaper(peers[c], peers[a], now) {
			a, c = c, a
		}
		if peers[a].take(&clk) {
			return a
		}
		if c >= 0 && peers[c].take(&clk) {
			return c
		}
	}
	return -1
}

// eligibleAt reports whether peer i of peers may take r's next attempt at
// now.
func eligibleAt(peers []*Peer, i int, r *Request, now int64) bool {
	clk := clockAt(now)
	return !r.isTried(i) && peers[i].eligible(&clk)
}

// drawPair draws two distinct indices of a list of n peers, each in
// proportion to its weight. The second is -1 when only the first can be
// drawn: a list of one peer, or one peer holding all the weight, the
// others being of weight 0.
func (b *P2CPeakEWMA) drawPair(d *drawList, n int) (int, int) {
	if n == 1 {
		return 0, -1
	}
	if d.uniform {
		a := int(b.int64N(int64(n)))
		c := int(b.int64N(int64(n - 1)))
		if c >= a {
			c++ // one draw over the n-1 others: unbiased, always distinct
		}
		return a, c
	}
	total := d.cum[n-1]
	a := search(d.cum, b.int64N(total))
	start, w := d.cum[a]-d.weight(a), d.weight(a)
	if total == w {
		return a, -1 // only a has weight: the others wait for the exact draw
	}
	// Draw over the total without a's range, then step over it.
	y := b.int64N(total - w)
	if y >= start {
		y += w
	}
	return a, search(d.cum, y)
}

func (d *drawList) weight(i int) int64 {
	if i == 0 {
		return d.cum[0]
	}
	return d.cum[i] - d.cum[i-1]
}

// search returns the peer whose cumulative range holds x: the first i with
// cum[i] > x.
func search(cum []int64, x int64) int {
	return sort.Search(len(cum), func(i int) bool { return cum[i] > x })
}

// drawEligible counts the eligible peers and draws two distinct ones among
// them in proportion to their weights, or uniformly when none of them has
// a weight. It returns -1 for a peer it cannot draw. O(n).
func (b *P2CPeakEWMA) drawEligible(peers []*Peer, r *Request, now int64) (int, int) {
	var sum, count int64
	for i, p := range peers {
		if eligibleAt(peers, i, r, now) {
			sum += p.weight.Load()
			count++
		}
	}
	if count == 0 {
		return -1, -1
	}
	unit := sum == 0 // only weightless peers: each counts as one
	if unit {
		sum = count
	}
	a := findEligible(peers, b.int64N(sum), -1, unit, r, now)
	if a < 0 {
		return -1, -1
	}
	wa := drawWeight(peers[a], unit)
	if sum <= wa { // <: a concurrent SetWeight raised a's weight since sum was taken
		return a, -1
	}
	return a, findEligible(peers, b.int64N(sum-wa), a, unit, r, now)
}

// drawWeight is p's weight in an exact draw: 1 when only weightless peers
// are eligible.
func drawWeight(p *Peer, unit bool) int64 {
	if unit {
		return 1
	}
	return p.weight.Load()
}

// findEligible returns the eligible peer, other than skip, whose range of
// the eligible peers' cumulative weights holds x, or -1 if an eligible peer
// went away between the count and this pass.
func findEligible(peers []*Peer, x int64, skip int, unit bool, r *Request, now int64) int {
	for i, p := range peers {
		if i == skip || !eligibleAt(peers, i, r, now) {
			continue
		}
		if x -= drawWeight(p, unit); x < 0 {
			return i
		}
	}
	return -1
}

// int64N returns a uniform draw in [0, n).
func (b *P2CPeakEWMA) int64N(n int64) int64 {
	if b.rnd == nil {
		return rand.Int64N(n)
	}
	b.rmu.Lock()
	defer b.rmu.Unlock()
	return b.rnd.Int64N(n)
}

// cheaper reports whether p costs less than q at now. A peer probed for its
// first reply loses to any other; two such compare by in-flight count.
// Costs are compared per unit of weight by cross multiplication, a weight
// of 0 counting as 1 (such peers only ever meet each other).
func (b *P2CPeakEWMA) cheaper(p, q *Peer, now int64) bool {
	pp, pc := b.cost(p, now)
	qp, qc := b.cost(q, now)
	if pp != qp {
		return qp
	}
	pw, qw := float64(max(p.weight.Load(), 1)), float64(max(q.weight.Load(), 1))
	return pc*qw < qc*pw
}

// cost returns p's load at now: whether it is being probed for its first
// reply, and the peak EWMA decayed over its idle time times (in flight+1);
// for a probed peer, its in-flight count.
func (b *P2CPeakEWMA) cost(p *Peer, now int64) (probing bool, c float64) {
	pending := float64(p.conns.Load())
	if !p.lat.measured.Load() {
		if pending > 0 {
			return true, pending
		}
		return false, 0
	}
	e := p.lat.estimate() * decayWeight(now-p.lat.stamp.Load(), b.tau)
	return false, e * (pending + 1)
}

// Done reports the outcome of an attempt on p: it ends the attempt, feeds
// its latency (or the failure penalty, if higher) into p's estimate and
// applies nginx's failure accounting. O(1) under the picker's lock.
func (b *P2CPeakEWMA) Done(p *Peer, o Outcome) error {
	if err := b.finish(p, o); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if p.owner.Load() != &b.peerSet {
		return nil // removed while in flight
	}
	b.doneLocked(b.load(), p, o)
	p.lat.observeLocked(b.now(), sampleOf(o, b.penalty), b.tau)
	return nil
}
