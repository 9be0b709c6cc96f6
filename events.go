package balancer

import (
	"fmt"
	"time"
)

// EventKind names a change of a picker's state that WithEvents reports.
type EventKind uint8

// The events a picker reports. nginx logs none of them; they are the
// transitions of its failure accounting (RR.c 591-593, 629-660) and, for
// FastestFirst, of its derived weights.
const (
	// EventPeerOut: a failure took the peer out of rotation for its
	// fail_timeout, its failures having reached max_fails, or a probe of
	// it failed, or, in panic mode (WithPanicThreshold), an attempt on it
	// picked while it was out failed (its window restarts, as a failed
	// probe's does). Other failures reported while it is out add none.
	EventPeerOut EventKind = iota + 1

	// EventPeerProbe: the peer's fail_timeout passed and a pick chose it
	// again; that attempt is the probe, and the peer is out for another
	// fail_timeout unless a success is reported first.
	EventPeerProbe

	// EventPeerReadmitted: a success, or an established connection
	// (Connected), reported after a probe cleared the failures of a peer
	// that had been taken out.
	EventPeerReadmitted

	// EventReweighted: FastestFirst recomputed the weights of one list
	// (primaries or backups) from the latency estimates. Peer is nil.
	EventReweighted

	// EventPanic: panic mode (WithPanicThreshold) engaged: a pick or a
	// report found fewer than the threshold's share of the peers not down
	// eligible, and picks now ignore failures. Peer is nil. Once per
	// engagement, when a pick that meets a peer out for its failures, or a
	// report, first finds it.
	EventPanic

	// EventPanicOver: panic mode disengaged, found by the first pick that
	// meets a peer out for its failures, or the first report readmitting
	// one, after enough peers are back. Peer is nil.
	EventPanicOver

	// EventEjectionCapped: WithMaxEjectionPercent kept a failure from
	// taking the peer out, as that many peers were out already.
	EventEjectionCapped

	// EventPeerOutlier: WithSuccessRateEjection took the peer out, its
	// success rate over the last interval an outlier among its peers'.
	EventPeerOutlier

	// EventPeerBlind: the picker balances by what the servers say of their
	// load and this peer's has said nothing it can use, so it falls back
	// for the peer (Prequal to P2CPeakEWMA's rule, WithReportedLoad to its
	// own in-flight count, ReportedWRR to the configured weight or the
	// mean). Prequal with a Prober reports it after 3 failed probes in a
	// row, ReportedWRR and the pickers with WithReportedLoad after 8
	// replies in a row without a usable report, the first of either at
	// least a second (on the picker's clock) before the last. Misses
	// holds the count, Err the cause: the last failed probe's (an HTTP
	// status, a transport error), ErrNoLoadReport or
	// ErrUnusableLoadReport. Once per peer until EventPeerSeen; counted
	// in PickerStats.Blinded and shown by PeerStats.Blind.
	EventPeerBlind

	// EventPeerSeen: a peer the picker was blind to answered a probe, or
	// replied with a usable report; the picker balances it by what its
	// server says again. Misses holds the count its EventPeerBlind
	// carried.
	EventPeerSeen

	// EventHedgeSent: an attempt went without an answer for the
	// Hedging's delay and a hedge was sent to Peer (HedgePolicy.Events,
	// not WithEvents, reports the hedge events).
	EventHedgeSent

	// EventHedgeWon: a hedge, on Peer, ended its request's loop before
	// the attempts sent before it, with an answer from Peer: a hedge
	// whose Verdict is Abandoned (its try gave up, say as the caller's
	// context ended) ends the loop without winning it.
	EventHedgeWon

	// EventHedgeRefused: the hedge budget refused a hedge; the request
	// goes on with the attempts in flight. Peer is nil.
	EventHedgeRefused
)

var eventNames = [...]string{"", "PeerOut", "PeerProbe", "PeerReadmitted", "Reweighted", "Panic", "PanicOver", "EjectionCapped", "PeerOutlier", "PeerBlind", "PeerSeen", "HedgeSent", "HedgeWon", "HedgeRefused"}

