package balancer

import (
	"math/rand/v2"
	"sync/atomic"
)

// RoundRobin in detail. The rotation is RoundRobinRule in Netflix/ribbon's
// com.netflix.loadbalancer. Pick is O(1) and lock-free while the peer the
// counter lands on is eligible: one atomic add, one atomic load of the peer
// table, an index and the in-flight increment; a peer that is not eligible
// costs a scan of at most one pass over the list.
//
// Weights are ignored: every eligible primary gets an equal share, whatever
// its weight, with one exception that keeps Weight's promise: a peer of
// weight 0 is never chosen while a peer of the same list has a positive
// weight. If every weight of a list is 0, all its peers take turns.
//
// A peer that is down, inside its fail window (max_fails failures within
// fail_timeout), at its max_conns limit or already tried by the request is
// skipped, and its turn goes to the next peer in order; the skipped turn is
// used up, as in Ribbon, where each try advances the counter, so the peers
// after a dead one share its turns instead of the next one taking them all.
// Unlike Ribbon, which gives up after 10 tries, the scan visits every peer
// once before it reports ErrNoLivePeer. A failing peer whose fail_timeout
// has passed gets one probe, claimed by the first concurrent Pick to reach
// it. When no primary is eligible the backup peers take turns on a counter
// of their own. A Request bounds retries as nginx does.
//
// The first pick lands on a uniformly random primary, and the rotation goes
// on in list order from there. Ribbon starts every client at the same place
// (RoundRobinRule at index 1, its predicate variant at 0), so a fleet of
// clients deployed together sends its first requests to one server; a
// random starting offset, as gRPC's round robin uses, spreads them. The
// offset is drawn once, at construction, from WithRand's source if given
// (so a seeded source gives a reproducible rotation) and from math/rand/v2
// otherwise.
//
// The counter is one atomic add where Ribbon runs a compare-and-swap loop
// (next = (current+1) mod n). The two hand out the same slots: k successful
// CAS steps from 0 leave k mod n, and k adds leave k, which the modulo turns
// into the same k mod n; concurrent callers get distinct consecutive values
// either way, in the order their atomic operations take effect. The add
// never retries, and rrFold removes the one place they could differ, the
// wrap of the add's counter.

// RoundRobin is Ribbon's lock-free round robin (RoundRobinRule in
// Netflix/ribbon): a shared counter, modulo the number of primaries, names
// the next peer in list order, from a random start ([WithRand]). Weights
// are ignored, but a peer of weight 0 is never chosen while a peer of its
// list has weight. An ineligible peer is skipped and its turn used up;
// backups take turns once no primary is eligible. Choose it for equal
// peers and the cheapest pick there is.
//
// A first attempt is one atomic add, O(1) and lock-free, while the peer the
// counter lands on is eligible; otherwise a pick scans, O(n) at worst.
// The zero value is not usable; use [NewRoundRobin]. It is safe for
// concurrent use.
type RoundRobin struct {
	peerSet
	table atomic.Pointer[rrTable] // rebuilt under mu on every peer-list change

	// The counter every Pick writes sits alone on its cache line, so that
	// its traffic does not evict the read-mostly table pointer above.
	_    [56]byte
	ctr  atomic.Uint64 // primary rotation
	_    [56]byte
	bctr atomic.Uint64 // backup rotation
}

// rrTable is an immutable snapshot of the rotations, derived from one peer
// list.
type rrTable struct {
	list    *peerList
	primary rrRing
	backup  rrRing
}

// rrRing is the rotation over one list: the peers that take turns, in list
// order, and the constants of the fast modulo by their number.
type rrRing struct {
	slots []rrSlot
	n     uint64 // len(slots)
	mod   fastMod
}

// rrSlot is one peer in a rotation and its index in its list, which names it
// in a Request's tried set.
type rrSlot struct {
	p *Peer
	i int
}

// roundRobinSpec is RoundRobin's declaration (see pickerSpec).
var roundRobinSpec = pickerSpec{name: "RoundRobin", options: []string{"WithRand"}}

