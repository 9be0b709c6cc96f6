package balancer

import "math/bits"

// lcIndex is nginx's least_conn pick over the primaries in O(d + k + t·log
// n) instead of O(n): d the number of distinct weights among the regular
// peers, k the number of the others, t the peers the request has tried, n
// the number of primaries. The derivation, step by step:
//
//  1. nginx's rule. Among the eligible peers the request has not tried, T is
//     the set with the lowest load conns/weight (cross multiplied). With one
//     peer in T it wins and no weight moves. With more, each peer of T adds
//     its effective weight to its current weight (and raises the effective
//     weight by one if below the weight), the largest current weight wins,
//     the first in list order on a tie, and the winner gives back the total
//     added. Peers outside T are not touched. (The first loop's "best" only
//     names the first peer of T, from which the second loop starts: every
//     peer of T is at or after it, so the second loop covers all of T.)
//  2. Regular peers. A peer that is not down, has no failures on record, is
//     at full effective weight (so its step adds exactly its weight, and
//     never changes it), has a weight above 0 and is not warming (slow start)
//     is eligible exactly when it is below its max_conns and untried. Such
//     a peer lives in the heap of its weight group; one at its max_conns is
//     parked out of the heaps (lcFull) until a report lowers its count; the
//     others (down, failed, recovering, weight 0) are scanned one by one,
//     nginx's test in full, as before.
//  3. One weight group. Within a group of weight w, the peers' loads are
//     ordered as their counts. So the least loaded of the group are those
//     at the group's lowest count c, and they are all in T when the group
//     is at the lowest load at all (a peer of the group with load equal to
//     the minimum has count c). Those peers step together: each adds w.
//     Keeping steps[c], the steps taken at count c, and for each peer base
//     = current − w·steps[c], one step of all of them is steps[c]++, and
//     the order of their current weights is the order of their bases. The
//     heap is ordered by (count ascending, base descending, index
//     ascending), so its top is the group's candidate: the highest current
//     weight among its peers in T, the first in list order on a tie. And
//     the total they add is w·count[c], count[c] the peers at count c.
//  4. The pick. The lowest load is the least of the d group tops' and the
//     others'; T is the tied tops' groups at their counts and the tied
//     others. The winner is the highest current weight among the tops and
//     the tied others, ties to the lower index: exactly nginx's. Its base
//     (or its own current weight) gives back the total, its count grows by
//     one, and it moves within its heap, or parks at its max_conns.
//  5. Moves. A peer whose count changes (a pick, a report) keeps its current
//     weight: base' = base + w·steps[c] − w·steps[c']. When the last peer
//     leaves count c, steps[c] restarts at 0; a group whose steps at one
//     count reach limit folds them into its bases, so w·steps stays below
//     2^50 and no sum overflows.
//  6. Tried peers. A retry takes the request's tried peers out of their
//     heaps for the pick (their current weight written to the peer) and
//     puts them back after, unchanged.
//
// A peer stops being regular only under the picker's lock: by a failure
// (Done, with the lock), or by a list change (a peer set down, a weight or
// max_conns changed), which makes the index afresh; a readmitted peer that
// warms (slow start) sends the picks to nginx's scan until no peer warms,
// after which the index is filled afresh. So every
// report refreshes its peer under the lock (LeastConn.Done), and a peer
// that became regular (its effective weight back up after steps, its
// failures cleared by a probe's success) joins its heap at the next step or
// report that finds it so. Reading the in-flight count once per pick for
// the others, and the heaps' counts as the index holds them, a report that
// ends an attempt while a pick runs counts for the next pick: as in the
// scan, a count that drops meanwhile can only make a peer look busier for
// that one pick.
//
// While the index is in use, a regular peer's current weight is base +
// w·steps[count] (currentOf), and Peer.currentWeight is written only when
// the peer leaves the heaps (for the scan, Peer.State, a retry). Guarded by
// the owner's mu.
type lcIndex struct {
	list   *peerList // the list the index is filled for; nil: not in use
	built  *peerList // the list the arrays below are sized and grouped for
	groups []lcGroup
	grp    []int32 // group of primary i, by its weight
	at     []uint8 // where primary i is: lcOther, lcHeap, lcFull, lcHeld
	conns  []int64 // count of primary i as indexed (lcHeap, lcFull, lcHeld); for lcOther, as read by the pick
	base   []int64 // current weight of a peer in a heap, minus w·steps[conns]
	pos    []int32 // place of primary i in its heap (lcHeap), or in others (lcOther)
	others []int32 // primaries scanned one by one, in no order
	held   []int32 // scratch: tried peers taken out of their heaps

	// foldAt, if set (by the tests), is the steps at one count at which
	// a group folds them into its bases; 0: 2^50/w.
	foldAt int64
}