func (k EventKind) String() string {
	if int(k) < len(eventNames) && k != 0 {
		return eventNames[k]
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// Event is one change of a picker's state, as WithEvents reports it: what
// happened, to which peer (nil for a change of the whole picker), and when,
// on the picker's clock (WithClock).
type Event struct {
	Kind EventKind
	Peer *Peer
	Time time.Time

	// Misses and Err, for EventPeerBlind: the failed probes or the
	// replies without a usable load report, in a row, and the cause of
	// the last; for EventPeerSeen, Misses alone. Zero for the other kinds.
	Misses int
	Err    error
}

// WithEvents makes the picker call hook on each change of its failure
// accounting: a peer taken out after max_fails failures (EventPeerOut),
// probed once its fail_timeout has passed (EventPeerProbe), readmitted by
// a success that cleared its failures (EventPeerReadmitted); for
// FastestFirst, each recompute of its weights (EventReweighted); and with
// the guards, panic mode engaging and disengaging (EventPanic,
// EventPanicOver), a failure the ejection cap kept from taking a peer
// out (EventEjectionCapped) and a peer taken out for its success rate
// (EventPeerOutlier); for the pickers that balance by what the servers
// say of their load, a peer whose server says nothing usable
// (EventPeerBlind) and one that speaks again (EventPeerSeen). Every
// picker accepts it; WithEvents(nil) is refused. Default: no hook, which
// costs one nil check where a change happens.
//
// The hook runs synchronously inside Pick or Done (or Stats, whose
// InPanic evaluates panic mode as a pick does, or Prequal's Answer, on the
// Prober's goroutine, for EventPeerBlind and EventPeerSeen), under the
// picker's lock
// when the picker holds one there, and the lock-free pickers report a
// probe from Pick with no lock held, so the hook may run on several
// goroutines at once. It must be quick, safe for concurrent use, and must
// not call back into the picker (Pick, Done, the update methods or
// Peer.State, which take its lock); Peer.Stats and the Peer's accessors are
// safe. An Event is passed by value: reporting one allocates nothing.
func WithEvents(hook func(Event)) Option {
	return option{"WithEvents", func(c *config) { c.events = hook; c.set |= optEvents }}
}

// failMark is the failure accounting of a peer before a report, from which
// noteDoneLocked tells what the report changed.
type failMark struct {
	fails, accessed, checked int64
}

func (p *Peer) markLocked() failMark {
	return failMark{p.fails.Load(), p.accessed.Load(), p.checked.Load()}
}

// outFor reports whether m is a peer out for its failures, max_fails
// failures on record and no probe since the last (checked is set by a
// probe, accessed by a failure).
func (m failMark) outFor(maxFails int64) bool {
	return maxFails != 0 && m.fails >= maxFails && m.accessed >= m.checked
}

// noteDoneLocked reports what a report on p changed, before being its
// accounting before the report. Requires s.mu and s.events.
func (s *peerSet) noteDoneLocked(p *Peer, before failMark) {
	after, limit := p.markLocked(), p.maxFails.Load()
	switch {
	case !before.outFor(limit) && after.outFor(limit):
		s.events(Event{Kind: EventPeerOut, Peer: p, Time: time.Unix(0, after.accessed)})
	case limit != 0 && before.fails >= limit && after.fails == 0:
		s.events(Event{Kind: EventPeerReadmitted, Peer: p, Time: time.Unix(0, s.now())})
	}
}

// probed reports the probe of p at now, if p is out for its failures, to
// its owner's hook. It runs where a probe is claimed, under the lock or by
// compare-and-swap.
func (p *Peer) probed(now int64) {
	if limit := p.maxFails.Load(); limit == 0 || p.fails.Load() < limit {
		return
	}
	if s := p.owner.Load(); s != nil {
		s.guard.invalidate() // a new window: the guards' count is stale
		if s.events != nil {
			s.events(Event{Kind: EventPeerProbe, Peer: p, Time: time.Unix(0, now)})
		}
		s.recheck(now)
	}
}

// reweighed reports a recompute of the weights of peers, one list of
// FastestFirst. Requires the picker's lock.
func (s *peerSet) reweighed(peers []*Peer, now int64) {
	if s.events != nil && len(peers) != 0 {
		s.events(Event{Kind: EventReweighted, Time: time.Unix(0, now)})
	}
}
