package balancer

import (
	"cmp"
	"slices"
	"sync/atomic"
)

// The precomputed cycle: while a weighted round-robin's peers are all
// healthy at full weight, its sequence is periodic with period W, the sum of
// the weights, so SmoothWRR and ClassicWRR serve it from one period stored
// as a table: one atomic add on a shared counter, its reduction modulo W
// (fastMod), one table read. Anything that breaks the period closes the
// cycle, which writes back the exact current weights it stands for.

// maxCycle bounds the length of the precomputed cycle from which
// SmoothWRR and ClassicWRR serve first attempts without a lock, and so its
// memory (8 bytes an entry with its checkpoints): 65,536. With weights
// summing past it, or with so many peers or distinct weights that building
// the cycle would take too long, every pick runs the scan under a lock,
// which is still exact. The pickers' docs state the number.
const maxCycle = 1 << 16

// MaxCycle is the bound on the precomputed cycle of SmoothWRR and
// ClassicWRR, 65,536 units of weight; nothing sets it, and the pickers'
// docs state it.
//
// Deprecated: an internal bound no option sets; a weight sum above it is
// accepted (up to MaxWeightSum) and only picks under a lock.
const MaxCycle = maxCycle

// maxCycleWork bounds the work of building a cycle: W steps, each comparing
// the d distinct weights of the live primaries (buildCycle), or finding the
// first of ClassicWRR's stops in n/4096+1 words (classicRound), about 10 ms
// at the bound.
const maxCycleWork = 1 << 23

// closedBit marks a cycle's counter closed: a fast pick that finds it set
// takes the locked path instead.
const closedBit = 1 << 63

// cycle is one period of the smooth sequence for a fixed set of weights,
// starting from all current weights at 0.
type cycle struct {
	list    *peerList
	seq     []int32 // seq[k]: index in list.primary of pick k
	weights []int64 // weight of each primary; 0 for down peers
	w       uint64  // len(seq), the sum of weights
	counts  []int64 // scratch for close; guarded by the owner's mu
	base    []int64 // current weights at the cycle's start; nil: all 0

	// Set by newCycle; cycles built otherwise leave them zero and must
	// reduce their counter with % and count picks from seq alone.
	mod   fastMod // reduces the counter modulo w
	marks []int32 // marks[(j-1)·n+i]: picks of primary i in seq[:j·n], n = len(list.primary)

	// The counter every pick writes, alone on its cache line: sharing one
	// with the fields above, which every pick reads, would make the other
	// core's add steal them between this core's add and its reads.
	_   [64]byte
	ctr atomic.Uint64
	_   [56]byte
}

// newCycle returns a cycle over seq, the period of list's primaries with the
// given weights, ready for next and countLocked.
func newCycle(l *peerList, seq []int32, weights []int64) *cycle {
	n := len(l.primary)
	c := &cycle{
		list:    l,
		seq:     seq,
		weights: weights,
		w:       uint64(len(seq)),
		counts:  make([]int64, n),
		mod:     newFastMod(uint64(len(seq))),
	}
	// A checkpoint of every peer's count each n picks: W/n·n <= W entries,
	// no more than seq, so that counting the picks in any prefix reads one
	// checkpoint and fewer than n entries of seq.
	if n > 0 && len(seq) >= n {
		c.marks = make([]int32, len(seq)/n*n)
		run := make([]int32, n)
		for k, i := range seq[:len(c.marks)] {
			run[i]++
			if (k+1)%n == 0 {
				copy(c.marks[k+1-n:], run)
			}
		}
	}
	return c
}

// reopen returns a copy of c with a fresh counter: a cycle that opens again
// restarts at its first pick.
func (c *cycle) reopen() *cycle {
	return &cycle{list: c.list, seq: c.seq, weights: c.weights, w: c.w, counts: c.counts, mod: c.mod, marks: c.marks, base: c.base}
}

// slot returns the sequence's entry for counter value v (the v-th pick, from
// 1), or -1 for a closed cycle. Small enough to inline into each picker's
// fast path.
func (c *cycle) slot(v uint64) int32 {
	if v > foldAt { // also true for a closed counter: closedBit is far above
		return c.fold(v)
	}
	return c.seq[c.mod.reduce(v-1)]
}

// The fast paths that serve a fresh request's first attempt from an open
// cycle (SmoothWRR, ClassicWRR, the hash methods' fallback) each spell out
// its four steps, slot(ctr.Add(1)), the primary, pick, fastFirst: a method
// holding them costs 124 in the inliner's budget of 80, and its call would
// add to the cheapest pick in the package.

