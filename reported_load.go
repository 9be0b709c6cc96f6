package balancer

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// The reported load in detail. Every load-aware picker counts the attempts
// it has in flight on a peer (Peer.InFlight), which are its own: with many
// clients on one fleet, each sees a fraction of every server's queue, and
// all of them judge the others' share to be zero. A server that reports
// its requests in flight (ServerLoad.InFlight, ORCA's named_metrics.rif)
// says what the others are doing. With WithReportedLoad(window, n) on, the
// load a picker compares, in place of its own in-flight count o(t), is
//
//	L(t) = n·o(t) + x·max(0, 1 − (t − t_r)/window)
//	x    = max(0, R − (o_r + 1))
//
// where R is the count the peer's server reported with the reply at t_r,
// and o_r the picker's own attempts on the peer still in flight once that
// reply's attempt ended. This is C3's queue estimate (Suresh et al., NSDI
// 2015), q̂ = 1 + os·n + q̄ (os this client's outstanding requests, n the
// number of clients, q̄ the server's reported queue), with x for q̄ and a
// fade for C3's EWMA; the 1 is each picker's own (P2CPeakEWMA's and
// FastestFirst's costs add 1 to the load, LeastConn and RandomTwo compare
// loads).
//
// The derivation. At t_r the server held R requests; of those, o_r + 1
// were this picker's (the one it replied to, which the server counts while
// it writes the report, as loadreport.Middleware does, and the others
// still in flight, at the server or on their way, an overcount only for
// the ones not yet arrived), so x = R − (o_r + 1) were the other clients'.
// A report R < o_r + 1 (attempts still on their way, or a server that
// counts differently) says no one else is there: x = 0. After t_r the own
// part is known exactly at every instant, o(t); the others' part is not,
// and its best estimate is its last value, trusted less as it ages. n, as
// in C3, counts each own attempt as n: the n − 1 other clients, reading
// the same reports, are taken to send as this one does, so that clients
// that share stale reports do not all crowd onto the peer that looked
// least loaded; it overcounts the others' attempts made before t_r, which
// x holds already, by design. With n = 1 and no other client (x = 0), L
// is the own count and every pick is exactly that of the option off; for
// LeastConn and RandomTwo, which compare L/w, so it is with any n until a
// report shows another client, since n·o ranks as o does.
//
// Staleness: a peer the picker avoids sends no replies, hence no new
// reports, so a report must not keep its weight forever. x fades linearly
// to zero over window and is gone past it: from then on the peer's load
// is n·o alone, until its next reply. A linear fade ends exactly (an
// exponential one would leave a remainder that still breaks every tie
// against the peer) and costs a multiplication, not an exponential, on the
// pick. How long a window: the report of a peer a client avoids ages
// with no replacement, and what the others do there meanwhile is unknown;
// cutting the report off at a short age makes the peer look empty to
// every client that avoided it, at about the same time, and they all
// return at once. A long window, many times the latency and longer than
// a server's speed lasts, lets them return gradually: in the simulator's
// fleets (ten backends whose speeds are redrawn about every second, 10-30
// ms mean service times, 16 clients) 10 s beats 200 ms by 1.3× or more in
// p99 (TestReportedLoad_fleets).
//
// The last report replaces the previous one rather than entering an
// average: it is the freshest count of a queue, and the fade already
// discounts it with age.
//
// Weights divide L whole: a peer of weight w is as loaded as L/w, the
// servers' counts included, as a weight stands for capacity and the
// server's count is the demand on all of it. L is a float64: LeastConn and
// FastestFirst compare L_p·w_q with L_q·w_p in floating point, exact for
// own counts alone (integers below 2^53), so that the ties nginx's smooth
// round-robin breaks are the same ties as with the option off for as long
// as no other client is reported.
//
// Reports above maxReportedInFlight are ignored: more requests than a peer
// can hold of one picker's attempts (connBits) is not a count to trust, and
// a lie that large would keep the peer out for the whole window.
//
// Concurrency: a report writes the others' count and its time as two
// atomic words, the count first; a pick that reads the new count with the
// previous time fades it a little more than it should, for that pick. The
// pick reads the clock once (lazyClock), and only when a peer it compares
// holds a report.

// maxReportedInFlight is the largest count a report may carry and be
// used: the most attempts one picker can hold on a peer (connMask).
const maxReportedInFlight = connMask

// reportedLoad is a picker's WithReportedLoad setting: the fade window
// of a report, in ns, 0 when the option is off, and n, the clients each
// own attempt stands for. Immutable after construction.
type reportedLoad struct{ window, n float64 }

func (r reportedLoad) on() bool { return r.window > 0 }

// serverCount is what a picker keeps of one peer's reports, inside its
// per-peer state (peerstate.go): written by atomic stores on the report
// path, read lock-free by picks.
type serverCount struct {
	others atomic.Uint64 // math.Float64bits of x, the other clients' count at the last report; 0: none
	stamp  atomic.Int64  // unix ns of the last report
}

// note records the report l, if it carries an in-flight count, on an
// attempt of p that finish has just ended, at now. own is p's in-flight
// count read after the release.
func (c *serverCount) note(l *ServerLoad, own, now int64) {
	if l == nil || !l.HasInFlight || l.InFlight > maxReportedInFlight {
		return
	}
	x := max(0, l.InFlight-float64(own+1))
	c.others.Store(math.Float64bits(x))
	c.stamp.Store(now)
}

