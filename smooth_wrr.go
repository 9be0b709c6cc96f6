package balancer

import (
	"cmp"
	"math/bits"
	"slices"
	"sync/atomic"
)

// SmoothWRR is nginx's smooth weighted round-robin, as nginx 1.22 runs it
// (ngx_http_upstream_get_peer in ngx_http_upstream_round_robin.c, from nginx
// 1.3.0/1.2.1 on): on each pick every eligible peer's current_weight grows by
// its effective_weight, the largest wins (the first in order on a tie), and
// the winner gives back the total. Weights {5,1,1} give a a b a c a a.
// Failures, max_fails/fail_timeout and the probe after the window, backup
// and down peers, max_conns, the single-server rule and per-request tries
// all follow nginx; see the Peer and Request docs.
//
// Cost of a pick. While every primary peer is healthy at full weight, the
// sequence is periodic with period W, the sum of the weights, so SmoothWRR
// serves it from a precomputed cycle: one atomic add on a shared counter,
// its reduction modulo W by two multiplications, one table read and the
// peer's in-flight increment; no lock, O(1). The cycle is built once per
// peer-list change in O(W·d), d the number of distinct weights, holds W
// entries of 4 bytes plus W/n·n checkpoint counts of 4 bytes, and is used
// only when W <= MaxCycle and W·d <= maxCycleWork. Anything that breaks the
// period (a failure, a retry, a recovering effective weight, max_conns)
// turns the cycle back into the exact current weights it stands for, in
// O(n) from the nearest checkpoint, and SmoothWRR runs nginx's scan under
// a lock until every peer is back at full health. From there the cycle
// resumes: at once if every current weight is 0, else after the scan has
// recorded one period, W picks, from the state it found (healthy peers
// repeat every W picks, but a retry or a failure leaves them on another
// orbit than the one from 0), which is then served as a cycle of its own. The scan is O(n) for short lists; from 16
// primaries on it keeps the healthy ones grouped by weight (see
// weightGroups) and costs O(d + k + log n), k the number of peers not at
// full health, with the same picks and weights as nginx's.
//
// The zero value is not usable; use NewSmoothWRR. SmoothWRR is safe for
// concurrent use by multiple goroutines.
type SmoothWRR struct {
	peerSet
	cycle atomic.Pointer[cycle] // nil while the exact scan is in charge
	built *cycle                // last cycle built, reused for the same gen; guarded by mu

	// The scan's grouping of the primaries (nil: plain scan), the list it
	// was decided for since the cycle last closed, and the last one built,
	// regrouped in place for the same list; guarded by mu.
	groups      *weightGroups
	groupedFor  *peerList
	groupsBuilt *weightGroups

	// The orbit recorder. Healthy peers whose current weights are not all
	// 0 (after a retry or a recovered failure) repeat a period of W picks
	// that the cycle built from 0 does not hold, so the scan records its
	// picks from such a state, recBase; once W picks later the state is
	// recBase again, the record is that period and is served as a cycle.
	// recFor is the list being recorded for, nil when not recording.
	// Guarded by mu.
	rec     []int32
	recBase []int64
	recW    int64 // the period: the live primaries' weights summed
	recFor  *peerList

	sinceCheck int // scan picks since maybeOpenLocked last ran; guarded by mu
}

var _ Picker = (*SmoothWRR)(nil)

// MaxCycle bounds the length of the precomputed cycle, and so its memory
// (8 bytes an entry with its checkpoints): with weights summing past it,
// every pick runs the scan, which is still exact, and grouped by weight for
// long lists.
const MaxCycle = 1 << 16

// maxCycleWork bounds the work of building a cycle: W steps, each comparing
// the d distinct weights of the live primaries (buildCycle), about 10 ms at
// the bound.
const maxCycleWork = 1 << 23

// closedBit marks a cycle's counter closed: a fast pick that finds it set
// takes the locked path instead.
const closedBit = 1 << 63

