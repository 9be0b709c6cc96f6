package balancer

import (
	"math/bits"
	"sync/atomic"
)

// LeastConn in detail. Each pick goes to the eligible peer with the fewest
// attempts in flight per unit of weight, the first such peer in order
// winning, and when several peers share that lowest load, smooth weighted
// round-robin chooses among them, so that a slow peer, whose attempts stay
// in flight longer, gets fewer of them.
//
// The in-flight count of a peer (Peer.InFlight, nginx's conns) counts the
// attempts Pick returned and Done has not yet reported. Loads are compared
// by cross multiplication, as nginx does, so no division rounds them:
// p is less loaded than q when p.conns·q.weight < q.conns·p.weight. For
// example a (weight 2, 3 in flight) against b (weight 1, 1 in flight): 1·2 <
// 3·1, so b. When peers tie with the lowest load, the tied ones, from the
// first of them onward, go through one full step of nginx's smooth
// round-robin (each adds its effective weight to its current weight, the
// largest wins, the first on a tie, and gives back the total; see
// SmoothWRR); with no tie, current and effective weights are left alone.
// A peer of weight 0 is chosen only when no eligible peer has a weight,
// since cross multiplication says nothing about it.
//
// With WithReportedLoad, a peer's conns in all of the above is its reported
// load L (reported_load.go): its in-flight count plus the other clients'
// attempts at its last report, faded; a peer of weight w is as loaded as
// L/w, so the weight divides the servers' counts too. Until some peer's
// report shows another client, L is the in-flight count and every pick is
// nginx's.
//
// Eligibility, failures (max_fails, fail_timeout, the effective weight a
// failure lowers and later ties restore), backup and down peers,
// max_conns, per-request tries and the single-server rule all follow
// nginx's round-robin module, which least_conn shares.
//
// Cost of a pick. The least loaded peer depends on in-flight counts that
// every report changes, and the tie-break is nginx's smooth step over every
// tied peer, a write to each of them; in the plain case (every pick a
// report apart, all idle) every peer ties on every pick. The index
// (least_conn_index.go) keeps both exact in O(d + k + log n): the regular
// peers in a heap per weight, ordered by count, the smooth step among the
// tied peers of one weight and count applied lazily (one increment for all
// of them), and the k others (failed, recovering, weight 0) scanned as
// before. A report moves its peer in the index, so Done takes the lock
// while the index is in use. nginx's O(n) scan (scanLeastConn) remains for
// the backups, under WithReportedLoad (real-valued loads) and while a peer
// warms (slow start's scaled weights), and as the tests' reference.

// LeastConn is nginx's least_conn (ngx_http_upstream_least_conn_module.c,
// from nginx 1.3.1/1.2.2 on): each pick goes to the eligible peer with the
// fewest attempts in flight per unit of weight, nginx's smooth round-robin
// choosing among ties. Failures, backup and down peers, max_conns and
// retries follow nginx's round-robin module ([Peer], [Request]). Choose it
// when requests vary widely in how long they take, so that a slow peer
// gets fewer of them. With [WithReportedLoad], the count of a peer whose
// server reports its requests in flight takes in the other clients'
// attempts too.
//
// A pick is O(d + log n) under the picker's lock, d the number of distinct
// weights, plus O(k) for the k peers with failures on record or a
// recovering effective weight; a report takes the lock too, O(log n). With
// WithReportedLoad, while a peer warms (WithSlowStart) and among the
// backups, a pick is nginx's O(n) scan. For many cores use [RandomTwo]:
// lock-free. The zero value is not usable; use [NewLeastConn]. LeastConn
// is safe for concurrent use.
type LeastConn struct {
	peerSet
	rep reportedLoad // WithReportedLoad; immutable after construction
	// srv holds, with WithReportedLoad, the reports kept of each primary
	// and each backup (reported_load.go), in list order, so that the scan
	// reads them beside the peers. Rebuilt on every change; guarded by mu.
	srv [2][]*serverCount

	// ix orders the primaries by load (least_conn_index.go); guarded by
	// mu. indexed is set while ix is in use, so that a report takes the
	// lock to refresh its peer there only then. scanOnly keeps every pick
	// on nginx's scan (the tests' reference); set before use.
	ix       lcIndex
	indexed  atomic.Bool
	scanOnly bool
}

// leastConnSpec is LeastConn's declaration (see pickerSpec).
var leastConnSpec = pickerSpec{name: "LeastConn", options: []string{"WithReportedLoad", "WithSlowStart"}}

