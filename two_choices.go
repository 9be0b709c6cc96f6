package balancer

import (
	"sort"
	"sync/atomic"
)

// loadCost is the seam between the power of two choices and what it
// compares: P2CPeakEWMA hands it the peak-EWMA cost; another cost (least
// request, weighted least request) is another small type.
type loadCost interface {
	// less reports whether p's load is below q's, per unit of weight. A
	// cost that changes with time compares the two at a common time of
	// its choosing, reading clk, a copy of the pick's clock (a pointer
	// through the interface would move it to the heap), only if it must.
	// ps and qs are p's and q's states (peerstate.go), as the draw table
	// holds them.
	less(p, q *Peer, ps, qs *peerState, clk lazyClock) bool
}

// twoChoices is the power of two choices (Mitzenmacher 2001; Finagle's
// P2CPick, tower's balance::p2c) over a picker's peers: draw two distinct
// eligible peers in proportion to their weights and take the one of lower
// cost, the first drawn on a tie. The pick is lock-free: the draw tables
// are an immutable snapshot rebuilt on every change, and the attempt is
// counted by take.
type twoChoices struct {
	peerSet
	rng  randSource // the draws: WithRand's source, or the runtime's
	draw atomic.Pointer[drawTable]
}

// p2cEffort is how many pairs a pick draws before it counts the eligible
// peers and draws among them exactly: Finagle's older P2C re-picked up to
// maxEffort = 5 times.
const p2cEffort = 5

// p2cRedraws bounds the alias-table redraws of a pair's second peer
// before drawPair draws it by search.
const p2cRedraws = 4

// drawTable is what the draws need for one peer list, rebuilt on every
// change.
type drawTable struct {
	list    *peerList
	primary drawList
	backup  drawList
}

// drawList holds the cumulative weights of one list, cum[i] being the sum
// of the weights of peers 0..i, and Vose's alias table over the same
// weights, which draws in O(1) where a search of cum takes O(log n).
type drawList struct {
	cum     []int64
	alias   rwTable
	uniform bool // every weight equal: draw indices directly
	// st[i] is the state peer i held when the list was published
	// (peerstate.go), read beside the peer without a load from it.
	st []*peerState
}