// Where a primary is in the index.
const (
	lcOther uint8 = iota // scanned one by one
	lcHeap               // regular, in its group's heap
	lcFull               // regular, at its max_conns: parked
	lcHeld               // regular, tried by the request being picked for
)

// lcSkip marks, in conns, an other that the pick found ineligible.
const lcSkip = -1

// lcGroup is the regular peers of one weight; see lcIndex.
type lcGroup struct {
	w     int64
	limit int64   // steps at one count past which they fold into the bases
	heap  []int32 // primaries, ordered by lcIndex.less
	steps []int64 // steps[c]: the steps taken by the group's peers at count c
	count []int32 // count[c]: the group's peers in its heap at count c
}

// lcRegular reports whether p can live in a heap: see lcIndex.
func lcRegular(p *Peer) bool {
	return !p.down.Load() && p.fails.Load() == 0 && p.smooth > 0 &&
		p.effectiveWeight == p.smooth && p.smooth == p.weight.Load() && p.warmFrom.Load() == 0
}

// prepare sizes and groups the index for l, not yet filled (fillLocked
// fills it at the first pick that uses it). Runs after every list change,
// when publish has set every current weight to 0.
func (ix *lcIndex) prepare(l *peerList) {
	ix.list = nil
	n := len(l.primary)
	ix.built = l
	ix.grp = make([]int32, n)
	ix.at = make([]uint8, n)
	ix.conns = make([]int64, n)
	ix.base = make([]int64, n)
	ix.pos = make([]int32, n)
	ix.others = make([]int32, 0, n)
	ix.held = make([]int32, 0, 64)
	ix.groups = ix.groups[:0]
	byW := map[int64]int32{}
	for i, p := range l.primary {
		w := p.weight.Load()
		g, ok := byW[w]
		if !ok {
			g = int32(len(ix.groups))
			byW[w] = g
			limit := int64(1<<50) / max(w, 1)
			if ix.foldAt != 0 {
				limit = ix.foldAt
			}
			ix.groups = append(ix.groups, lcGroup{w: w, limit: limit})
		}
		ix.grp[i] = g
	}
	sizes := make([]int, len(ix.groups))
	for _, g := range ix.grp {
		sizes[g]++
	}
	for g := range ix.groups {
		ix.groups[g].heap = make([]int32, 0, sizes[g])
		ix.groups[g].steps = make([]int64, 8)
		ix.groups[g].count = make([]int32, 8)
	}
}

// usable reports whether the index can serve picks on l.
func (ix *lcIndex) usable(l *peerList) bool { return ix.built == l }

// fillLocked puts every primary of l (ix.built) where it belongs, from the
// peers' own current weights and counts, allocating nothing.
func (ix *lcIndex) fillLocked(l *peerList) {
	for g := range ix.groups {
		gr := &ix.groups[g]
		gr.heap = gr.heap[:0]
		clear(gr.steps)
		clear(gr.count)
	}
	ix.others = ix.others[:0]
	ix.list = l
	for i := range l.primary {
		ix.place(int32(i))
	}
}

