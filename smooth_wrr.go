package balancer

import "sync/atomic"

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
// serves it from a precomputed cycle: one atomic add, no lock, O(1). The
// cycle is built once per peer-list change, holds W entries of 4 bytes, and
// is used only when W <= MaxCycle and building it costs at most
// maxCycleWork steps. Anything that breaks the period (a failure, a
// retry, a recovering effective weight, max_conns) turns the cycle back into
// the exact current weights it stands for, in O(W) once, and SmoothWRR
// runs nginx's O(n) scan under a lock until every peer is back at full
// health and every current weight is 0, where the cycle resumes.
//
// The zero value is not usable; use NewSmoothWRR. SmoothWRR is safe for
// concurrent use by multiple goroutines.
type SmoothWRR struct {
	peerSet
	cycle atomic.Pointer[cycle] // nil while the exact scan is in charge
	built *cycle                // last cycle built, reused for the same gen; guarded by mu
}

var _ Picker = (*SmoothWRR)(nil)

// MaxCycle bounds the length of the precomputed cycle, and so its memory
// (4 bytes an entry): with weights summing past it, every pick runs the scan.
const MaxCycle = 1 << 16

// maxCycleWork bounds the work of building a cycle (W picks of an n-peer
// scan): about 10 ms here.
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
	ctr     atomic.Uint64
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
// lock-free while the weights are static and r is fresh, O(n) otherwise.
func (s *SmoothWRR) Pick(r *Request) (*Peer, error) {
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			if v := c.ctr.Add(1); v&closedBit == 0 {
				i := c.seq[(v-1)%c.w]
				p := c.list.primary[i]
				p.conns.Add(1)
				if r != nil {
					r.begin(c.list)
					r.record(int(i))
				}
				return p, nil
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pickLocked(r)
}

func (s *SmoothWRR) pickLocked(r *Request) (*Peer, error) {
	l := s.load()
	if l.empty() {
		return nil, ErrNoPeers
	}
	var once Request
	if r == nil {
		r = &once
	}
	if !r.begin(l) {
		return nil, ErrTriesExhausted
	}
	s.closeLocked()
	p := pickSmoothLocked(l, r, s.now())
	if p == nil {
		return nil, ErrNoLivePeer
	}
	s.maybeOpenLocked(l)
	return p, nil
}

// pickSmoothLocked is nginx's ngx_http_upstream_get_round_robin_peer: the
// single-server shortcut, then the primaries, then the backups once no
// primary is eligible. It records the pick in r and counts it in flight.
func pickSmoothLocked(l *peerList, r *Request, now int64) *Peer {
	var p *Peer
	switch {
	case l.single:
		// nginx checks only down and max_conns here (RR.c 626-638).
		if q := l.primary[0]; !q.down.Load() && !q.full() {
			p = q
		}
	case !r.backup:
		p = scanSmooth(l.primary, r, now)
		if p == nil && len(l.backup) > 0 {
			r.switchToBackup()
		}
	}
	if p == nil && r.backup {
		p = scanSmooth(l.backup, r, now)
	}
	if p == nil {
		return nil
	}
	p.conns.Add(1)
	r.record(p.index)
	return p
}

// scanSmooth is nginx's ngx_http_upstream_get_peer, line for line (RR.c
// 721-774). Requires the owner's lock.
func scanSmooth(peers []*Peer, r *Request, now int64) *Peer {
	var best *Peer
	var total int64
	for i, p := range peers {
		if r.isTried(i) || !p.available(now) {
			continue
		}
		p.currentWeight += p.effectiveWeight
		total += p.effectiveWeight
		if p.effectiveWeight < p.weight.Load() {
			p.effectiveWeight++
		}
		if best == nil || p.currentWeight > best.currentWeight {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	best.currentWeight -= total
	best.checkLocked(now)
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
	}
	s.doneLocked(l, p, o)
	s.maybeOpenLocked(l)
	return nil
}

// changedLocked runs after every peer-list change; publish has set every
// current weight to 0.
func (s *SmoothWRR) changedLocked(l *peerList) {
	if c := s.cycle.Swap(nil); c != nil {
		c.ctr.Or(closedBit)
	}
	s.maybeOpenLocked(l)
}

// closeLocked hands the sequence back to the scan. A cycle that served k
// picks from all-zero current weights left peer i at k·w_i − W·c_i, where c_i
// counts i's picks among the first k mod W: each pick adds w_i to every
// current weight and takes W from the winner's.
func (s *SmoothWRR) closeLocked() {
	c := s.cycle.Swap(nil)
	if c == nil {
		return
	}
	k := (c.ctr.Or(closedBit) &^ closedBit) % c.w
	clear(c.counts)
	for _, i := range c.seq[:k] {
		c.counts[i]++
	}
	// Down peers have weight 0 in the cycle and no picks: they stay at 0,
	// where the list change that preceded the cycle left them.
	for i, p := range c.list.primary {
		p.currentWeight = int64(k)*c.weights[i] - int64(c.w)*c.counts[i]
	}
}

// impliedLocked returns p's current weight while the cycle stands for it,
// by the formula closeLocked uses, in O(W).
func (s *SmoothWRR) impliedLocked(p *Peer) (int64, bool) {
	c := s.cycle.Load()
	if c == nil || p.backup || c.list.primary[p.index] != p {
		return 0, false
	}
	k := c.ctr.Load() % c.w
	var picked int64
	for _, i := range c.seq[:k] {
		if int(i) == p.index {
			picked++
		}
	}
	return int64(k)*c.weights[p.index] - int64(c.w)*picked, true
}

// maybeOpenLocked starts serving from the cycle when the exact state is the
// start of one: every primary that is not down is at full effective weight,
// has no failures on record, no max_conns, and a current weight of 0.
func (s *SmoothWRR) maybeOpenLocked(l *peerList) {
	if s.cycle.Load() != nil || l.single {
		return
	}
	var w int64
	for _, p := range l.primary {
		if p.down.Load() {
			continue
		}
		if p.currentWeight != 0 || p.effectiveWeight != p.weight.Load() ||
			p.fails.Load() != 0 || p.maxConns != 0 {
			return
		}
		w += p.weight.Load()
	}
	if w == 0 || w > MaxCycle || w*int64(len(l.primary)) > maxCycleWork {
		return
	}
	c := s.built
	if c == nil || c.list != l {
		c = buildCycle(l, w)
		s.built = c
	}
	// A fresh counter per opening: the cycle restarts at its first pick.
	open := &cycle{list: c.list, seq: c.seq, weights: c.weights, w: c.w, counts: c.counts}
	s.cycle.Store(open)
}

// buildCycle runs nginx's scan W times from all-zero current weights on
// private copies, recording the winners: the period, exact by construction.
func buildCycle(l *peerList, w int64) *cycle {
	n := len(l.primary)
	c := &cycle{
		list:    l,
		seq:     make([]int32, w),
		weights: make([]int64, n),
		w:       uint64(w),
		counts:  make([]int64, n),
	}
	live := make([]bool, n)
	for i, p := range l.primary {
		if live[i] = !p.down.Load(); live[i] {
			c.weights[i] = p.weight.Load()
		}
	}
	cw := make([]int64, n)
	for k := range c.seq {
		best := -1
		for i, wi := range c.weights {
			if !live[i] {
				continue
			}
			cw[i] += wi
			if best < 0 || cw[i] > cw[best] {
				best = i
			}
		}
		cw[best] -= w
		c.seq[k] = int32(best)
	}
	return c
}
