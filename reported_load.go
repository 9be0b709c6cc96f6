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
// says what the others are doing. With WithReportedLoad(window) on, the
// load a picker compares, in place of its own in-flight count o(t), is
//
//	L(t) = o(t) + x · max(0, 1 − (t − t_r)/window)
//	x    = max(0, R − (o_r + 1))
//
// where R is the count the peer's server reported with the reply at t_r,
// and o_r the picker's own attempts on the peer still in flight once that
// reply's attempt ended. The derivation: at t_r the server held R
// requests; of those, o_r + 1 were this picker's (the one it replied to,
// which the server counts while it writes the report, as
// loadreport.Middleware does, and the others still in flight, at the
// server or on their way, an overcount only for the ones not yet arrived),
// so x = R − (o_r + 1) were the other clients'. After t_r the own part is
// known exactly at every instant, o(t); the others' part is not, and its
// best estimate is its last value, trusted less as it ages. So L adds the
// others' last count, faded, to the own count now, and never counts an own
// attempt twice: a picker alone on the fleet has x = 0, and its picks are
// exactly those of the option off. A report R < o_r + 1 (attempts still on
// their way, or a server that counts differently) says no one else is
// there: x = 0.
//
// Staleness: a peer the picker avoids sends no replies, hence no new
// reports, so a report must not keep its weight forever. The others' count
// fades linearly to zero over window and is gone past it: from then on the
// peer's load is the own count alone, as if it had never reported, until
// its next reply. A linear fade ends exactly (an exponential one would
// leave a remainder that still breaks every tie against the peer) and
// costs a multiplication, not an exponential, on the pick. window should
// be a few times the time a server's queue takes to turn over, about the
// peers' typical latency: a report is then trusted for as long as the
// queue it describes can have stayed the same.
//
// Against C3 (Suresh et al., NSDI 2015), whose queue estimate is q̂ = 1 +
// os·n + q̄ (os this client's outstanding requests, n the number of
// clients, q̄ an EWMA of the reported queue): L keeps C3's two terms, the
// own outstanding requests and the server's report, but subtracts the own
// ones the report already holds rather than adding them on top of it, and
// does not multiply them by n, which a client does not know (C3's n
// anticipates that every other client sends as this one does; here the
// others' actual count comes from the reports). The +1 of q̂ is each
// picker's own: P2CPeakEWMA's and FastestFirst's costs add 1 to the load,
// LeastConn and RandomTwo compare loads. The last report replaces the
// previous one rather than entering an average: it is the freshest count
// of a queue, and the fade already discounts it with age.
//
// Weights divide L whole: a peer of weight w is as loaded as L/w, the
// servers' counts included, as a weight stands for capacity and the
// server's count is the demand on all of it. A count is a float64:
// LeastConn and FastestFirst compare L_p·w_q with L_q·w_p in floating
// point, exact for own counts alone (integers below 2^53), so that the
// ties nginx's smooth round-robin breaks are the same ties as with the
// option off for as long as no other client is reported.
//
// Reports above maxReportedInFlight are ignored: more requests than a peer
// can hold of one picker's attempts (connBits) is not a count to trust, and
// a lie that large would keep the peer out for the whole window.
//
// Concurrency: a report writes the others' count and its time as two
// atomic words, the count first; a pick that reads the new count with the
// previous time fades it a little more than it should, for that pick. The
// pick reads the clock once (lazyClock), and only when a peer it compares
// holds a live report.

// maxReportedInFlight is the largest count a report may carry and be
// used: the most attempts one picker can hold on a peer (connMask).
const maxReportedInFlight = connMask

// reportedLoad is a picker's WithReportedLoad setting: the fade window
// of a report, in ns; 0 when the option is off. Immutable after
// construction.
type reportedLoad struct{ window float64 }

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

// load returns L for a peer with own attempts in flight: own, plus the
// others' count of its last report faded to clk's time. It reads the clock
// only if a report is held.
func (r reportedLoad) load(c *serverCount, own int64, clk *lazyClock) float64 {
	bits := c.others.Load()
	if bits == 0 {
		return float64(own)
	}
	age := float64(clk.get() - c.stamp.Load())
	if age >= r.window {
		return float64(own)
	}
	f := 1.0
	if age > 0 { // a clock that steps back counts as no age
		f = 1 - age/r.window
	}
	return float64(own) + math.Float64frombits(bits)*f
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
// and qc (compareLoad) with the option off, their reported loads pl and ql
// (compareReported) with it on.
func (r reportedLoad) compare(pc int64, pl float64, pw int64, qc int64, ql float64, qw int64) int {
	if !r.on() {
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
	window time.Duration
	set    bool
}

// WithReportedLoad makes LeastConn, RandomTwo, P2CPeakEWMA and FastestFirst
// weigh the requests in flight a peer's server reports with its replies
// (Outcome.Load with HasInFlight), which count every client's attempts,
// beside the picker's own: in place of its own in-flight count a peer's
// load becomes that count plus the other clients' attempts at its last
// report (the reported count less the picker's own attempts then), the
// latter fading linearly to nothing over window after the report, so a peer
// that stops reporting is judged by the own count again. Weights divide
// the whole load. Without reports, or with reports but no other client,
// every pick is the same as without the option. window must be positive;
// a few times the peers' typical latency suits. A count above 2^24−1 is
// ignored. The other pickers refuse it.
//
// A program that builds pickers from the registry passes it to those whose
// Algorithm.Options name "WithReportedLoad": a.New(peers, WithClock(now),
// WithReportedLoad(window)).
func WithReportedLoad(window time.Duration) Option {
	return ownOption("WithReportedLoad", func(s *reportedSetting) { *s = reportedSetting{window, true} })
}

// reportedOptions applies cfg's WithReportedLoad, if given, and checks it.
func reportedOptions(picker string, cfg *config) (reportedLoad, error) {
	var s reportedSetting
	applyOwn(cfg, &s)
	if !s.set {
		return reportedLoad{}, nil
	}
	if s.window <= 0 {
		return reportedLoad{}, fmt.Errorf("balancer: %s: WithReportedLoad(%v): not positive: %w", picker, s.window, ErrInvalidConfig)
	}
	return reportedLoad{window: float64(s.window)}, nil
}
