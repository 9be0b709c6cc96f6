package balancer

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"sync/atomic"
)

// ClassicWRR in detail. The selector is ngx_http_upstream_get_peer in
// ngx_http_upstream_round_robin.c of release-1.2.0, the same rule since
// 0.8.0 (1.2.0 adds only a guard that ends the loop after a second reset),
// before smooth round-robin replaced it in 1.3.0/1.2.1.
// The peers are kept sorted by weight, heaviest first, equal weights in the
// order they were added. Each peer has a current weight (its CurrentWeight
// in PeerStats) that starts a round at its weight and drops by one each
// time it is picked. A pick scans the sorted peers whose current weight is
// above 0 and compares each with the next one, n with i, in integer
// arithmetic:
//
//	cw[n]*1000/cw[i] > w[n]*1000/w[i]
//
// that is, n has more of its round left than its share next to i, so n is
// picked. If no pair stops the scan, the last peer with a current weight
// above 0 is picked. When no peer has any left, the round ends: every
// current weight goes back to its weight and the scan runs again. Each
// round of W = Σweight picks gives every peer exactly its weight, but the
// lightest peers go first and the heaviest is bunched: {5,1,1} gives
// c b a a a a a, {5,1,2} gives b c a a a c a a.
//
// ClassicWRR keeps the library's eligibility and failure model rather than
// nginx 1.2.0's own retry walk, and joins it to the classic selector so:
//
//   - A peer that is down, inside its fail window, at its max_conns limit or
//     already tried by the request is skipped by the scan as if its current
//     weight were 0, and its current weight is left as it is. (nginx 1.2.0
//     picked such a peer, zeroed its current weight and scanned again;
//     skipping gives the same order among the others without losing the
//     peer's share of the round.) Down peers are thus never picked, as
//     1.2.0 gave them weight 0.
//   - The round ends when no eligible peer has current weight left; the
//     reset then covers every peer of the list, eligible or not, as in
//     nginx. If after the reset still no eligible peer has any (all have
//     weight 0), the first eligible one in sorted order is picked and its
//     current weight is left at 0.
//   - A retry runs the same scan with the tried peers skipped, where nginx
//     1.2.0 walked on from the failed peer in order; a retry can therefore
//     end a round early.
//   - A failure does the shared accounting (failure count, fail window and
//     the probe after it; see Peer) and, as 1.2.0 did, lowers the peer's
//     current weight by weight/max_fails in integer division, clamped at 0,
//     which costs it that much of the current round. There is no effective
//     weight in the classic algorithm: ClassicWRR keeps it equal to the
//     weight.
//   - Backup peers run the same algorithm with their own current weights,
//     once no primary is eligible for the request. One primary and no
//     backup follows nginx's single-server rule. Per-request tries are
//     bounded as for SmoothWRR; see Request.
//
// Cost of a pick. While every primary peer is healthy, the sequence is
// periodic with period W, so ClassicWRR serves it from a precomputed cycle
// as SmoothWRR does: one atomic add, no lock, O(1), when W <= maxCycle.
// The cycle is built once per peer-list change by classicRound, which runs
// the scan incrementally in O(n + W·(n/4096+1)) rather than W scans of
// O(n). A failure, a retry or max_conns turns the cycle back into the exact
// current weights it stands for, in O(n) once, and ClassicWRR runs the O(n)
// scan under a lock until every primary is healthy again and a round has
// ended, where the cycle resumes.

// ClassicWRR is nginx's weighted round-robin up to nginx 1.2.0
// (ngx_http_upstream_get_peer, the same since 0.8): each round of
// W = Σweight picks gives every peer exactly its weight, but the lightest
// go first and the heaviest is bunched; {5,1,1} gives c b a a a a a.
// Failures and retries follow the shared nginx model ([Peer], [Request]).
// Choose it to reproduce an old nginx; [SmoothWRR] spreads picks better.
//
// A first attempt is O(1) and lock-free while every primary is healthy and
// the weights sum to at most 65,536 (the precomputed cycle's bound);
// otherwise a pick runs the O(n) scan under a lock. The zero value is not usable; use
// [NewClassicWRR]. ClassicWRR is safe for concurrent use.
type ClassicWRR struct {
	peerSet
	cycle atomic.Pointer[cycle] // nil while the exact scan is in charge

	// Guarded by mu; rebuilt on every peer-list change.
	built   *cycle  // last cycle built, reused for the same list
	primary []*Peer // the list's primaries, sorted by weight descending, stable
	backup  []*Peer // the list's backups, sorted the same way
	// With WithSlowStart, the round weights of primary and backup,
	// parallel to the sorted lists (classicWarmLocked, below).
	warmW [2][]int64
}

