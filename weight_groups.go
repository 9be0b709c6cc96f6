package balancer

import (
	"math/bits"
)

// groupedScanMin is the number of primaries from which the scan may keep
// its healthy peers grouped by weight (weightGroups); below it, nginx's
// plain scan is as fast.
const groupedScanMin = 16

// weightGroups is nginx's scan over the primaries in O(d + k + log n) a pick
// instead of O(n): d the number of distinct weights among the regular peers,
// k the number of the others, n the number of primaries. A regular peer is
// one every scan must treat alike by its weight alone: not down, no
// failures on record, no max_conns (so always eligible) and at full
// effective weight (so its effective weight no longer moves). Each scan
// adds w to every regular peer of weight w that the request has not tried,
// so within a group of equal weight the order of the current weights only
// changes where a peer is picked or skipped; the group keeps them as a heap
// of base values under one offset, current weight = base + offset, and a
// scan moves the offset, reads the top of each heap and compares the d
// tops, the other peers and their additions exactly as nginx does, ties to
// the first in list order. The winner gives the total back, its base drops
// and it sinks in its heap. So the picks, the current and the effective
// weights are nginx's, with no approximation.
//
// A peer leaves its group when it fails (Done) and joins it again when a
// scan has brought it back to full effective weight with no failures on
// record. The peers the request has tried are taken out of their heaps for
// the scan and put back with the current weight they had. While a
// weightGroups is in use the current weight of a grouped peer is base +
// offset, and Peer.currentWeight is refreshed only by materializeLocked.
// Guarded by the owner's mu.
type weightGroups struct {
	list   *peerList
	groups []weightGroup
	byW    map[int64]int32 // group of each weight, regular or not
	of     []int32         // of[i]: group of primary i, or -1 if it is scanned one by one
	base   []int64         // base[i]: current weight of grouped i minus its group's offset
	pos    []int32         // pos[i]: place of grouped i in its group's heap
	others []int32         // primaries scanned one by one, in no particular order
	live   int             // others that are not down: the cycle cannot resume while > 0
	unit   int64           // what a weight of 1 adds a scan: 1, or slowScale while a peer warms (guard_slowstart.go)

	out   []int32 // scratch: tried grouped peers held out of the scan
	outCW []int64
}

// weightGroup is the regular peers of one weight: a heap of primary indices,
// the highest base first, the lower index first on a tie.
type weightGroup struct {
	w    int64
	off  int64
	heap []int32
}

// regular reports whether p can be grouped: see weightGroups. A peer in
// slow start is not (guard_slowstart.go): its step moves with time.
func regular(p *Peer) bool {
	return p.clean() && p.effectiveWeight == p.smooth && p.warmFrom.Load() == 0
}

// newWeightGroups returns the groups for l's primaries, not yet filled (see
// regroup), or nil if l is too short for them to pay.
func newWeightGroups(l *peerList) *weightGroups {
	n := len(l.primary)
	if n < groupedScanMin {
		return nil
	}
	g := &weightGroups{
		list:   l,
		byW:    map[int64]int32{},
		of:     make([]int32, n),
		base:   make([]int64, n),
		pos:    make([]int32, n),
		others: make([]int32, 0, n),
		out:    make([]int32, 0, 64),
		outCW:  make([]int64, 0, 64),
	}
	for _, p := range l.primary {
		w := p.smooth
		if _, ok := g.byW[w]; !ok {
			g.byW[w] = int32(len(g.groups))
			g.groups = append(g.groups, weightGroup{w: w})
		}
	}
	for _, p := range l.primary {
		gr := &g.groups[g.byW[p.smooth]]
		gr.heap = append(gr.heap, 0) // capacity for every peer of its weight
	}
	return g
}

// regroup fills g from the peers' current weights, allocating nothing, and
// reports whether the groups make the scan cheaper than n steps: d + k at
// most n/2.
func (g *weightGroups) regroup() bool {
	g.others, g.live = g.others[:0], 0
	for gi := range g.groups {
		g.groups[gi].off = 0
		g.groups[gi].heap = g.groups[gi].heap[:0]
	}
	for i, p := range g.list.primary {
		if !regular(p) {
			g.of[i] = -1
			g.addOther(i)
			continue
		}
		gi := g.byW[p.smooth]
		g.of[i] = gi
		g.base[i] = p.currentWeight
		g.push(gi, int32(i))
	}
	return len(g.groups)+len(g.others) <= len(g.of)/2
}

func (g *weightGroups) addOther(i int) {
	g.others = append(g.others, int32(i))
	if !g.list.primary[i].down.Load() {
		g.live++
	}
}

// less orders a group's heap: higher base first, then lower index.
func (g *weightGroups) less(a, b int32) bool {
	return g.base[a] > g.base[b] || g.base[a] == g.base[b] && a < b
}

func (g *weightGroups) push(gi int32, i int32) {
	h := &g.groups[gi].heap
	g.pos[i] = int32(len(*h))
	*h = append(*h, i)
	g.up(gi, len(*h)-1)
}