// NewRoundRobin returns a RoundRobin over peers. opts: the shared options
// (see Option); WithRand is the source of the starting offset.
func NewRoundRobin(peers []*Peer, opts ...Option) (*RoundRobin, error) {
	cfg, err := newConfig(roundRobinSpec, opts)
	if err != nil {
		return nil, err
	}
	b := &RoundRobin{}
	draw := rand.Uint64
	if cfg.src != nil {
		draw = cfg.src.Uint64
	}
	// The top 31 bits: uniform below rrFoldAt, and uniform enough modulo any
	// list length (the bias is below n/2^31).
	b.ctr.Store(draw() >> 33)
	b.bctr.Store(draw() >> 33)
	if err := b.init(peers, cfg, b.changedLocked); err != nil {
		return nil, err
	}
	return b, nil
}

// changedLocked rebuilds the rotations after a peer-list change. The
// counters carry on: the next Pick lands wherever the counter now points in
// the new list.
func (b *RoundRobin) changedLocked(l *peerList) {
	b.table.Store(&rrTable{list: l, primary: newRRRing(l.primary), backup: newRRRing(l.backup)})
}

// newRRRing returns the rotation over peers: those with a positive weight,
// or all of them if none has one.
func newRRRing(peers []*Peer) rrRing {
	var g rrRing
	for i, p := range peers {
		if p.weight.Load() > 0 {
			g.slots = append(g.slots, rrSlot{p, i})
		}
	}
	if len(g.slots) == 0 {
		for i, p := range peers {
			g.slots = append(g.slots, rrSlot{p, i})
		}
	}
	g.n = uint64(len(g.slots))
	g.mod = newFastMod(g.n)
	return g
}

// next advances counter c by one and returns the slot it lands on.
func (g *rrRing) next(c *atomic.Uint64) uint64 {
	v := c.Add(1)
	if v < foldAt {
		return g.mod.reduce(v)
	}
	return rrFold(c, v, g.n)
}

// rrFold is the rare path of rrRing.next: v mod n by division, and the
// counter folded to that value. The fold only succeeds if no other Pick has
// moved the counter since v; if one has, a later Pick folds it, long before
// it could reach 2^32. Since v and v mod n are congruent, every later value,
// and so every later slot, is the same as without the fold.
func rrFold(c *atomic.Uint64, v, n uint64) uint64 {
	j := v % n
	c.CompareAndSwap(v, j)
	return j
}

// Pick returns the next eligible peer in rotation. It is O(1), lock-free and
// allocation-free when the peer the counter lands on is eligible and r is
// fresh (nil, or on its first attempt); otherwise it scans, O(n) at worst.
func (b *RoundRobin) Pick(r *Request) (*Peer, error) {
	t := b.table.Load()
	if g := &t.primary; g.n != 0 && r.fresh() {
		j := g.next(&b.ctr)
		s := &g.slots[j]
		p := s.p
		// The common case runs ahead of pickFrame (pickSlow runs it): a
		// clean peer needs neither the clock nor a compare-and-swap.
		if p.clean() {
			p.pick()
			return fastFirst(t.list, r, s.i, p)
		}
		return b.pickSlow(t, r, int(j))
	}
	return b.pickSlow(t, r, -1)
}

// pickSlow runs the frame: the primaries' rotation from slot first (or from
// a fresh turn if first < 0), then the backups' on a counter of their own.
func (b *RoundRobin) pickSlow(t *rrTable, r *Request, first int) (*Peer, error) {
	clk := lazyClock{now: b.now}
	return pickFrame(t.list, r, func(_ []*Peer, backup bool) int {
		if backup {
			return scanRR(&t.backup, &b.bctr, r, -1, &clk)
		}
		return scanRR(&t.primary, &b.ctr, r, first, &clk)
	})
}

// scanRR takes the first eligible peer of ring g from slot first (or from
// the next turn of c if first < 0), visiting each slot at most once, and
// returns its index in its list, or -1. The slots it skips are turns used
// up: it advances c past them, so that serially the rotation is Ribbon's,
// where each try advances the counter.
func scanRR(g *rrRing, c *atomic.Uint64, r *Request, first int, clk *lazyClock) int {
	if g.n == 0 {
		return -1
	}
	start := uint64(first)
	if first < 0 {
		start = g.next(c)
	}
	for k := uint64(0); k < g.n; k++ {
		j := start + k
		if j >= g.n {
			j -= g.n
		}
		s := &g.slots[j]
		if r.isTried(s.i) || !s.p.take(clk) {
			continue
		}
		if k != 0 {
			c.Add(k)
		}
		return s.i
	}
	return -1
}

// Done implements Picker.Done.
func (b *RoundRobin) Done(p *Peer, o Outcome) error {
	return b.done(p, o)
}
