package balancer

import (
	"math"
	"math/bits"
	"sync/atomic"
)

// FastestFirst's sampled mode. With more than ffExactMax peers a scan of
// every peer under the picker's lock costs O(n) a pick and serializes the
// cores, so the pick becomes the least expected delay among ffChoices peers
// drawn by derived weight, lock-free:
//
//   - The derived weights are those of the exact mode, moved under the
//     lock only when an estimate leaves its band (law 3), but one peer at
//     a time (reweighLocked): the peer whose estimate left its band is
//     reweighed against its list's last recompute, O(1), and the list is
//     recomputed, O(n), once every n such reweighs, or when one report in
//     n, drawn at random, asks for it (refresh), so that a stale fastest
//     estimate that no band exit would reveal is still corrected, about
//     once per n reports. Each recompute rebuilds Vose's alias table over
//     the weights, O(n), off the pick path; a single reweigh updates the
//     peer's comparison weight in the table, not its draw probability. A
//     pick draws ffChoices peers from the table, O(1) each, and takes the
//     eligible one with the least (in flight + 1)/weight, the first drawn
//     on a tie. Drawing by weight and then comparing per unit of weight is
//     the weighted power of d choices (as in P2CPeakEWMA and nginx's
//     random two): a peer's share still falls with its weight (law 1), and
//     the in-flight counts still steer attempts away from a peer whose
//     replies lag. Smooth round-robin's order among ties needs a serial
//     state and is dropped: ties go to the first drawn.
//   - A failed peer due for its probe goes first (law 2), as in the exact
//     mode: the peers with failures on record are kept in a short list,
//     rebuilt only when a peer starts or stops failing, and a pick checks
//     them before drawing. A peer being explored (law 4) is skipped while
//     its one attempt is out.
//   - A successful report on a peer with no failures on record and not
//     being explored takes no lock: the estimate moves by compare-and-swap,
//     and the lock is taken only when the peer's estimate, or that of one
//     other peer drawn at random (so that a stalled or idle peer is still
//     checked, on average once every n reports, where the exact mode checks
//     one in turn on every pick), has left its band. Failures, abandoned
//     attempts, probes, explored peers and peers whose nginx effective
//     weight is recovering take the exact mode's locked path, O(1) but for
//     the deferred recompute.
//
// What this trades: the exact mode finds the least loaded of all n peers;
// the sampled one the least loaded of three, which with n in the hundreds
// or more is what the power of d choices is known to need (the maximum
// load falls from log n/log log n to log log n/log d). The simulator's
// scenarios run 10 backends, in the exact mode.

// ffExactMax is the most peers (primaries and backups) FastestFirst scans
// exactly, under its lock; above it, picks are sampled and lock-free.
const ffExactMax = 32

// ffChoices is how many peers a sampled pick draws.
const ffChoices = 3

// ffEffort is how many rounds of draws a sampled pick makes before it scans
// the eligible peers.
const ffEffort = 4

// ffTable is the sampled mode's snapshot of one peer list: Vose's alias
// tables over the derived weights and the peers with failures on record.
// The list and the sizes are fixed when the list changes, which allocates
// them; a recompute rewrites the tables in place, through atomics, so that
// neither it nor a pick allocates. A pick that races a rewrite may draw
// from a table half old and half new: every column still names a peer of
// the list, so the draw is only skewed, for that one pick.
type ffTable struct {
	list    *peerList
	primary ffAliasTable
	backup  ffAliasTable

	failing  []atomic.Int64 // the first nFailing entries: i for primary i, -1-i for backup i
	nFailing atomic.Int64
}

// ffAliasTable is rwTable with atomic columns, and the scratch of its
// rebuild (guarded by the owner's lock).
type ffAliasTable struct {
	n     uint64
	thr   []atomic.Uint64
	alias []atomic.Int32
	w     []atomic.Int64 // the derived weight each peer is drawn with
	st    []*ffPeer      // each peer's state (peerstate.go), read beside the peer without a load from it

	s            []uint64
	small, large []int
}

func newFFAliasTable(peers []*Peer) ffAliasTable {
	n := len(peers)
	t := ffAliasTable{
		n: uint64(n), thr: make([]atomic.Uint64, n), alias: make([]atomic.Int32, n), w: make([]atomic.Int64, n),
		st: make([]*ffPeer, n), s: make([]uint64, n), small: make([]int, 0, n), large: make([]int, 0, n),
	}
	for i, p := range peers {
		t.st[i] = ffOf(p)
	}
	return t
}