// remove takes grouped i out of its heap, leaving of[i] as it was.
func (g *weightGroups) remove(i int32) {
	gi := g.of[i]
	h := &g.groups[gi].heap
	k, last := int(g.pos[i]), len(*h)-1
	if k != last {
		(*h)[k] = (*h)[last]
		g.pos[(*h)[k]] = int32(k)
	}
	*h = (*h)[:last]
	if k != last {
		g.down(gi, k)
		g.up(gi, k)
	}
}

func (g *weightGroups) up(gi int32, k int) {
	h := g.groups[gi].heap
	for k > 0 {
		parent := (k - 1) / 2
		if !g.less(h[k], h[parent]) {
			break
		}
		h[k], h[parent] = h[parent], h[k]
		g.pos[h[k]], g.pos[h[parent]] = int32(k), int32(parent)
		k = parent
	}
}

func (g *weightGroups) down(gi int32, k int) {
	h := g.groups[gi].heap
	for {
		c := 2*k + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && g.less(h[c+1], h[c]) {
			c++
		}
		if !g.less(h[c], h[k]) {
			return
		}
		h[k], h[c] = h[c], h[k]
		g.pos[h[k]], g.pos[h[c]] = int32(k), int32(c)
		k = c
	}
}

// cw returns the current weight of grouped i.
func (g *weightGroups) cw(i int32) int64 { return g.base[i] + g.groups[g.of[i]].off }

// demote moves grouped primary i to the peers scanned one by one, with its
// current weight written back to the peer.
func (g *weightGroups) demote(i int32) {
	g.list.primary[i].currentWeight = g.cw(i)
	g.remove(i)
	g.of[i] = -1
	g.addOther(int(i))
}

// promote moves others[k], which is regular, into its group.
func (g *weightGroups) promote(k int) {
	i := g.others[k]
	p := g.list.primary[i]
	last := len(g.others) - 1
	g.others[k] = g.others[last]
	g.others = g.others[:last]
	g.live--
	gi := g.byW[p.smooth]
	g.of[i] = gi
	g.base[i] = p.currentWeight - g.groups[gi].off
	g.push(gi, i)
}

// materializeLocked writes every grouped peer's current weight to it.
func (g *weightGroups) materializeLocked() {
	for i, gi := range g.of {
		if gi >= 0 {
			g.list.primary[i].currentWeight = g.cw(int32(i))
		}
	}
}

// scan is scanSmooth over the list's primaries; see weightGroups. It
// leaves the winner's current weight written to it. With ws set (a peer
// may be warming), the others step by warmStep, in the units g.unit
// says, and a peer whose warm-up is over is let out of slow start.
func (g *weightGroups) scan(r *Request, clk *lazyClock, ws *slowStart) *Peer {
	peers := g.list.primary
	g.out, g.outCW = g.out[:0], g.outCW[:0]
	if r != nil && r.attempts > 0 {
		g.holdTried(r)
	}
	best, bestCW := int32(-1), int64(0)
	var total int64
	for gi := range g.groups {
		gr := &g.groups[gi]
		if len(gr.heap) == 0 {
			continue
		}
		gr.off += gr.w * g.unit
		total += gr.w * g.unit * int64(len(gr.heap))
		top := gr.heap[0]
		if cw := g.base[top] + gr.off; best < 0 || cw > bestCW || cw == bestCW && top < best {
			best, bestCW = top, cw
		}
	}
	for _, i := range g.others {
		p := peers[i]
		if r != nil && r.isTried(int(i)) || p.down.Load() || p.full() ||
			p.fails.Load() != 0 && p.inFailWindow(clk.get()) && !p.panics(clk) {
			continue // ineligible, as in scanSmooth
		}
		if ws != nil {
			total += warmStep(p, ws, clk.get())
			ws.settleLocked(p, clk.get())
		} else {
			total += smoothStep(p)
		}
		if cw := p.currentWeight; best < 0 || cw > bestCW || cw == bestCW && i < best {
			best, bestCW = i, cw
		}
	}
	var winner *Peer
	if best >= 0 {
		winner = peers[best]
		if gi := g.of[best]; gi >= 0 {
			g.base[best] -= total
			g.down(gi, int(g.pos[best]))
			winner.currentWeight = g.cw(best)
		} else {
			winner.currentWeight -= total
			if winner.fails.Load() != 0 {
				winner.probeLocked(clk.get())
			}
		}
	}
	for k, i := range g.out {
		g.base[i] = g.outCW[k] - g.groups[g.of[i]].off
		g.push(g.of[i], i)
	}
	for k := len(g.others) - 1; k >= 0; k-- {
		if regular(peers[g.others[k]]) {
			g.promote(k)
		}
	}
	return winner
}

// holdTried takes the grouped peers r has tried out of their heaps for one
// scan, noting their current weights in out and outCW.
func (g *weightGroups) holdTried(r *Request) {
	n := len(g.of)
	for w := -1; w < len(r.more); w++ {
		word, at := r.tried[0], 0
		if w >= 0 {
			word, at = r.more[w], 64*(w+1)
		}
		for ; word != 0; word &= word - 1 {
			i := at + bits.TrailingZeros64(word)
			if i >= n || g.of[i] < 0 {
				continue
			}
			g.out = append(g.out, int32(i))
			g.outCW = append(g.outCW, g.cw(int32(i)))
			g.remove(int32(i))
		}
	}
}