// place puts primary i, not in the index, where it belongs now.
func (ix *lcIndex) place(i int32) {
	p := ix.list.primary[i]
	switch {
	case !lcRegular(p):
		ix.at[i] = lcOther
		ix.pos[i] = int32(len(ix.others))
		ix.others = append(ix.others, i)
	case p.full():
		ix.at[i], ix.conns[i] = lcFull, p.inFlight()
	default:
		ix.push(i, p.inFlight(), p.currentWeight)
	}
}

// dropLocked stops using the index, writing every current weight it holds
// to its peer, so that nginx's scan can take over.
func (ix *lcIndex) dropLocked() {
	if ix.list == nil {
		return
	}
	for i, a := range ix.at {
		if a == lcHeap {
			ix.list.primary[i].currentWeight = ix.currentOf(int32(i))
		}
	}
	ix.list = nil
}

// currentOf returns the current weight of primary i, in a heap.
func (ix *lcIndex) currentOf(i int32) int64 {
	g := &ix.groups[ix.grp[i]]
	return ix.base[i] + g.w*g.steps[ix.conns[i]]
}

// impliedLocked returns p's current weight if the index holds it, for
// Peer.State.
func (ix *lcIndex) impliedLocked(p *Peer) (int64, bool) {
	l := ix.list
	if l == nil || p.backup.Load() || p.index >= len(l.primary) || l.primary[p.index] != p || ix.at[p.index] != lcHeap {
		return 0, false
	}
	return ix.currentOf(int32(p.index)), true
}

// less orders a group's heap: lower count first, then higher base (the
// current weight, at one count), then lower index.
func (ix *lcIndex) less(a, b int32) bool {
	ca, cb := ix.conns[a], ix.conns[b]
	return ca < cb || ca == cb && (ix.base[a] > ix.base[b] || ix.base[a] == ix.base[b] && a < b)
}

// push puts regular primary i, with c in flight and current weight cw, in
// its heap.
func (ix *lcIndex) push(i int32, c, cw int64) {
	g := &ix.groups[ix.grp[i]]
	for int64(len(g.steps)) <= c {
		g.steps = append(g.steps, 0)
		g.count = append(g.count, 0)
	}
	ix.at[i], ix.conns[i] = lcHeap, c
	ix.base[i] = cw - g.w*g.steps[c]
	g.count[c]++
	ix.pos[i] = int32(len(g.heap))
	g.heap = append(g.heap, i)
	ix.up(g, len(g.heap)-1)
}

// pop takes primary i out of its heap and returns its current weight; the
// caller says where it goes.
func (ix *lcIndex) pop(i int32) int64 {
	g := &ix.groups[ix.grp[i]]
	cw := ix.currentOf(i)
	c := ix.conns[i]
	if g.count[c]--; g.count[c] == 0 {
		g.steps[c] = 0
	}
	k, last := int(ix.pos[i]), len(g.heap)-1
	if k != last {
		g.heap[k] = g.heap[last]
		ix.pos[g.heap[k]] = int32(k)
	}
	g.heap = g.heap[:last]
	if k != last {
		ix.down(g, k)
		ix.up(g, k)
	}
	return cw
}

// move gives primary i, in a heap, the count c and the current weight cw.
func (ix *lcIndex) move(i int32, c, cw int64) {
	g := &ix.groups[ix.grp[i]]
	old := ix.conns[i]
	if c != old {
		if g.count[old]--; g.count[old] == 0 {
			g.steps[old] = 0
		}
		for int64(len(g.steps)) <= c {
			g.steps = append(g.steps, 0)
			g.count = append(g.count, 0)
		}
		g.count[c]++
		ix.conns[i] = c
	}
	nb := cw - g.w*g.steps[c]
	ix.base[i] = nb
	k := int(ix.pos[i])
	ix.down(g, k)
	ix.up(g, int(ix.pos[i]))
}