// rebuildLocked rewrites t over peers' derived weights (0 for down peers;
// all 1 if every weight is 0), by newRWTable's construction. Requires the
// owner's lock.
func (t *ffAliasTable) rebuildLocked(peers []*Peer) {
	n := t.n
	if n == 0 {
		return
	}
	var total uint64
	for i, p := range peers {
		var w int64
		if !p.down.Load() {
			w = ffOf(p).derived.Load()
		}
		t.s[i] = uint64(w)
		total += uint64(w)
	}
	if total == 0 {
		for i := range t.s {
			t.s[i] = 1
		}
		total = n
	}
	for i := range t.s {
		t.w[i].Store(int64(t.s[i]))
	}
	t.small, t.large = voseAlias(t.s, total, t.s, t.small, t.large, func(i int, thr uint64, alias int) {
		t.thr[i].Store(thr)
		t.alias[i].Store(int32(alias))
	})
}

// draw maps one 64-bit random value to a peer index, as rwTable.draw.
func (t *ffAliasTable) draw(x uint64) int {
	hi, lo := bits.Mul64(x, t.n)
	if lo >= t.thr[hi].Load() {
		return int(t.alias[hi].Load())
	}
	return int(hi)
}

// newFFTableLocked allocates the sampled mode's table for l. Requires f.mu.
func newFFTableLocked(l *peerList) *ffTable {
	return &ffTable{
		list:    l,
		primary: newFFAliasTable(l.primary),
		backup:  newFFAliasTable(l.backup),
		failing: make([]atomic.Int64, len(l.primary)+len(l.backup)),
	}
}

// publishDrawLocked rewrites the draw tables over l's derived weights.
// Requires f.mu.
func (f *FastestFirst) publishDrawLocked(l *peerList) {
	t := f.draw.Load()
	if t == nil || t.list != l {
		t = newFFTableLocked(l)
		f.publishFailingIn(t)
		defer f.draw.Store(t)
	}
	t.primary.rebuildLocked(l.primary)
	t.backup.rebuildLocked(l.backup)
	f.work += uint64(len(l.primary) + len(l.backup))
}

// publishFailingLocked rewrites the list of peers with failures on record.
// Requires f.mu.
func (f *FastestFirst) publishFailingLocked(l *peerList) {
	if t := f.draw.Load(); t != nil && t.list == l {
		f.publishFailingIn(t)
		return
	}
	f.publishDrawLocked(l)
}

func (f *FastestFirst) publishFailingIn(t *ffTable) {
	k := 0
	for i, p := range t.list.primary {
		if p.fails.Load() != 0 {
			t.failing[k].Store(int64(i))
			k++
		}
	}
	for i, p := range t.list.backup {
		if p.fails.Load() != 0 {
			t.failing[k].Store(int64(-1 - i))
			k++
		}
	}
	t.nFailing.Store(int64(k))
}

// pickSampled is Pick in the sampled mode: the frame around chooseSampled,
// without a lock.
func (f *FastestFirst) pickSampled(t *ffTable, r *Request) (*Peer, error) {
	clk := lazyClock{now: f.now}
	var ws *slowStart // non-nil while a peer may be warming (guard_slowstart.go)
	if f.slow.warming(&clk) {
		ws = &f.slow
	}
	return pickFrame(t.list, r, func(peers []*Peer, backup bool) int {
		tb := &t.primary
		if backup {
			tb = &t.backup
		}
		i := f.chooseSampled(t, peers, tb, backup, r, &clk, ws)
		if i >= 0 && peers[i].inFlight() == 1 {
			// A peer idle until now starts its silence now (takeFastest).
			tb.st[i].since.Store(clk.get())
		}
		return i
	})
}

// chooseSampled returns the index in peers of the peer taken, or -1. With
// ws set, the derived weights compared are scaled by the slow-start
// factors, as scanFastest's.
func (f *FastestFirst) chooseSampled(ft *ffTable, peers []*Peer, t *ffAliasTable, backup bool, r *Request, clk *lazyClock, ws *slowStart) int {
	if t.n == 0 || uint64(len(peers)) != t.n {
		return -1
	}
	if i := probeSampled(ft, peers, backup, r, clk); i >= 0 {
		return i
	}
	for range ffEffort {
		best := -1
		var bc, bw int64
		var bl float64 // best's reported load + 1, with WithReportedLoad
		for range ffChoices {
			i := t.draw(f.rand.uint64())
			p := peers[i]
			if r.isTried(i) || !p.eligible(clk) || t.st[i].exploring.Load() && p.inFlight() != 0 {
				continue
			}
			c, w := p.inFlight()+1, t.w[i].Load()
			if ws != nil {
				w = ws.scaledWeight(p, w, clk.get())
			}
			var l float64
			if f.rep.on() {
				l = f.rep.load(&t.st[i].srv, c-1, clk) + 1
			}
			if best < 0 || f.rep.compare(c, l, w, bc, bl, bw) < 0 {
				best, bc, bl, bw = i, c, l, w
			}
		}
		if best >= 0 && peers[best].take(clk) {
			return best
		}
	}
	// The draws keep missing: the least loaded eligible peer, exactly.
	for _, gate := range [2]bool{true, false} {
		best := -1
		var bc, bw int64
		var bl float64 // best's reported load + 1, with WithReportedLoad
		for i, p := range peers {
			if r.isTried(i) || !p.eligible(clk) || gate && t.st[i].exploring.Load() && p.inFlight() != 0 {
				continue
			}
			c, w := p.inFlight()+1, t.w[i].Load()
			if ws != nil {
				w = ws.scaledWeight(p, w, clk.get())
			}
			var l float64
			if f.rep.on() {
				l = f.rep.load(&t.st[i].srv, c-1, clk) + 1
			}
			if best < 0 || f.rep.compare(c, l, w, bc, bl, bw) < 0 {
				best, bc, bl, bw = i, c, l, w
			}
		}
		if best >= 0 && peers[best].take(clk) {
			return best
		}
	}
	return -1
}