// cycleFoldAt is where a cycle's counter folds back to a small value
// congruent to it modulo W, so that the fast path can reduce it with
// cycle.mod. It is far below closedBit, so one comparison with it also
// catches a closed counter.
const cycleFoldAt = 1 << 31

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
	m     uint64  // ⌈2^64/w⌉, for mod
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
		m:       ^uint64(0)/uint64(len(seq)) + 1,
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
	return &cycle{list: c.list, seq: c.seq, weights: c.weights, w: c.w, counts: c.counts, m: c.m, marks: c.marks, base: c.base}
}

// mod returns v mod w for v < 2^32 by Lemire's fastmod (Lemire, Kaser and
// Kurz, "Faster Remainder by Direct Computation", 2019): the low 64 bits of
// m·v are the fraction v/w scaled by 2^64, and multiplying that fraction by
// w leaves the remainder in the high 64 bits. Exact for every 32-bit v and
// w; two multiplications where % is a 64-bit division, the slowest step of
// the fast path after its two atomic adds.
func (c *cycle) mod(v uint64) uint64 {
	hi, _ := bits.Mul64(c.m*uint64(uint32(v)), c.w)
	return hi
}

// fold is the rare path of Pick's cycle, past cycleFoldAt: the slot by division, and the
// counter folded to v mod w. The fold succeeds only if no other pick moved
// the counter since v (nor closed it); if one did, a later pick folds it,
// long before it could reach 2^32. Since v and v mod w are congruent, every
// later slot, and the current weights closeLocked derives from the counter,
// are the same as without the fold.
func (c *cycle) fold(v uint64) (int32, bool) {
	if v&closedBit != 0 {
		return 0, false
	}
	c.ctr.CompareAndSwap(v, v%c.w)
	return c.seq[(v-1)%c.w], true
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

// NewSmoothWRR returns a SmoothWRR over peers. It accepts WithClock.
func NewSmoothWRR(peers []*Peer, opts ...Option) (*SmoothWRR, error) {
	cfg, err := newConfig("SmoothWRR", optClock, opts)
	if err != nil {
		return nil, err
	}
	s := &SmoothWRR{}
	s.currentWeight = s.impliedLocked
	if err := s.init(peers, cfg, s.changedLocked); err != nil {
		return nil, err
	}
	return s, nil
}

// Pick returns the next peer in nginx's smooth order. It is O(1) and
// lock-free while the weights are static (or there is one peer) and r is
// fresh; otherwise it runs the scan under the lock.
func (s *SmoothWRR) Pick(r *Request) (*Peer, error) {
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			// The cycle's next slot, or a closed cycle: written out here
			// rather than in a method, which would be too large to inline.
			v, ok := c.ctr.Add(1), true
			var i int32
			if v <= cycleFoldAt {
				i = c.seq[c.mod(v-1)]
			} else {
				i, ok = c.fold(v)
			}
			if ok {
				p := c.list.primary[i]
				p.conns.Add(1)
				if r != nil {
					r.begin(c.list)
					r.record(int(i))
				}
				return p, nil
			}
		} else if l := s.load(); l.single {
			// nginx's single-server rule reads only down and max_conns
			// and moves no weight (RR.c 626-638): no lock needed.
			if p := l.primary[0]; !p.down.Load() && acquirePeer(p) {
				if r != nil {
					r.begin(l)
					r.record(0)
				}
				return p, nil
			}
		}
	}
	return s.pickSlow(r)
}

// pickSlow is Pick's exact scan, kept out of Pick so that the lock and its
// deferred release stay off the cycle's path.
func (s *SmoothWRR) pickSlow(r *Request) (*Peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pickLocked(r)
}