func (ix *lcIndex) up(g *lcGroup, k int) {
	h := g.heap
	for k > 0 {
		parent := (k - 1) / 2
		if !ix.less(h[k], h[parent]) {
			return
		}
		h[k], h[parent] = h[parent], h[k]
		ix.pos[h[k]], ix.pos[h[parent]] = int32(k), int32(parent)
		k = parent
	}
}

func (ix *lcIndex) down(g *lcGroup, k int) {
	h := g.heap
	for {
		c := 2*k + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && ix.less(h[c+1], h[c]) {
			c++
		}
		if !ix.less(h[c], h[k]) {
			return
		}
		h[k], h[c] = h[c], h[k]
		ix.pos[h[k]], ix.pos[h[c]] = int32(k), int32(c)
		k = c
	}
}

// toOther makes primary i, out of the heaps, one of the others.
func (ix *lcIndex) toOther(i int32) {
	ix.at[i] = lcOther
	ix.pos[i] = int32(len(ix.others))
	ix.others = append(ix.others, i)
}

// fromOthers takes primary i out of the others.
func (ix *lcIndex) fromOthers(i int32) {
	k, last := ix.pos[i], int32(len(ix.others)-1)
	if k != last {
		j := ix.others[last]
		ix.others[k] = j
		ix.pos[j] = k
	}
	ix.others = ix.others[:last]
}

// refreshLocked brings p, whose count or failure state a report has just
// changed, to where it belongs now, if the index is in use and holds it.
func (ix *lcIndex) refreshLocked(p *Peer) {
	l := ix.list
	if l == nil || p.backup.Load() || p.index >= len(l.primary) || l.primary[p.index] != p {
		return
	}
	i := int32(p.index)
	switch ix.at[i] {
	case lcHeap:
		if !lcRegular(p) {
			p.currentWeight = ix.pop(i)
			ix.toOther(i)
			return
		}
		ix.move(i, p.inFlight(), ix.currentOf(i))
	case lcFull:
		if !lcRegular(p) {
			ix.toOther(i)
		} else if !p.full() {
			ix.push(i, p.inFlight(), p.currentWeight)
		}
	case lcOther:
		if lcRegular(p) {
			ix.fromOthers(i)
			ix.place(i)
		}
	}
}

// pickLocked is scanLeastConn over l's primaries (see lcIndex): it returns
// the winner's index with its attempt counted in flight, or -1.
func (ix *lcIndex) pickLocked(l *peerList, r *Request, clk *lazyClock) int {
	if ix.list != l {
		ix.fillLocked(l)
	}
	if r != nil && r.attempts > 0 {
		ix.holdTried(r)
	}
	peers := l.primary
	// The least load, (bc, bw), among the groups' tops and the others;
	// tied counts the peers at it, least is one of them.
	var bc, bw int64
	least, tied := int32(-1), int64(0)
	for gi := range ix.groups {
		g := &ix.groups[gi]
		if len(g.heap) == 0 {
			continue
		}
		top := g.heap[0]
		c := ix.conns[top]
		if least >= 0 {
			switch compareLoad(c, g.w, bc, bw) {
			case 1:
				continue
			case 0:
				tied += int64(g.count[c])
				continue
			}
		}
		bc, bw, least, tied = c, g.w, top, int64(g.count[c])
	}
	for _, i := range ix.others {
		p := peers[i]
		if r.isTried(int(i)) || !p.eligible(clk) {
			ix.conns[i] = lcSkip
			continue
		}
		pc, pw := p.inFlight(), p.weight.Load()
		ix.conns[i] = pc
		if least >= 0 {
			switch compareLoad(pc, pw, bc, bw) {
			case 1:
				continue
			case 0:
				tied++
				continue
			}
		}
		bc, bw, least, tied = pc, pw, i, 1
	}
	if least < 0 {
		ix.putBack()
		return -1
	}
	best := least
	if tied > 1 {
		best = ix.step(peers, bc, bw)
	}
	p := peers[best]
	c := p.pick()
	if ix.at[best] == lcHeap {
		if p.maxConns.Load() != 0 && c >= p.maxConns.Load() {
			p.currentWeight = ix.pop(best)
			ix.at[best], ix.conns[best] = lcFull, c
		} else {
			ix.move(best, c, ix.currentOf(best))
		}
	} else if p.fails.Load() != 0 {
		p.probeLocked(clk.get())
	}
	ix.putBack()
	return int(best)
}

