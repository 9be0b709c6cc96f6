package balancer

import (
	"slices"
	"sync/atomic"
)

// smoothRR is nginx's smooth scan over a peerSet's primaries with what
// makes it cheap: the precomputed cycle, the scan grouped by weight and
// the orbit recorder. SmoothWRR is one; the hash and random pickers embed
// one for nginx's round-robin fallback (nginx_rr.go), sharing its peers' current
// and effective weights.
type smoothRR struct {
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

	// shared: the owner is a hash or random picker, whose requests reach
	// the scan only when they fall back to round robin, so the cycle is
	// first tried at a list's first fallback, not at every change.
	// openedFor is the list it was tried for; guarded by mu. shared is set
	// before the picker is in use.
	shared    bool
	openedFor *peerList

	// entry, when set, returns the position (below w, the cycle's length)
	// at which a cycle opened from all current weights at 0 is entered;
	// nil: at its start. Set before the picker is in use; called under mu.
	entry func(w uint64) uint64

	// held, set by the owner, keeps the cycle closed and the recorder off:
	// the owner's own scan is in charge of the primaries meanwhile (and
	// reads their current weights as written). Guarded by mu.
	held bool
}

func (s *smoothRR) pickLocked(r *Request) (*Peer, error) {
	l := s.load()
	fresh := r.fresh()
	clk := lazyClock{now: s.now}
	var ws *slowStart // non-nil while a peer may be warming
	if !s.slow.idleLocked() {
		ws = s.warmLocked(l, &clk)
	}
	p, err := pickFrame(l, r, func(peers []*Peer, backup bool) int {
		s.closeLocked()
		var p *Peer
		switch {
		case backup && ws != nil:
			p = scanWarm(peers, r, &clk, ws)
		case backup:
			p = scanSmooth(peers, r, &clk)
		default:
			p = s.scanPrimaryLocked(l, r, &clk, ws)
		}
		if p == nil {
			return -1
		}
		p.pick()
		return p.index
	})
	if err != nil {
		if err == ErrNoLivePeer {
			s.recFor = nil // the scan ran and moved weights: not a step of the period
		}
		return nil, err
	}
	s.scannedLocked(l, p, fresh)
	return p, nil
}

// scannedLocked follows a pick of p on l that the scan made (fresh: for a
// request's first attempt): it records the pick, or sees whether the cycle
// can resume or recording start.
func (s *smoothRR) scannedLocked(l *peerList, p *Peer, fresh bool) {
	switch {
	case s.recFor != l:
		// Not recording: see whether the cycle can resume, or recording
		// start. That check is O(n), so it is made when the winner lands
		// at 0 and otherwise once every n picks: amortized O(1).
		s.sinceCheck++
		if p.backup.Load() || p.currentWeight == 0 || s.sinceCheck >= len(l.primary) {
			s.sinceCheck = 0
			s.maybeOpenLocked(l)
		}
	case fresh && !p.backup.Load():
		s.recordLocked(l, p)
	default:
		s.recFor = nil // a retry or a backup is not a step of the period
	}
}