// classicWRRSpec is ClassicWRR's declaration (see pickerSpec).
var classicWRRSpec = pickerSpec{name: "ClassicWRR", options: []string{"WithSlowStart"}}

// NewClassicWRR returns a ClassicWRR over peers. opts: the shared options
// (see Option).
func NewClassicWRR(peers []*Peer, opts ...Option) (*ClassicWRR, error) {
	cfg, err := newConfig(classicWRRSpec, opts)
	if err != nil {
		return nil, err
	}
	s := &ClassicWRR{}
	s.currentWeight = s.impliedLocked
	if err := s.init(peers, cfg, s.changedLocked); err != nil {
		return nil, err
	}
	return s, nil
}

// Pick returns the next peer in nginx 1.2.0's order. It is O(1) and
// lock-free while every primary is healthy and r is fresh, O(n) otherwise.
func (s *ClassicWRR) Pick(r *Request) (*Peer, error) {
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			if i := c.slot(c.ctr.Add(1)); i >= 0 {
				p := c.list.primary[i]
				p.pick()
				return fastFirst(c.list, r, int(i), p)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pickLocked(r)
}

func (s *ClassicWRR) pickLocked(r *Request) (*Peer, error) {
	l := s.load()
	clk := lazyClock{now: s.now}
	warm := !s.slow.idleLocked() && s.classicWarmLocked(l, &clk)
	p, err := pickFrame(l, r, func(_ []*Peer, backup bool) int {
		s.closeLocked()
		sorted, k := s.primary, 0
		if backup {
			sorted, k = s.backup, 1
		}
		var p *Peer
		if warm {
			p = scanClassicWarm(sorted, s.warmW[k], r, &clk, &s.slow)
		} else {
			p = scanClassic(sorted, r, &clk)
		}
		if p == nil {
			return -1
		}
		p.probeLocked(clk.get())
		p.pick()
		return p.index
	})
	if err == nil {
		s.maybeOpenLocked(l)
	}
	return p, err
}

// scanClassic is nginx 1.2.0's ngx_http_upstream_get_peer over peers, sorted
// by weight descending, with the peers r may not use skipped, followed by
// the caller's current_weight-- on the winner. Requires the owner's lock.
//
// Every current weight stays within [0, weight]: a round sets it to the
// weight, a pick lowers a positive one by one, a failure lowers it clamped
// at 0, and any list change sets it to 0. So a peer with current weight
// above 0 has a weight above 0 and the divisions are safe.
func scanClassic(peers []*Peer, r *Request, clk *lazyClock) *Peer {
	for reset := false; ; reset = true {
		var first, best *Peer
		for _, p := range peers {
			if r.isTried(p.index) || !p.eligible(clk) {
				continue
			}
			if first == nil {
				first = p
			}
			if p.currentWeight <= 0 {
				continue
			}
			// best has more of its round left, next to p, than its
			// weight's share: it is picked. The ×1000 and the integer
			// division are nginx's, rounding included.
			if best != nil &&
				best.currentWeight*1000/p.currentWeight > best.weight.Load()*1000/p.weight.Load() {
				break
			}
			best = p
		}
		switch {
		case best != nil:
			best.currentWeight--
			return best
		case first == nil:
			return nil
		case reset:
			// Every eligible peer has weight 0; nginx returned the
			// first peer here.
			return first
		}
		// The round is over: every peer of the list starts a new one.
		for _, p := range peers {
			p.currentWeight = p.weight.Load()
		}
	}
}

// Done implements Picker.Done.
func (s *ClassicWRR) Done(p *Peer, o Outcome) error {
	if err := s.finish(p, o); err != nil {
		return err
	}
	if !o.Failed && !p.needsLockOnSuccess() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if p.owner.Load() != &s.peerSet {
		return nil // removed while in flight
	}
	l := s.load()
	if o.Failed && !p.backup.Load() {
		s.closeLocked()
	}
	s.doneLocked(l, p, o)
	if o.Failed && !l.single {
		// nginx 1.2.0's free: the failure costs the peer weight/max_fails
		// of its round. failLocked lowered the effective weight instead,
		// which the classic algorithm does not have.
		p.setEffectiveLocked(p.weight.Load())
		if p.maxFails.Load() != 0 {
			cost := p.weight.Load() / p.maxFails.Load()
			if s.slow.scaled {
				cost *= classicWarmScale // slow start's rounds (classicWarmScale, below)
			}
			p.currentWeight = max(0, p.currentWeight-cost)
		}
	}
	s.maybeOpenLocked(l)
	return nil
}

// changedLocked runs after every peer-list change; publish has set every
// current weight to 0, which starts a new round at the next pick.
func (s *ClassicWRR) changedLocked(l *peerList) {
	if c := s.cycle.Swap(nil); c != nil {
		c.ctr.Or(closedBit)
	}
	s.primary = sortByWeight(l.primary)
	s.backup = sortByWeight(l.backup)
	if s.slow.on() {
		s.warmW = [2][]int64{classicWarmWeights(s.primary), classicWarmWeights(s.backup)}
	}
	s.maybeOpenLocked(l)
}

// sortByWeight returns a copy of peers sorted as nginx 1.2.0's ngx_sort did:
// an insertion sort by weight descending, so stable.
func sortByWeight(peers []*Peer) []*Peer {
	sorted := slices.Clone(peers)
	slices.SortStableFunc(sorted, func(a, b *Peer) int {
		return cmp.Compare(b.weight.Load(), a.weight.Load())
	})
	return sorted
}

// closeLocked hands the sequence back to the scan. A cycle that served
// k > 0 picks left peer i at w_i − c_i, where c_i counts i's picks among the
// first j = (k−1) mod W + 1, the picks of the round under way: each pick
// lowers the winner's current weight by one, and a round ends with all of
// them at 0, as in nginx, whose next pick starts a new round. A cycle that
// served nothing leaves the state it opened on. O(n), from the cycle's
// checkpoints.
func (s *ClassicWRR) closeLocked() {
	c := s.cycle.Swap(nil)
	if c == nil {
		return
	}
	k := c.ctr.Or(closedBit) &^ closedBit
	if k == 0 {
		return
	}
	c.roundCountLocked(k)
	// Down peers have weight 0 in the cycle and no picks: they get 0,
	// which the scan never looks at.
	for i, p := range c.list.primary {
		p.currentWeight = c.weights[i] - c.counts[i]
	}
}

// roundCountLocked sets c.counts to the picks of each primary in the round
// under way after k > 0 picks: its first (k−1) mod W + 1. A whole round
// gives every primary its weight.
func (c *cycle) roundCountLocked(k uint64) {
	if j := (k-1)%c.w + 1; j < c.w {
		c.countLocked(j)
	} else {
		copy(c.counts, c.weights)
	}
}

// impliedLocked returns p's current weight while the cycle stands for it, by
// the formula closeLocked uses, in O(n).
func (s *ClassicWRR) impliedLocked(p *Peer) (int64, bool) {
	c := s.cycle.Load()
	if c == nil || p.backup.Load() || p.index >= len(c.list.primary) || c.list.primary[p.index] != p {
		return 0, false
	}
	k := c.ctr.Load() &^ closedBit
	if k == 0 {
		return p.currentWeight, true
	}
	c.roundCountLocked(k)
	return c.weights[p.index] - c.counts[p.index], true
}

// maybeOpenLocked starts serving from the cycle when the exact state is the
// start of a round: every primary that is not down has no failures on
// record and no max_conns, and either every one has its whole round left or
// none has any left (so the next pick starts a round).
func (s *ClassicWRR) maybeOpenLocked(l *peerList) {
	if s.cycle.Load() != nil || l.single || s.slow.until.Load() != 0 || s.slow.scaled {
		return // a warming peer (slow start) breaks the period too
	}
	var w int64
	full, spent := true, true
	for _, p := range l.primary {
		if p.down.Load() {
			continue
		}
		if !p.clean() {
			return
		}
		full = full && p.currentWeight == p.weight.Load()
		spent = spent && p.currentWeight == 0
		w += p.weight.Load()
	}
	if !full && !spent || w == 0 || w > maxCycle || w*int64(len(l.primary)/4096+1) > maxCycleWork {
		return
	}
	c := s.built
	if c == nil || c.list != l {
		if c = s.buildCycleLocked(l, w); c == nil {
			return
		}
		s.built = c
	}
	s.cycle.Store(c.reopen()) // a fresh counter: the cycle restarts at its first pick
}

// buildCycleLocked builds the cycle for l, whose live primaries weigh w in
// all, from classicRound over the sorted primaries. It allocates the
// sequence, its checkpoints and classicRound's scratch: once per peer-list
// change, as maybeOpenLocked keeps the cycle built for a list in s.built.
func (s *ClassicWRR) buildCycleLocked(l *peerList, w int64) *cycle {
	weights := make([]int64, len(l.primary))
	for i, p := range l.primary {
		if !p.down.Load() {
			weights[i] = p.weight.Load()
		}
	}
	seq := classicRound(s.primary, w)
	if seq == nil {
		return nil // unreachable: maybeOpenLocked found weight to pick
	}
	return newCycle(l, seq, weights)
}

// classicRound returns the W = w picks (indices in the primary list) that
// scanClassic makes over sorted, the primaries sorted by weight, from the
// start of a round in which every primary that is not down has its whole
// weight left, with nothing tried and every such primary eligible (no
// failures on record, no max_conns): the round maybeOpenLocked opens the
// cycle at. It reads the peers and changes nothing, in O(n + W·(n/4096+1))
// where scanClassic run W times costs O(W·n).
//
// Why it is scanClassic's sequence exactly. With every live peer eligible,
// a scan looks only at the chain of live peers whose current weight is
// above 0, in sorted order, and picks the first chain member n whose
// successor i in the chain has cw[n]·1000/cw[i] > w[n]·1000/w[i], or the
// chain's last member if no pair does. So its answer is a function of the
// chain and of that test on each adjacent pair. classicRound keeps the
// chain as a doubly linked list and the set of members whose test with
// their successor holds as a two-level bitset, whose first member is found
// in O(n/4096 + 1). A pick lowers the winner's current weight by one,
// which changes the test only for the pairs it belongs to, (pred, winner)
// and (winner, succ); at 0 the winner leaves the chain and the new pair
// (pred, succ) is tested. No reset falls inside the round: the chain is
// empty only after W picks. Peers of weight 0 and down peers are never in
// the chain, as the scan skips them. TestClassicWRR_roundMatchesScan checks
// it against scanClassic on random weight sets.
func classicRound(sorted []*Peer, w int64) []int32 {
	var (
		index  []int32 // chain position → primary index
		weight []int64
	)
	for _, p := range sorted {
		if !p.down.Load() && p.weight.Load() > 0 {
			index = append(index, int32(p.index))
			weight = append(weight, p.weight.Load())
		}
	}
	m := int32(len(index))
	if m == 0 {
		return nil
	}
	cw := slices.Clone(weight)
	prev := make([]int32, m) // -1: none
	next := make([]int32, m) // m: none
	for j := range m {
		prev[j], next[j] = j-1, j+1
	}
	stops := newBitset2(int(m))
	test := func(a int32) { // the pair (a, next[a]), a in the chain
		if b := next[a]; b < m && cw[a]*1000/cw[b] > weight[a]*1000/weight[b] {
			stops.set(a)
		} else {
			stops.clear(a)
		}
	}
	for j := range m {
		test(j)
	}
	last := m - 1
	seq := make([]int32, w)
	for k := range seq {
		j := stops.first()
		if j < 0 {
			j = last
		}
		if j < 0 {
			return nil // unreachable: the weights sum to w
		}
		seq[k] = index[j]
		a := prev[j]
		if cw[j]--; cw[j] == 0 {
			stops.clear(j)
			b := next[j]
			if a >= 0 {
				next[a] = b
			}
			if b < m {
				prev[b] = a
			} else {
				last = a
			}
		} else {
			test(j)
		}
		if a >= 0 {
			test(a)
		}
	}
	if last >= 0 {
		return nil // unreachable: W picks spend every current weight
	}
	return seq
}

// bitset2 is a set of small integers with its first member found in
// O(n/4096 + 1): a bit per member, and a bit per nonzero word of those.
type bitset2 struct {
	words []uint64
	sum   []uint64 // bit k: words[k] != 0
}

func newBitset2(n int) bitset2 {
	nw := (n + 63) / 64
	return bitset2{words: make([]uint64, nw), sum: make([]uint64, (nw+63)/64)}
}

func (b *bitset2) set(i int32) {
	b.words[i>>6] |= 1 << (i & 63)
	b.sum[i>>12] |= 1 << ((i >> 6) & 63)
}

func (b *bitset2) clear(i int32) {
	if b.words[i>>6] &^= 1 << (i & 63); b.words[i>>6] == 0 {
		b.sum[i>>12] &^= 1 << ((i >> 6) & 63)
	}
}

// first returns the smallest member, or -1 for an empty set.
func (b *bitset2) first() int32 {
	for k, s := range b.sum {
		if s != 0 {
			wi := k<<6 | bits.TrailingZeros64(s)
			return int32(wi<<6 | bits.TrailingZeros64(b.words[wi]))
		}
	}
	return -1
}

// classicWarmScale is the length of ClassicWRR's rounds while a peer warms,
// in rounds of its weights: each round gives a peer weight · 64 · factor
// picks (rounded, at least 1), the factor read at the round's start. Long
// enough that a factor resolves to 1/64, short enough that it is read
// again every 64·W picks.
const classicWarmScale = 64

// classicWarmWeights returns the round weights of sorted while none of
// them warms: weight · classicWarmScale.
func classicWarmWeights(sorted []*Peer) []int64 {
	w := make([]int64, len(sorted))
	for i, p := range sorted {
		w[i] = p.weight.Load() * classicWarmScale
	}
	return w
}

// classicWarmLocked reports whether a peer of l may be warming, for a pick
// by ClassicWRR: if so the current weights count picks of rounds
// classicWarmScale times as long (scanClassicWarm), the round weights
// starting at weight · classicWarmScale; once none warms they end, and
// the next pick starts a round of nginx's. Requires s.mu.
func (s *ClassicWRR) classicWarmLocked(l *peerList, clk *lazyClock) bool {
	if !s.slow.warming(clk) {
		s.slow.leaveScaleLocked(l)
		return false
	}
	if !s.slow.scaled {
		s.closeLocked() // its current weights back in the peers' fields first
		s.slow.enterScaleLocked(l, classicWarmScale)
		for k, sorted := range [2][]*Peer{s.primary, s.backup} {
			for i, p := range sorted {
				s.warmW[k][i] = p.weight.Load() * classicWarmScale
			}
		}
	}
	return true
}

// scanClassicWarm is scanClassic over rounds classicWarmScale times as
// long, rw the round weights parallel to peers: a round starts each peer at
// its weight · classicWarmScale · slow-start factor (at least 1 for a
// positive weight), and the scan compares the current weights against
// those. Requires the owner's lock.
func scanClassicWarm(peers []*Peer, rw []int64, r *Request, clk *lazyClock, ws *slowStart) *Peer {
	for reset := false; ; reset = true {
		var first, best *Peer
		var bw int64 // best's round weight
		for i, p := range peers {
			if r.isTried(p.index) || !p.eligible(clk) {
				continue
			}
			if first == nil {
				first = p
			}
			if p.currentWeight <= 0 {
				continue
			}
			if best != nil && best.currentWeight*1000/p.currentWeight > bw*1000/rw[i] {
				break
			}
			best, bw = p, rw[i]
		}
		switch {
		case best != nil:
			best.currentWeight--
			return best
		case first == nil:
			return nil
		case reset:
			return first
		}
		now := clk.get()
		for i, p := range peers {
			w := p.weight.Load() * classicWarmScale
			if f := ws.factor(p, now); f < 1 && w > 0 {
				w = max(1, int64(math.Round(float64(w)*f)))
			}
			rw[i], p.currentWeight = w, w
		}
	}
}