// load returns L for a peer with own attempts in flight: n·own, plus the
// others' count of its last report faded to clk's time. It reads the clock
// only if a report is held.
func (r reportedLoad) load(c *serverCount, own int64, clk *lazyClock) float64 {
	l := r.n * float64(own)
	bits := c.others.Load()
	if bits == 0 {
		return l
	}
	age := float64(clk.get() - c.stamp.Load())
	if age >= r.window {
		return l
	}
	f := 1.0
	if age > 0 { // a clock that steps back counts as no age
		f = 1 - age/r.window
	}
	return l + math.Float64frombits(bits)*f
}

// compareReported is compareLoad over reported loads: negative when a
// peer of load pl and weight pw is less loaded than one of ql and qw, 0
// when equal; weight 0 as in compareLoad.
func compareReported(pl float64, pw int64, ql float64, qw int64) int {
	switch {
	case pw == 0 && qw == 0:
		pw, qw = 1, 1
	case pw == 0:
		return 1
	case qw == 0:
		return -1
	}
	switch a, b := pl*float64(qw), ql*float64(pw); {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// compare compares two peers' loads as a picker does: their own counts pc
// and qc (compareLoad, compareLoadWide) with the option off, their reported loads pl and ql
// (compareReported) with it on.
func (r reportedLoad) compare(pc int64, pl float64, pw int64, qc int64, ql float64, qw int64) int {
	if !r.on() {
		if (pc|pw|qc|qw)>>31 != 0 {
			return compareLoadWide(pc, pw, qc, qw)
		}
		return compareLoad(pc, pw, qc, qw)
	}
	return compareReported(pl, pw, ql, qw)
}

// reportPeer is the per-peer state (peerstate.go) of the pickers that
// keep nothing of a peer but its reports, LeastConn and RandomTwo, made
// only when WithReportedLoad is on.
type reportPeer struct {
	peerState
	srv serverCount
}

func newReportPeer(int64) *peerState {
	s := &reportPeer{}
	s.own = s
	return &s.peerState
}

// reportNone is the state reportOf returns for a peer that holds no
// reportPeer: a report that raced the peer's claim by another picker
// writes here, where nothing reads it.
var reportNone reportPeer

// reportOf returns p's reportPeer, or reportNone. Lock-free.
func reportOf(p *Peer) *serverCount {
	if h := p.state.Load(); h != nil {
		if s, ok := h.own.(*reportPeer); ok {
			return &s.srv
		}
	}
	return &reportNone.srv
}

// reportedSetting is WithReportedLoad's setting.
type reportedSetting struct {
	window  time.Duration
	clients int
	set     bool
}

// maxReportedClients bounds WithReportedLoad's clients.
const maxReportedClients = 1 << 20

// WithReportedLoad makes LeastConn, RandomTwo, P2CPeakEWMA and FastestFirst
// weigh the requests in flight a peer's server reports with its replies
// (Outcome.Load with HasInFlight), which count every client's attempts.
// In place of its own in-flight count o, a peer's load becomes
// clients·o plus the other clients' attempts at its last report (the
// reported count less the picker's own attempts then), the latter fading
// linearly to nothing over window after the report, so that a peer that
// stops reporting is judged by its own count again. clients is how many
// clients balance over these servers independently, C3's herd factor: each
// own attempt counts as that many. Weights divide the whole load.
//
// With clients 1 and no other client in the reports, every pick is the same
// as without the option; so it is for LeastConn and RandomTwo with any
// clients. window must be positive, clients in [1, 2^20]. In the
// simulator's fleets of 16 and 64 clients over ten backends of 10-30 ms,
// window 10 s and clients 16 cut LeastConn's p99 by 1.5× and 1.4×. A count
// above 2^24−1 is ignored. The option adds no lock and no allocation to
// Pick or Done. The other pickers refuse it.
//
// A program that builds pickers from the registry passes it to those whose
// Algorithm.Options name "WithReportedLoad": a.New(peers, WithClock(now),
// WithReportedLoad(10*time.Second, 16)).
func WithReportedLoad(window time.Duration, clients int) Option {
	return ownOption("WithReportedLoad", func(s *reportedSetting) { *s = reportedSetting{window, clients, true} })
}

// reportedOptions applies cfg's WithReportedLoad, if given, and checks it.
func reportedOptions(picker string, cfg *config) (reportedLoad, error) {
	var s reportedSetting
	applyOwn(cfg, &s)
	switch {
	case !s.set:
		return reportedLoad{}, nil
	case s.window <= 0:
		return reportedLoad{}, fmt.Errorf("balancer: %s: WithReportedLoad(%v, %d): window not positive: %w", picker, s.window, s.clients, ErrInvalidConfig)
	case s.clients < 1 || s.clients > maxReportedClients:
		return reportedLoad{}, fmt.Errorf("balancer: %s: WithReportedLoad(%v, %d): clients out of [1, %d]: %w", picker, s.window, s.clients, maxReportedClients, ErrInvalidConfig)
	}
	return reportedLoad{window: float64(s.window), n: float64(s.clients)}, nil
}