// recordLocked adds the pick of p to the record, and at W picks turns it
// into a cycle if the state came back to where recording began.
func (s *smoothRR) recordLocked(l *peerList, p *Peer) {
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
			weights[i] = q.smooth
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
func (s *smoothRR) startRecordLocked(l *peerList, w int64) {
	s.recFor, s.recW = l, w
	s.rec = s.rec[:0]
	s.recBase = s.recBase[:0]
	for _, q := range l.primary {
		s.recBase = append(s.recBase, q.currentWeight)
	}
}

// scanPrimaryLocked runs the scan over l's primaries, grouped by weight
// where that is cheaper (see weightGroups), plain otherwise; with ws set (a
// peer may be warming), in slowScale units (scanWarm, weightGroups.unit).
func (s *smoothRR) scanPrimaryLocked(l *peerList, r *Request, clk *lazyClock, ws *slowStart) *Peer {
	if s.groupedFor != l {
		g := s.groupsBuilt
		if g == nil || g.list != l {
			g = newWeightGroups(l)
			s.groupsBuilt = g
		}
		if g != nil {
			g.unit = 1
			if s.slow.scaled {
				g.unit = slowScale
			}
			if !g.regroup() {
				g = nil
			}
		}
		s.groups, s.groupedFor = g, l
	}
	switch {
	case s.groups != nil:
		return s.groups.scan(r, clk, ws)
	case ws != nil:
		return scanWarm(l.primary, r, clk, ws)
	}
	return scanSmooth(l.primary, r, clk)
}

// report is Done for every owner of a smoothRR: a success on a peer with
// no failures on record only ends the attempt, without the lock.
func (s *smoothRR) report(p *Peer, o Outcome) error {
	if err := s.finish(p, o); err != nil || (!o.Failed && !p.needsLockOnSuccess()) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.reportLocked(p, o)
	return nil
}

// reportLocked accounts the outcome of an attempt on p, already ended by
// finish, keeping the cycle, the groups and the recorder exact. Requires
// s.mu.
func (s *smoothRR) reportLocked(p *Peer, o Outcome) {
	if p.owner.Load() != &s.peerSet {
		return // removed while in flight
	}
	l := s.load()
	if o.Failed && !p.backup.Load() {
		s.closeLocked()
		s.recFor = nil
	}
	g := s.groups
	if g != nil && (p.backup.Load() || g.list != l) {
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
	if !s.shared || s.openedFor == l {
		s.maybeOpenLocked(l)
	}
}

// changedLocked runs after every peer-list change; publish has set every
// current weight to 0.
func (s *smoothRR) changedLocked(l *peerList) {
	s.groups, s.groupedFor, s.groupsBuilt = nil, nil, nil
	s.recFor = nil
	if c := s.cycle.Swap(nil); c != nil {
		c.ctr.Or(closedBit)
	}
	if s.shared {
		s.openedFor = nil // at the first fallback: see fallbackLocked
		return
	}
	s.maybeOpenLocked(l)
}

// closeLocked hands the sequence back to the scan. A cycle that served k
// picks from current weights b_i left peer i at b_i + k·w_i − W·c_i, where c_i
// counts i's picks among the first k mod W: each pick adds w_i to every
// current weight and takes W from the winner's.
func (s *smoothRR) closeLocked() {
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

// impliedLocked returns p's current weight where SmoothWRR keeps it
// implicitly: in a weight group (base + offset), or while the cycle stands
// for it, by the formula closeLocked uses, in O(n).
func (s *smoothRR) impliedLocked(p *Peer) (int64, bool) {
	if g := s.groups; g != nil && !p.backup.Load() && p.index < len(g.of) &&
		g.list.primary[p.index] == p && g.of[p.index] >= 0 {
		return g.cw(int32(p.index)), true
	}
	c := s.cycle.Load()
	if c == nil || p.backup.Load() || p.index >= len(c.list.primary) || c.list.primary[p.index] != p {
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
func (s *smoothRR) maybeOpenLocked(l *peerList) {
	if s.cycle.Load() != nil || l.single || s.recFor == l || s.slow.until.Load() != 0 || s.held {
		return // a warming peer (slow start) breaks the period too
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
		if p.effectiveWeight != p.smooth || !p.clean() {
			return
		}
		zero = zero && p.currentWeight == 0
		w += p.smooth
	}
	if w == 0 || w > maxCycle {
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
	c = c.reopen()
	if s.entry != nil {
		c.ctr.Store(s.entry(c.w))
	}
	s.cycle.Store(c)
	// The cycle now stands for the current weights; when it closes, it
	// writes them all back, and the scan groups them afresh.
	s.groups, s.groupedFor = nil, nil
}

// warmLocked returns the guard if a peer of l may be warming, for a pick by
// the smooth scan, nil if none is. On the first such pick the current
// weights go to slowScale units (the cycle closed, the groups written back
// and rebuilt in those units); once none warms, they end. Requires s.mu.
func (s *smoothRR) warmLocked(l *peerList, clk *lazyClock) *slowStart {
	if !s.slow.warming(clk) {
		if s.slow.leaveScaleLocked(l) {
			s.groups, s.groupedFor = nil, nil // regrouped in units of 1
		}
		return nil
	}
	if !s.slow.scaled {
		s.closeLocked()
		if g := s.groups; g != nil {
			g.materializeLocked()
		}
		s.slow.enterScaleLocked(l, slowScale)
		s.groups, s.groupedFor = nil, nil // regrouped in slowScale units
	}
	s.recFor = nil
	return &s.slow
}
