package balancer

import "fmt"

// Connector reports that an attempt's connection is established, before the
// attempt ends: for long-lived sessions (a proxied TCP stream, a WebSocket,
// a tunnel), whose Done may come hours later. Every picker of the package
// implements it; it is an interface of its own so that adding it broke no
// implementation of Picker.
type Connector interface {
	// Connected reports that the connection of an attempt on p, picked
	// and not yet reported with Done, is established.
	Connected(p *Peer) error
}

// Connected reports that the connection of an attempt on p, a peer Pick
// returned and Done has not yet reported, is established, as nginx's stream
// module tells its balancer on connect: if p has been probed since its last
// failure (selected once its fail_timeout had passed), its failures are
// cleared now, so the sessions that follow may go to it, instead of when
// Done reports the probe's end. Nothing else changes: the attempt stays in
// flight until Done, which reports its outcome as before (nginx's stream
// module ends every TCP session as a success). The latency-aware pickers
// learn latency only from Done: with no pick between an attempt's
// Connected and its successful Done, every picker ends as with Done alone.
// Call it once per attempt, for a connection-oriented transport (nginx
// does not for UDP).
//
// Connected returns, as Done does, ErrUnknownPeer for a peer the picker does
// not hold (one removed since Pick included) and ErrNotInFlight when p has
// no attempt in flight; either leaves the picker unchanged. It is O(1)
// (FastestFirst above 32 peers: O(n) when it readmits p, as any report
// that clears a peer's failures is there), takes the picker's lock only
// when p has failures on record, and may report EventPeerReadmitted
// (WithEvents).
func (s *peerSet) Connected(p *Peer) error {
	if err := s.connectable(p); err != nil || p.fails.Load() == 0 {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.connectable(p); err != nil {
		return err // removed, or its attempts reported, meanwhile
	}
	s.connectedLocked(p)
	return nil
}

// connectable returns Connected's error for p, if any.
func (s *peerSet) connectable(p *Peer) error {
	switch {
	case p == nil:
		return fmt.Errorf("balancer: Connected(nil): %w", ErrUnknownPeer)
	case p.owner.Load() != s:
		return fmt.Errorf("balancer: Connected(%q): %w", p.addr, ErrUnknownPeer)
	case p.inFlight() == 0:
		return fmt.Errorf("balancer: Connected(%q): %w", p.addr, ErrNotInFlight)
	}
	return nil
}

// connectedLocked is ngx_stream_upstream_notify_round_robin_peer of nginx
// 1.22.1 on NGX_STREAM_UPSTREAM_NOTIFY_CONNECT: the failures are cleared
// when the peer has been checked since its last failure (accessed <
// checked), the test free applies to a success (succeedLocked); conns,
// effective_weight and both times stay. nginx applies it with one server
// too, where the failures count for nothing. It reports whether it
// cleared any. Requires s.mu.
func (s *peerSet) connectedLocked(p *Peer) bool {
	before := p.markLocked()
	readmitted := s.succeedLocked(p)
	if s.events != nil {
		s.noteDoneLocked(p, before)
	}
	if readmitted {
		s.recheck(s.now())
	}
	return before.fails != 0 && p.fails.Load() == 0
}