// fold is slot's rare path, past foldAt: the entry by division, and the
// counter folded to v mod w, plus w so that a folded counter never reads 0
// (ClassicWRR reads 0 as "no pick served"). The fold succeeds only if no other pick moved
// the counter since v (nor closed it); if one did, a later pick folds it,
// long before it could reach 2^32. Since v and v mod w are congruent, every
// later slot, and the current weights closeLocked derives from the counter,
// are the same as without the fold.
func (c *cycle) fold(v uint64) int32 {
	if v&closedBit != 0 {
		return -1
	}
	c.ctr.CompareAndSwap(v, v%c.w+c.w)
	return c.seq[(v-1)%c.w]
}

// countLocked sets c.counts[i] to the picks of primary i among the first k
// of the sequence, k < w: from the last checkpoint at or before k, in O(n).
// Requires the owner's mu, which guards counts.
func (c *cycle) countLocked(k uint64) {
	n := uint64(len(c.list.primary))
	from := uint64(0)
	if j := k / n; j > 0 && j*n <= uint64(len(c.marks)) {
		from = j * n
		for i, m := range c.marks[from-n : from] {
			c.counts[i] = int64(m)
		}
	} else {
		clear(c.counts)
	}
	for _, i := range c.seq[from:k] {
		c.counts[i]++
	}
}

// baseOf returns primary i's current weight at the cycle's start.
func (c *cycle) baseOf(i int) int64 {
	if c.base == nil {
		return 0
	}
	return c.base[i]
}

// buildCycle computes one period of nginx's scan from all-zero current
// weights over the live primaries, or returns nil if that costs more than
// maxCycleWork. W runs of the scan would cost W·n; grouping the peers by
// weight makes it W·d, d the number of distinct weights, which at most
// about sqrt(2W) (d distinct positive weights sum to at least d(d+1)/2).
//
// Why the groups give the scan's answer exactly. Peers of equal weight w
// start level and receive the same additions, so their current weights
// differ only by W times the difference of their pick counts; the scan
// takes the largest, the first in list order on a tie. So within a group
// the next winner is always the member with the fewest picks, the first in
// order among those: by induction the group's members are picked in turn,
// in list order, and after P picks of the group its leading member is the
// (P mod size)-th, at t·w − W·⌊P/size⌋ at step t, no member below it in
// order standing higher. The scan's winner is the highest of the groups'
// leaders, and on a tie the first in list order. Peers of weight 0 never
// win (the current weights sum to W > 0 after the additions, so the
// maximum is positive) and are left out; down peers are skipped, as the
// scan skips them.
func buildCycle(l *peerList, w int64) *cycle {
	weights := make([]int64, len(l.primary))
	for i, p := range l.primary {
		if !p.down.Load() {
			weights[i] = p.smooth
		}
	}
	return cycleOf(l, weights, w)
}

// cycleOf is buildCycle for the given weights of l's primaries (0 for the
// down ones), w their sum. It reads nothing of the peers, so it needs no
// lock.
func cycleOf(l *peerList, weights []int64, w int64) *cycle {
	var order []int32 // live primaries of positive weight, by weight, then index
	for i, x := range weights {
		if x > 0 {
			order = append(order, int32(i))
		}
	}
	slices.SortStableFunc(order, func(a, b int32) int { return cmp.Compare(weights[a], weights[b]) })
	type group struct {
		w      int64
		member []int32 // in list order
		rounds int64   // ⌊P/size⌋ for the group's P picks so far
		pos    int     // P mod size: the leader
	}
	var groups []group
	for k := 0; k < len(order); {
		j := k
		for j < len(order) && weights[order[j]] == weights[order[k]] {
			j++
		}
		groups = append(groups, group{w: weights[order[k]], member: order[k:j]})
		k = j
	}
	if w*int64(len(groups)) > maxCycleWork {
		return nil
	}
	seq := make([]int32, w)
	for t := range seq {
		best, bestCW := -1, int64(0)
		for g := range groups {
			gr := &groups[g]
			cw := int64(t+1)*gr.w - w*gr.rounds
			if best < 0 || cw > bestCW ||
				cw == bestCW && gr.member[gr.pos] < groups[best].member[groups[best].pos] {
				best, bestCW = g, cw
			}
		}
		gr := &groups[best]
		seq[t] = gr.member[gr.pos]
		if gr.pos++; gr.pos == len(gr.member) {
			gr.pos = 0
			gr.rounds++
		}
	}
	return newCycle(l, seq, weights)
}