func (s *SmoothWRR) pickLocked(r *Request) (*Peer, error) {
	l := s.load()
	if l.empty() {
		return nil, ErrNoPeers
	}
	fresh := r.fresh()
	// A nil r is a request that will not be retried: it needs no tried
	// set, which past 64 peers would have to grow.
	if r != nil && !r.begin(l) {
		return nil, ErrTriesExhausted
	}
	s.closeLocked()
	p := s.pickSmoothLocked(l, r, &rrClock{now: s.now})
	if p == nil {
		s.recFor = nil
		return nil, ErrNoLivePeer
	}
	switch {
	case s.recFor != l:
		// Not recording: see whether the cycle can resume, or recording
		// start. That check is O(n), so it is made when the winner lands
		// at 0 and otherwise once every n picks: amortized O(1).
		s.sinceCheck++
		if p.backup || p.currentWeight == 0 || s.sinceCheck >= len(l.primary) {
			s.sinceCheck = 0
			s.maybeOpenLocked(l)
		}
	case fresh && !p.backup:
		s.recordLocked(l, p)
	default:
		s.recFor = nil // a retry or a backup is not a step of the period
	}
	return p, nil
}

// recordLocked adds the pick of p to the record, and at W picks turns it
// into a cycle if the state came back to where recording began.
func (s *SmoothWRR) recordLocked(l *peerList, p *Peer) {
	s.rec = append(s.rec, int32(p.index))
	if int64(len(s.rec)) < s.recW {
		return
	}
	if g := s.groups; g != nil {
		g.materializeLocked()
	}
	same := true
	for i, q := range l.primary {
		if q.currentWeight != s.recBase[i] {
			same = false
			break
		}
	}
	if !same {
		// Not back yet (or not periodic from there): record afresh from
		// here, which costs the scan nothing more.
		s.startRecordLocked(l, s.recW)
		return
	}
	weights := make([]int64, len(l.primary))
	for i, q := range l.primary {
		if !q.down.Load() {
			weights[i] = q.weight.Load()
		}
	}
	c := newCycle(l, slices.Clone(s.rec), weights)
	c.base = slices.Clone(s.recBase)
	s.recFor = nil
	s.cycle.Store(c)
	s.groups, s.groupedFor = nil, nil
}

// startRecordLocked starts recording the period from the current state.
// Requires every grouped weight to be materialized.
func (s *SmoothWRR) startRecordLocked(l *peerList, w int64) {
	s.recFor, s.recW = l, w
	s.rec = s.rec[:0]
	s.recBase = s.recBase[:0]
	for _, q := range l.primary {
		s.recBase = append(s.recBase, q.currentWeight)
	}
}

// pickSmoothLocked is nginx's ngx_http_upstream_get_round_robin_peer: the
// single-server shortcut, then the primaries, then the backups once no
// primary is eligible. It records the pick in r, if r is not nil, and counts
// it in flight.
func (s *SmoothWRR) pickSmoothLocked(l *peerList, r *Request, clk *rrClock) *Peer {
	var p *Peer
	backup := r != nil && r.backup
	switch {
	case l.single:
		// nginx checks only down and max_conns here (RR.c 626-638). The
		// lock-free path takes single peers too, so the slot is taken by
		// compare-and-swap, not by a check and a later add.
		if q := l.primary[0]; !q.down.Load() && acquirePeer(q) {
			if r != nil {
				r.record(0)
			}
			return q
		}
		return nil
	case !backup:
		p = s.scanPrimaryLocked(l, r, clk)
		if p == nil && len(l.backup) > 0 {
			backup = true
			if r != nil {
				r.switchToBackup()
			}
		}
	}
	if p == nil && backup {
		p = scanSmooth(l.backup, r, clk)
	}
	if p == nil {
		return nil
	}
	p.conns.Add(1)
	if r != nil {
		r.record(p.index)
	}
	return p
}

// scanPrimaryLocked runs the scan over l's primaries, grouped by weight
// where that is cheaper (see weightGroups), plain otherwise.
func (s *SmoothWRR) scanPrimaryLocked(l *peerList, r *Request, clk *rrClock) *Peer {
	if s.groupedFor != l {
		g := s.groupsBuilt
		if g == nil || g.list != l {
			g = newWeightGroups(l)
			s.groupsBuilt = g
		}
		if g != nil && !g.regroup() {
			g = nil
		}
		s.groups, s.groupedFor = g, l
	}
	if s.groups != nil {
		return s.groups.scan(r, clk)
	}
	return scanSmooth(l.primary, r, clk)
}