// probeSampled takes the failed peer of peers due for its probe that has
// waited longest, if any: past its fail window, nothing in flight, a
// configured weight. The probe is claimed by compare-and-swap (take).
func probeSampled(t *ffTable, peers []*Peer, backup bool, r *Request, clk *lazyClock) int {
	k := min(int(t.nFailing.Load()), len(t.failing))
	best := -1
	for j := range k {
		i := int(t.failing[j].Load())
		if backup != (i < 0) {
			continue
		}
		if i < 0 {
			i = -1 - i
		}
		if i >= len(peers) {
			continue
		}
		p := peers[i]
		if r.isTried(i) || p.down.Load() ||
			p.fails.Load() == 0 || p.weight.Load() == 0 || p.inFlight() != 0 ||
			clk.get()-p.checked.Load() <= p.failTimeout.Load() {
			continue
		}
		if best < 0 || p.checked.Load() < peers[best].checked.Load() {
			best = i
		}
	}
	if best >= 0 && peers[best].take(clk) {
		return best
	}
	return -1
}

// doneSampled is Done's lock-free path in the sampled mode, after finish:
// it reports whether it accounted the outcome; if not, Done takes the lock.
func (f *FastestFirst) doneSampled(p *Peer, o Outcome) bool {
	if p.owner.Load() != &f.peerSet {
		return true // removed while in flight
	}
	st := ffOf(p)
	if o.Failed || o.Abandoned || p.needsLockOnSuccess() || p.recovering.Load() || st.exploring.Load() || st.connected.Load() || !f.known[listOf(p)].Load() {
		return false
	}
	now := f.now()
	st.lat.answered()
	st.lat.observe(now, float64(o.Latency), f.tau)
	st.since.Store(now) // an answer ends the silence
	if !f.inBandAt(p, st, now) {
		f.reweigh(p, now)
	}
	if t := f.draw.Load(); t != nil {
		peers, sts := t.list.primary, t.primary.st
		if p.backup.Load() {
			peers, sts = t.list.backup, t.backup.st
		}
		if n := len(peers); n > 1 {
			// The other peer's state from the table, beside it: no load
			// from the peer to find it.
			i := f.rand.int64N(int64(n))
			switch q := peers[i]; {
			case q == p:
				// One report in n, at random: the list's recompute, if
				// single-peer reweighs have deferred one (reweighLocked).
				f.refresh(p, now)
			case !f.inBandAt(q, sts[i], now):
				f.reweigh(q, now)
			}
		}
	}
	return true
}

// refresh recomputes p's list if a single-peer reweigh has changed one of
// its weights since its last recompute: with none, every estimate is still
// inside the band of the weight it was given, and law 3 keeps the weights
// still. It takes the lock only when one is owed.
func (f *FastestFirst) refresh(p *Peer, now int64) {
	which := 0
	if p.backup.Load() {
		which = 1
	}
	if f.pending[which].Load() == 0 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.owner.Load() != &f.peerSet {
		return
	}
	l := f.load()
	peers, which := l.primary, 0
	if p.backup.Load() {
		peers, which = l.backup, 1
	}
	if f.pending[which].Load() != 0 {
		f.recomputeLocked(peers, which, now)
	}
}

// inBandAt reports whether p's estimate at now lies in its band.
func (f *FastestFirst) inBandAt(p *Peer, st *ffPeer, now int64) bool {
	e := f.estimateOf(p, st, f.fastestOf(p), now) // reads atomics only
	return st.inBand(e) || math.IsNaN(e)
}

// reweigh takes the lock and recomputes p's list if p's estimate is still
// out of its band.
func (f *FastestFirst) reweigh(p *Peer, now int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p.owner.Load() == &f.peerSet {
		f.reweighLocked(f.load(), p, now, false)
	}
}