// NewLeastConn returns a LeastConn over peers. opts: the shared options
// (see Option).
func NewLeastConn(peers []*Peer, opts ...Option) (*LeastConn, error) {
	cfg, err := newConfig(leastConnSpec, opts)
	if err != nil {
		return nil, err
	}
	rep, err := reportedOptions(leastConnSpec.name, &cfg)
	if err != nil {
		return nil, err
	}
	b := &LeastConn{rep: rep}
	if rep.on() {
		b.fresh = newReportPeer
	}
	b.currentWeight = b.ix.impliedLocked
	if err := b.init(peers, cfg, b.changedLocked); err != nil {
		return nil, err
	}
	return b, nil
}

// Pick returns the least loaded eligible peer.
func (b *LeastConn) Pick(r *Request) (*Peer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	clk := lazyClock{now: b.now}
	l := b.load()
	if b.rep.on() || !b.slow.idleLocked() || b.scanOnly || !b.ix.usable(l) {
		return b.scanLocked(l, r, &clk)
	}
	if b.ix.list != l {
		// Set before the index reads any count: a report that misses it
		// has ended its attempt before the fill reads the count.
		b.indexed.Store(true)
	}
	return pickFrame(l, r, func(peers []*Peer, backup bool) int {
		if backup {
			return scanLeastConn(peers, r, &clk, b.rep, nil, nil)
		}
		return b.ix.pickLocked(l, r, &clk)
	})
}

// scanLocked is Pick by nginx's scan over every peer, O(n): with
// WithReportedLoad (whose loads are reals), while a peer may be warming
// (slow start's scaled weights), and as the tests' reference. The index,
// if in use, hands its current weights back to the peers first.
func (b *LeastConn) scanLocked(l *peerList, r *Request, clk *lazyClock) (*Peer, error) {
	if b.ix.list != nil {
		b.ix.dropLocked()
		b.indexed.Store(false)
	}
	var ws *slowStart // non-nil while a peer may be warming
	if !b.slow.idleLocked() && b.scaleLocked(l, clk, slowScale) {
		ws = &b.slow
	}
	return pickFrame(l, r, func(peers []*Peer, backup bool) int {
		srv := b.srv[0]
		if backup {
			srv = b.srv[1]
		}
		return scanLeastConn(peers, r, clk, b.rep, srv, ws)
	})
}

// changedLocked rebuilds what LeastConn derives from l: the index, sized
// for it (every current weight is 0), and with WithReportedLoad, srv.
// Requires b.mu.
func (b *LeastConn) changedLocked(l *peerList) {
	b.indexed.Store(false)
	b.ix.prepare(l)
	if !b.rep.on() {
		return
	}
	for k, peers := range [2][]*Peer{l.primary, l.backup} {
		srv := make([]*serverCount, len(peers))
		for i, p := range peers {
			srv[i] = reportOf(p)
		}
		b.srv[k] = srv
	}
}

// scanLeastConn is nginx's ngx_http_upstream_get_least_conn_peer over one
// list: the first peer with the lowest load, then the smooth round-robin
// step among the peers tied with it. It returns the winner's index with its
// attempt counted in flight, or -1. Requires the owner's lock.
//
// Done lowers in-flight counts without the lock, so each count is read once
// per comparison and the tied peers are matched against the winner's count
// as first read; a count that drops meanwhile can only make a peer look
// busier than it is for this one pick. With rep on, the loads compared are
// the reported ones (reported_load.go), read the same way, srv[i] holding
// peer i's reports.
//
// With ws set (a peer may be warming, guard_slowstart.go), every weight is in
// slowScale units, scaled by the peer's slow-start factor: in the loads
// compared and in the smooth step among ties (warmStep).
func scanLeastConn(peers []*Peer, r *Request, clk *lazyClock, rep reportedLoad, srv []*serverCount, ws *slowStart) int {
	var least *Peer
	var at int         // least's position in peers
	var conns, w int64 // least's in-flight count and weight, as read
	var load float64   // least's reported load, with rep on
	var many bool      // another peer ties with least
	for i, p := range peers {
		if r.isTried(i) || !p.eligible(clk) {
			continue
		}
		pc, pw := p.inFlight(), p.weight.Load()
		if ws != nil {
			pw = ws.scaledWeight(p, pw, clk.get())
		}
		var pl float64
		if rep.on() {
			pl = rep.load(srv[i], pc, clk)
		}
		if least == nil {
			least, at, conns, w, load, many = p, i, pc, pw, pl, false
			continue
		}
		switch c := rep.compare(pc, pl, pw, conns, load, w); {
		case c < 0:
			least, at, conns, w, load, many = p, i, pc, pw, pl, false
		case c == 0:
			many = true
		}
	}
	if least == nil {
		return -1
	}
	best, bestAt := least, at
	if many {
		best, bestAt = tieLeastConn(peers, r, clk, rep, srv, ws, least, at, conns, w, load)
	}
	best.probeLocked(clk.get())
	best.pick()
	return bestAt
}