// smoothStep is nginx's step for one eligible peer (RR.c 747-750): its
// current weight grows by its effective weight, which then recovers by one
// toward its weight. It returns what the peer adds to the round's total,
// the effective weight before the recovery. Requires the owner's lock.
func smoothStep(p *Peer) int64 {
	ew := p.effectiveWeight
	p.currentWeight += ew
	if ew < p.weight.Load() {
		p.effectiveWeight++
	}
	return ew
}

// scanSmooth is nginx's ngx_http_upstream_get_peer, line for line (RR.c
// 721-774); a nil r has tried nothing. Requires the owner's lock.
//
// The clock is read only for a peer with failures on record: one without
// cannot be inside a fail window, and its check time is read by nothing
// before a failure sets it, so nginx's update of it on selection (RR.c 774)
// is skipped for it, as the cycle skips it. A clock read costs more than the
// rest of a scan of a few peers.
func scanSmooth(peers []*Peer, r *Request, clk *rrClock) *Peer {
	var best *Peer
	var total int64
	for i, p := range peers {
		if r != nil && r.isTried(i) || p.down.Load() || p.full() ||
			p.fails.Load() != 0 && p.failed(clk.get()) {
			continue // ineligible (RR.c 728-743)
		}
		total += smoothStep(p)
		if best == nil || p.currentWeight > best.currentWeight {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	best.currentWeight -= total
	if best.fails.Load() != 0 {
		best.checkLocked(clk.get())
	}
	return best
}

// Done reports the outcome of an attempt on p. A success on a peer with no
// failures on record takes no lock.
func (s *SmoothWRR) Done(p *Peer, o Outcome) error {
	if err := s.release(p, o); err != nil || (!o.Failed && !p.needsLockOnSuccess()) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.owner.Load() != &s.peerSet {
		return nil // removed while in flight
	}
	l := s.load()
	if o.Failed && !p.backup {
		s.closeLocked()
		s.recFor = nil
	}
	g := s.groups
	if g != nil && (p.backup || g.list != l) {
		g = nil
	}
	if g != nil && g.of[p.index] >= 0 {
		g.demote(int32(p.index)) // the outcome may make it irregular
	}
	s.doneLocked(l, p, o)
	if g != nil && regular(p) {
		if k := slices.Index(g.others, int32(p.index)); k >= 0 {
			g.promote(k)
		}
	}
	s.maybeOpenLocked(l)
	return nil
}

// changedLocked runs after every peer-list change; publish has set every
// current weight to 0.
func (s *SmoothWRR) changedLocked(l *peerList) {
	s.groups, s.groupedFor, s.groupsBuilt = nil, nil, nil
	s.recFor = nil
	if c := s.cycle.Swap(nil); c != nil {
		c.ctr.Or(closedBit)
	}
	s.maybeOpenLocked(l)
}

// closeLocked hands the sequence back to the scan. A cycle that served k
// picks from current weights b_i left peer i at b_i + k·w_i − W·c_i, where c_i
// counts i's picks among the first k mod W: each pick adds w_i to every
// current weight and takes W from the winner's.
func (s *SmoothWRR) closeLocked() {
	// Only mu's holders store the pointer: a plain load spares the scan an
	// atomic swap while no cycle is open.
	if s.cycle.Load() == nil {
		return
	}
	c := s.cycle.Swap(nil)
	k := (c.ctr.Or(closedBit) &^ closedBit) % c.w
	c.countLocked(k)
	// Down peers have weight 0 in the cycle and no picks: they stay at 0,
	// where the list change that preceded the cycle left them.
	for i, p := range c.list.primary {
		p.currentWeight = c.baseOf(i) + int64(k)*c.weights[i] - int64(c.w)*c.counts[i]
	}
}

// baseOf returns primary i's current weight at the cycle's start.
func (c *cycle) baseOf(i int) int64 {
	if c.base == nil {
		return 0
	}
	return c.base[i]
}

// impliedLocked returns p's current weight where SmoothWRR keeps it
// implicitly: in a weight group (base + offset), or while the cycle stands
// for it, by the formula closeLocked uses, in O(n).
func (s *SmoothWRR) impliedLocked(p *Peer) (int64, bool) {
	if g := s.groups; g != nil && !p.backup && p.index < len(g.of) &&
		g.list.primary[p.index] == p && g.of[p.index] >= 0 {
		return g.cw(int32(p.index)), true
	}
	c := s.cycle.Load()
	if c == nil || p.backup || c.list.primary[p.index] != p {
		return 0, false
	}
	k := c.ctr.Load() % c.w
	c.countLocked(k)
	return c.baseOf(p.index) + int64(k)*c.weights[p.index] - int64(c.w)*c.counts[p.index], true
}

// maybeOpenLocked starts serving from the cycle when the exact state is the
// start of one: every primary that is not down is at full effective weight,
// has no failures on record, no max_conns, and a current weight of 0. If
// all that holds but the current weights are not 0, it starts the recorder.
func (s *SmoothWRR) maybeOpenLocked(l *peerList) {
	if s.cycle.Load() != nil || l.single || s.recFor == l {
		return
	}
	if g := s.groups; g != nil {
		if g.live > 0 {
			return // a live peer out of the groups is not at full health
		}
		g.materializeLocked()
	}
	var w int64
	zero := true
	for _, p := range l.primary {
		if p.down.Load() {
			continue
		}
		if p.effectiveWeight != p.weight.Load() || p.fails.Load() != 0 || p.maxConns != 0 {
			return
		}
		zero = zero && p.currentWeight == 0
		w += p.weight.Load()
	}
	if w == 0 || w > MaxCycle {
		return
	}
	if !zero {
		// Healthy, but on another orbit than the one from 0: record it.
		s.startRecordLocked(l, w)
		return
	}
	c := s.built
	if c == nil || c.list != l {
		if c = buildCycle(l, w); c == nil {
			return
		}
		s.built = c
	}
	s.cycle.Store(c.reopen())
	// The cycle now stands for the current weights; when it closes, it
	// writes them all back, and the scan groups them afresh.
	s.groups, s.groupedFor = nil, nil
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
	n := len(l.primary)
	weights := make([]int64, n)
	var order []int32 // live primaries of positive weight, by weight, then index
	for i, p := range l.primary {
		if !p.down.Load() {
			weights[i] = p.weight.Load()
			if weights[i] > 0 {
				order = append(order, int32(i))
			}
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

// regular reports whether p can be grouped: see weightGroups.
func regular(p *Peer) bool {
	return !p.down.Load() && p.fails.Load() == 0 && p.maxConns == 0 &&
		p.effectiveWeight == p.weight.Load()
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
		w := p.weight.Load()
		if _, ok := g.byW[w]; !ok {
			g.byW[w] = int32(len(g.groups))
			g.groups = append(g.groups, weightGroup{w: w})
		}
	}
	for _, p := range l.primary {
		gr := &g.groups[g.byW[p.weight.Load()]]
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
		gi := g.byW[p.weight.Load()]
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
	gi := g.byW[p.weight.Load()]
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
// leaves the winner's current weight written to it.
func (g *weightGroups) scan(r *Request, clk *rrClock) *Peer {
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
		gr.off += gr.w
		total += gr.w * int64(len(gr.heap))
		top := gr.heap[0]
		if cw := g.base[top] + gr.off; best < 0 || cw > bestCW || cw == bestCW && top < best {
			best, bestCW = top, cw
		}
	}
	for _, i := range g.others {
		p := peers[i]
		if r != nil && r.isTried(int(i)) || p.down.Load() || p.full() ||
			p.fails.Load() != 0 && p.failed(clk.get()) {
			continue // ineligible, as in scanSmooth
		}
		total += smoothStep(p)
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
				winner.checkLocked(clk.get())
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