func newDrawList(peers []*Peer) drawList {
	d := drawList{cum: make([]int64, len(peers)), uniform: true, st: make([]*peerState, len(peers))}
	var sum int64
	for i, p := range peers {
		d.st[i] = p.state.Load()
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
	if !d.uniform {
		w := make([]uint64, len(peers))
		for i := range peers {
			w[i] = uint64(d.weight(i))
		}
		d.alias = newRWTable(peers, w)
	}
	return d
}

// initDraws sets up the peer set, the source of the draws and the draw
// tables.
func (b *twoChoices) initDraws(peers []*Peer, cfg config) error {
	b.rng = newRandSource(cfg)
	return b.init(peers, cfg, b.changedLocked)
}

// changedLocked rebuilds the draw table after a change and starts every
// peer new to the picker unmeasured.
func (b *twoChoices) changedLocked(l *peerList) {
	b.draw.Store(&drawTable{list: l, primary: newDrawList(l.primary), backup: newDrawList(l.backup)})
}

// pick runs the frame around the two-choice rule with cost c. The clock is
// read only if a peer with failures on record needs it.
func (b *twoChoices) pick(r *Request, c loadCost) (*Peer, error) {
	t := b.draw.Load()
	if t == nil {
		return nil, ErrNoPeers
	}
	clk := lazyClock{now: b.now}
	var ws *slowStart // non-nil while a peer may be warming (guard_slowstart.go)
	if b.slow.warming(&clk) {
		ws = &b.slow
	}
	return pickFrame(t.list, r, func(peers []*Peer, backup bool) int {
		if backup {
			return b.choose(peers, &t.backup, r, c, &clk, ws)
		}
		return b.choose(peers, &t.primary, r, c, &clk, ws)
	})
}

// choose returns the index of the winner of a pair of distinct eligible
// peers of one list, with its attempt already counted in flight, or -1 if
// no peer of the list is eligible. With ws set (a peer may be warming),
// each draw of the pair is thinned by its peer's slow-start factor
// (thinPair), so that each is in proportion to weight · factor; the costs
// compare as without it.
func (b *twoChoices) choose(peers []*Peer, d *drawList, r *Request, cost loadCost, clk *lazyClock, ws *slowStart) int {
	if len(peers) == 0 { // a list of backups only: nothing to draw from the primaries
		return -1
	}
	for range p2cEffort + 1 {
		a, c := -1, -1
		for try := 0; try < p2cEffort; try++ {
			a, c = b.drawPair(d, len(peers))
			if ws != nil {
				a, c = b.thinPair(d, peers, a, c, clk, ws)
			}
			if a >= 0 && eligibleAt(peers, a, r, clk) && (c < 0 || eligibleAt(peers, c, r, clk)) {
				break
			}
			a, c = -1, -1
		}
		if a < 0 {
			// The draws keep missing: draw exactly among the eligible.
			a, c = b.drawEligible(peers, r, clk, ws)
			if a < 0 {
				return -1
			}
		}
		// Take the cheaper; if another pick claimed its probe or filled
		// its max_conns meanwhile, the other one; if both went, draw again.
		if c >= 0 && cost.less(peers[c], peers[a], d.st[c], d.st[a], *clk) {
			a, c = c, a
		}
		if peers[a].take(clk) {
			return a
		}
		if c >= 0 && peers[c].take(clk) {
			return c
		}
	}
	return -1
}

// eligibleAt reports whether peer i of peers may take r's next attempt.
func eligibleAt(peers []*Peer, i int, r *Request, clk *lazyClock) bool {
	return !r.isTried(i) && peers[i].eligible(clk)
}

// drawPair draws two distinct indices of a list of n peers, each in
// proportion to its weight. The second is -1 when only the first can be
// drawn: a list of one peer, or one peer holding all the weight, the
// others being of weight 0.
func (b *twoChoices) drawPair(d *drawList, n int) (int, int) {
	if n == 1 {
		return 0, -1
	}
	if d.uniform {
		a := int(b.rng.int64N(int64(n)))
		c := int(b.rng.int64N(int64(n - 1)))
		if c >= a {
			c++ // one draw over the n-1 others: unbiased, always distinct
		}
		return a, c
	}
	return b.drawOther(d, n, d.alias.draw(b.rng.uint64()))
}

// drawOther draws an index of a list of n > 1 peers other than a, in
// proportion to its weight, or -1 when only a has weight: drawPair's second
// draw.
func (b *twoChoices) drawOther(d *drawList, n int, a int) (int, int) {
	if d.uniform {
		c := int(b.rng.int64N(int64(n - 1)))
		if c >= a {
			c++
		}
		return a, c
	}
	total := d.cum[n-1]
	start, w := d.cum[a]-d.weight(a), d.weight(a)
	if total == w {
		return a, -1 // only a has weight: the others wait for the exact draw
	}
	// The second from the same table, redrawn while it is a: given a, each
	// other peer j comes up with probability w_j/(W − w_a), as required.
	// A peer with most of the weight could take many redraws; past a few,
	// one draw over the total without a's range, stepped over, is exact
	// too.
	for range p2cRedraws {
		if c := d.alias.draw(b.rng.uint64()); c != a {
			return a, c
		}
	}
	y := b.rng.int64N(total - w)
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
//
// With ws set, the weights are in slowScale units, scaled by each peer's
// slow-start factor.
func (b *twoChoices) drawEligible(peers []*Peer, r *Request, clk *lazyClock, ws *slowStart) (int, int) {
	var sum, count int64
	for i, p := range peers {
		if eligibleAt(peers, i, r, clk) {
			sum += drawWeight(p, false, ws, clk)
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
	a := findEligible(peers, b.rng.int64N(sum), -1, unit, r, clk, ws)
	if a < 0 {
		return -1, -1
	}
	wa := drawWeight(peers[a], unit, ws, clk)
	if sum <= wa { // <: a concurrent SetWeight raised a's weight since sum was taken
		return a, -1
	}
	return a, findEligible(peers, b.rng.int64N(sum-wa), a, unit, r, clk, ws)
}

// drawWeight is p's weight in an exact draw: 1 when only weightless peers
// are eligible; with ws set, scaled by its slow-start factor, in slowScale
// units.
func drawWeight(p *Peer, unit bool, ws *slowStart, clk *lazyClock) int64 {
	if unit {
		return 1
	}
	if ws != nil {
		return ws.scaledWeight(p, p.weight.Load(), clk.get())
	}
	return p.weight.Load()
}

// findEligible returns the eligible peer, other than skip, whose range of
// the eligible peers' cumulative weights holds x. If x lies past the last
// range, because a peer went down or lost weight between the count and
// this pass, it returns the last eligible peer the pass met: a live peer
// is never missed for a race with a change. -1 only if the pass met none.
func findEligible(peers []*Peer, x int64, skip int, unit bool, r *Request, clk *lazyClock, ws *slowStart) int {
	last := -1
	for i, p := range peers {
		if i == skip || !eligibleAt(peers, i, r, clk) {
			continue
		}
		if x -= drawWeight(p, unit, ws, clk); x < 0 {
			return i
		}
		last = i
	}
	return last
}

// cheaper reports whether a peer of cost (probing pp, load pc) and weight
// pw costs less than one of (qp, qc) and qw: a probing peer loses to any
// other; otherwise loads compare per unit of weight by cross
// multiplication, a weight of 0 counting as 1 (such peers only ever meet
// each other).
func cheaper(pp bool, pc float64, pw int64, qp bool, qc float64, qw int64) bool {
	if pp != qp {
		return qp
	}
	return pc*float64(max(qw, 1)) < qc*float64(max(pw, 1))
}

// thinPair thins the pair (a, c) drawPair drew: a stands with its peer's
// factor, or the pair is a miss (-1, -1, which counts a try); c, given a,
// stands with its own, or is drawn again among the others, up to
// p2cRedraws+4 times, after which a is alone (c = -1). Each of the two is
// then drawn in proportion to weight · factor, but for that last bound.
func (b *twoChoices) thinPair(d *drawList, peers []*Peer, a, c int, clk *lazyClock, ws *slowStart) (int, int) {
	if !ws.stands(peers[a], clk, &b.rng) {
		return -1, -1
	}
	for range p2cRedraws + 4 {
		if c < 0 || ws.stands(peers[c], clk, &b.rng) {
			return a, c
		}
		_, c = b.drawOther(d, len(peers), a)
	}
	return a, -1
}