// tieLeastConn is scanLeastConn's second pass, nginx's smooth step
// restricted to the peers that tie with least (found at at, with conns in
// flight, weight w and reported load load): least is among them whatever
// its count reads now. It returns the winner and its position. A function
// of its own so that the first pass, run on every pick, keeps its
// variables in registers. Requires the owner's lock.
func tieLeastConn(peers []*Peer, r *Request, clk *lazyClock, rep reportedLoad, srv []*serverCount, ws *slowStart,
	least *Peer, at int, conns, w int64, load float64) (*Peer, int) {
	best, bestAt := least, at
	var total int64
	for i := at; i < len(peers); i++ {
		p := peers[i]
		if r.isTried(i) || !p.eligible(clk) {
			continue
		}
		if p != least {
			pc := p.inFlight()
			var pl float64
			if rep.on() {
				pl = rep.load(srv[i], pc, clk)
			}
			pw := p.weight.Load()
			if ws != nil {
				pw = ws.scaledWeight(p, pw, clk.get())
			}
			if rep.compare(pc, pl, pw, conns, load, w) != 0 {
				continue
			}
		}
		if ws != nil {
			total += warmStep(p, ws, clk.get())
		} else {
			total += smoothStep(p)
		}
		if p.currentWeight > best.currentWeight {
			best, bestAt = p, i
		}
	}
	best.currentWeight -= total
	return best, bestAt
}

// compareLoad compares the load of a peer with pc attempts in flight and
// weight pw with that of one with qc and qw: negative when the first is
// less loaded, 0 when equal. Loads are conns/weight, compared as
// pc·qw against qc·pw, exactly while every factor is below 2^31 (nginx's
// weights and any real in-flight count: the products fit in 63 bits);
// compareLoadWide takes the rest. A peer of weight 0 is more loaded than
// any peer with weight, and two of them compare by count. Small enough to
// inline in the scans' comparison (reportedLoad.compare).
func compareLoad(pc, pw, qc, qw int64) int {
	switch {
	case pw == 0 && qw == 0:
		pw, qw = 1, 1
	case pw == 0:
		return 1
	case qw == 0:
		return -1
	}
	switch a, b := pc*qw, qc*pw; {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compareLoadWide is compareLoad with the products in 128 bits: under slow
// start the weights are scaled by 2^10 (guard_slowstart.go), and a product
// could pass 2^63.
func compareLoadWide(pc, pw, qc, qw int64) int {
	switch {
	case pw == 0 && qw == 0:
		pw, qw = 1, 1
	case pw == 0:
		return 1
	case qw == 0:
		return -1
	}
	ah, al := bits.Mul64(uint64(pc), uint64(qw))
	bh, bl := bits.Mul64(uint64(qc), uint64(pw))
	switch {
	case ah < bh || ah == bh && al < bl:
		return -1
	case ah > bh || al > bl:
		return 1
	}
	return 0
}

// Done implements Picker.Done. With WithReportedLoad, it also keeps the
// count the outcome's Load reports, lock-free. While the index is in use
// it takes the lock, to move p to its new count there.
func (b *LeastConn) Done(p *Peer, o Outcome) error {
	if err := b.finish(p, o); err != nil {
		return err
	}
	// indexed is read after finish ended the attempt: if it reads false,
	// an index filled from here on reads the count already lowered.
	account := o.Failed || p.needsLockOnSuccess()
	if account || b.indexed.Load() {
		b.mu.Lock()
		if account {
			b.doneLocked(b.load(), p, o)
		}
		if p.owner.Load() == &b.peerSet { // else p.index is another list's
			b.ix.refreshLocked(p)
		}
		b.mu.Unlock()
	}
	if b.rep.on() {
		b.sawReply(p, o, reportsInFlight(o.Load)) // sight.go
	}
	if b.rep.on() && o.Load != nil && p.owner.Load() == &b.peerSet {
		reportOf(p).note(o.Load, p.inFlight(), b.now())
	}
	return nil
}