// step is nginx's smooth step over T, the peers at load (bc, bw): the
// tied groups' peers at their lowest count, lazily, and the tied others,
// each in full. It returns the winner, its current weight given back.
func (ix *lcIndex) step(peers []*Peer, bc, bw int64) int32 {
	best, bestCW := int32(-1), int64(0)
	var total int64
	for gi := range ix.groups {
		g := &ix.groups[gi]
		if len(g.heap) == 0 {
			continue
		}
		top := g.heap[0]
		c := ix.conns[top]
		if compareLoad(c, g.w, bc, bw) != 0 {
			continue
		}
		if g.steps[c]++; g.steps[c] > g.limit {
			ix.fold(g, c)
		}
		total += g.w * int64(g.count[c])
		if cw := ix.currentOf(top); best < 0 || cw > bestCW || cw == bestCW && top < best {
			best, bestCW = top, cw
		}
	}
	stepped := false
	for _, i := range ix.others {
		pc := ix.conns[i]
		p := peers[i]
		if pc == lcSkip || compareLoad(pc, p.weight.Load(), bc, bw) != 0 {
			continue
		}
		total += smoothStep(p)
		stepped = true
		if cw := p.currentWeight; best < 0 || cw > bestCW || cw == bestCW && i < best {
			best, bestCW = i, cw
		}
	}
	if ix.at[best] == lcHeap {
		// The winner, its group's top, sinks: its base drops.
		ix.base[best] -= total
		g := &ix.groups[ix.grp[best]]
		ix.down(g, int(ix.pos[best]))
	} else {
		peers[best].currentWeight -= total
	}
	if stepped {
		// A step may have brought an other back to full effective weight.
		for k := len(ix.others) - 1; k >= 0; k-- {
			if i := ix.others[k]; i != best && lcRegular(peers[i]) {
				ix.fromOthers(i)
				ix.place(i)
			}
		}
	}
	return best
}

// fold writes the steps group g took at count c into the bases of its
// peers there, and restarts them at 0.
func (ix *lcIndex) fold(g *lcGroup, c int64) {
	add := g.w * g.steps[c]
	for _, i := range g.heap {
		if ix.conns[i] == c {
			ix.base[i] += add
		}
	}
	g.steps[c] = 0
}

// holdTried takes the peers r has tried out of their heaps for one pick,
// their current weights written to them.
func (ix *lcIndex) holdTried(r *Request) {
	n := len(ix.at)
	ix.held = ix.held[:0]
	for w := -1; w < len(r.more); w++ {
		word, at := r.tried[0], 0
		if w >= 0 {
			word, at = r.more[w], 64*(w+1)
		}
		for ; word != 0; word &= word - 1 {
			i := at + bits.TrailingZeros64(word)
			if i >= n || ix.at[i] != lcHeap {
				continue
			}
			ix.list.primary[i].currentWeight = ix.pop(int32(i))
			ix.at[i] = lcHeld
			ix.held = append(ix.held, int32(i))
		}
	}
}

// putBack returns the peers holdTried took out to their heaps.
func (ix *lcIndex) putBack() {
	for _, i := range ix.held {
		ix.push(i, ix.conns[i], ix.list.primary[i].currentWeight)
	}
	ix.held = ix.held[:0]
}
