package balancer

import (
	"errors"
	"sync/atomic"
	"time"
)

// Blind peers. A picker that balances by what the servers say of their
// load (Prequal's probes; the load reports that WithReportedLoad and
// ReportedWRR read) falls back, for a peer whose server says nothing it
// can use, to what it sees itself: P2CPeakEWMA's rule, its own in-flight
// count, the configured weight. It goes on serving, but it no longer does
// what it was chosen for, and nothing in its picks shows it. The watch
// here makes it visible: a peer is blind once
//
//   - probes: need failed answers in a row (Prequal passes its own
//     prequalProbeFails, 3, the count at which it stops counting on the
//     peer's answers), or
//   - reports: blindReplies (8) replies in a row without a report the
//     picker can use,
//
// the first of them at least blindWindow (1 s, on the picker's clock)
// before the last. The count keeps a single reply, or a slow trickle of
// them, from deciding; the window keeps a short stretch of misses at a
// high rate (a server restarting, a proxy on the path reloading: 8
// replies take 8 ms at 1,000 a second) from raising an event that the
// next reply takes back. A server that has the support answers every
// probe and reports on every reply (loadreport's Middleware, ORCA's
// per-call report), so one usable answer clears the run. With Prequal's
// defaults a peer whose probe handler is missing is blind at its first
// failed probe 1 s or more after its first (it is probed once per max
// age, 1 s, after three failures): about a second after the first
// picks. A peer that gets replies at r a second is blind after
// max(1 s, 8/r).
//
// What is kept: one word per peer in its peerState, made afresh at each
// claim, so that a peer moved to another picker starts unseen there. The
// word packs the blind flag, the misses in a row (saturating) and the
// time of the first, in milliseconds, so that one compare-and-swap moves
// all three. A usable answer on a peer with no misses reads the word and
// writes nothing; a blind peer's further misses read it and write
// nothing either. Neither path locks or allocates.

// The thresholds (see Blind peers).
const (
	blindReplies = 8
	blindWindow  = time.Second
)

// ErrNoLoadReport is the cause EventPeerBlind carries for a peer whose
// replies came without a load report (Outcome.Load nil): its server has no
// load-reporting middleware, or something on the way strips the header.
var ErrNoLoadReport = errors.New("balancer: replies carry no load report")

// ErrUnusableLoadReport is the cause EventPeerBlind carries for a peer
// whose replies carry load reports without what the picker reads: the
// requests in flight (ServerLoad.HasInFlight) for WithReportedLoad,
// a utilization and a rate above 0 for ReportedWRR (loadreport reports
// no utilization until the server sets one).
var ErrUnusableLoadReport = errors.New("balancer: load reports lack what the picker reads")

// The sight word: blind flag, misses in a row, first miss's time.
const (
	sightBlind     = uint64(1) << 63
	sightMissShift = 45
	sightMissMax   = 1<<18 - 1
	sightSinceMask = uint64(1)<<sightMissShift - 1
	// sightOffset makes every UnixNano/1e6 (|ms| < 9.3e12 < 2^44) a
	// non-negative count below 2^45.
	sightOffset = int64(1) << 44
)

// sightMs returns now (unix ns) as the word's time field.
func sightMs(now int64) uint64 { return uint64(now/int64(time.Millisecond) + sightOffset) }

// peerSight is one peer's watch, in its peerState.
type peerSight struct{ w atomic.Uint64 }

// blind reports whether the picker holding the peer is blind to it.
func (s *peerSight) blind() bool { return s.w.Load()&sightBlind != 0 }

// sightWatch is a peer set's count of the peers it went blind to.
type sightWatch struct {
	blind atomic.Uint64 // EventPeerBlind's, ever
}

// BlindCount returns how many times the picker has gone blind to a peer
// since it was made, one per EventPeerBlind: a peer whose probes failed,
// or whose replies came without a usable load report, in a row for at
// least a second (see WithEvents). Only Prequal with a Prober, ReportedWRR
// and the pickers with WithReportedLoad watch; the others return 0.
// Lock-free.
//
// Deprecated: use Stats().Blinded.
func (s *peerSet) BlindCount() uint64 { return s.sight.blind.Load() }

// sightOf returns the watch of p if s holds it, else nil.
func (s *peerSet) sightOf(p *Peer) *peerSight {
	if p.owner.Load() != s {
		return nil
	}
	if h := p.state.Load(); h != nil {
		return &h.sight
	}
	return nil
}

// sawReply notes the reply to an attempt on p for a picker that balances
// by its servers' load reports; usable reports whether o.Load carried what
// the picker reads. An abandoned attempt, or a failed one without a
// report (a refused connection, a timeout), is no reply and counts for
// nothing. Lock-free.
func (s *peerSet) sawReply(p *Peer, o Outcome, usable bool) {
	if o.Abandoned || o.Failed && o.Load == nil {
		return
	}
	w := s.sightOf(p)
	switch {
	case w == nil:
	case usable:
		s.seen(p, w)
	case o.Load == nil:
		s.missed(p, w, blindReplies, ErrNoLoadReport)
	default:
		s.missed(p, w, blindReplies, ErrUnusableLoadReport)
	}
}

// sawProbe notes a probe's answer a on p for a picker that balances by
// probes, for which need failed answers in a row make a peer blind.
// Lock-free.
func (s *peerSet) sawProbe(p *Peer, a ProbeAnswer, need int) {
	w := s.sightOf(p)
	switch {
	case w == nil:
	case !a.Failed:
		s.seen(p, w)
	default:
		s.missed(p, w, need, a.Err)
	}
}

// seen clears p's run of misses; if the picker was blind to p, it reports
// EventPeerSeen.
func (s *peerSet) seen(p *Peer, w *peerSight) {
	if w.w.Load() == 0 {
		return
	}
	if old := w.w.Swap(0); old&sightBlind != 0 && s.events != nil {
		s.events(Event{Kind: EventPeerSeen, Peer: p, Time: time.Unix(0, s.now()),
			Misses: int(old >> sightMissShift & sightMissMax)})
	}
}

// missed counts a miss on p, whose cause is err; at need misses in a row
// over blindWindow, the picker is blind to p: counted and reported with
// EventPeerBlind, once until the next usable answer.
func (s *peerSet) missed(p *Peer, w *peerSight, need int, err error) {
	if w.w.Load()&sightBlind != 0 {
		return
	}
	now := s.now()
	ms := sightMs(now)
	for {
		old := w.w.Load()
		if old&sightBlind != 0 {
			return
		}
		n, since := old>>sightMissShift, old&sightSinceMask
		if n == 0 {
			since = ms
		}
		n = min(n+1, sightMissMax)
		blind := n >= uint64(need) && int64(ms)-int64(since) >= blindWindow.Milliseconds()
		v := n<<sightMissShift | since
		if blind {
			v |= sightBlind
		}
		if !w.w.CompareAndSwap(old, v) {
			continue
		}
		if blind {
			s.sight.blind.Add(1)
			if s.events != nil {
				s.events(Event{Kind: EventPeerBlind, Peer: p, Time: time.Unix(0, now), Misses: int(n), Err: err})
			}
		}
		return
	}
}

// reportsInFlight reports whether l carries what WithReportedLoad reads:
// the server's requests in flight.
func reportsInFlight(l *ServerLoad) bool { return l != nil && l.HasInFlight }
