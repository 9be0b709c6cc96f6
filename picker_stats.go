package balancer

// Stats is what a monitoring system reads of a picker: every Balancer of
// this package and Subset implement it, so a collector needs no other
// interface and a Subset hides none of its inner picker's counters. The
// name follows Peer.Stats: a picker's Stats returns PickerStats as a
// peer's returns PeerStats.
type Stats interface {
	// Stats returns the picker's counters, lock-free and allocation-free:
	// each field is read atomically, though the fields together are not
	// one instant's. Reading InPanic evaluates panic mode as a pick
	// would, O(n) when its count of the peers out is stale, and may
	// report EventPanic or EventPanicOver to the WithEvents hook: do not
	// call it from the hook.
	Stats() PickerStats
}

// PickerStats is a picker's counters since it was made: totals, which only
// grow, and InPanic, a state. A counter of an option the picker was not
// given, or of a mechanism it does not have, is 0.
type PickerStats struct {
	// NoLivePeer counts the picks that returned ErrNoLivePeer: nginx's
	// "no live upstreams".
	NoLivePeer uint64
	// Panics counts the times panic mode (WithPanicThreshold) engaged,
	// one per EventPanic; InPanic is whether it is engaged now.
	Panics  uint64
	InPanic bool
	// EjectionsCapped counts the failures WithMaxEjectionPercent kept
	// from taking a peer out, one per EventEjectionCapped.
	EjectionsCapped uint64
	// OutlierEjections counts the peers WithSuccessRateEjection took
	// out, one per EventPeerOutlier.
	OutlierEjections uint64
	// Blinded counts the times the picker went blind to a peer, one per
	// EventPeerBlind: only the pickers that balance by what the servers
	// say (Prequal with a Prober, ReportedWRR, WithReportedLoad) watch.
	Blinded uint64
	// ClampedWeights counts ReportedWRR's cuts of a reported weight (see
	// ReportedWRR); 0 for the other pickers.
	ClampedWeights uint64
	// Probes are Prequal's probe counters; zero for the pickers that do
	// not probe.
	Probes ProbeStats
}

// Stats returns the counters of the peer set and its guards; a picker
// with counters of its own (Prequal, ReportedWRR) adds them to these.
func (s *peerSet) Stats() PickerStats {
	st := PickerStats{
		NoLivePeer: s.noLive.Load(),
		Blinded:    s.sight.blind.Load(),
		InPanic:    s.panics(s.now()),
	}
	if g := s.guard; g != nil {
		st.Panics, st.EjectionsCapped = g.panics.Load(), g.capped.Load()
	}
	if o := s.outlier; o != nil {
		st.OutlierEjections = o.ejected.Load()
	}
	return st
}

// ProbeStats counts a Prequal's probes since it was made.
type ProbeStats struct {
	Sent        uint64 // Probe calls
	Answered    uint64 // answers taken (into the pool, or for a peer whose attempts fail, its round trip only)
	Failed      uint64 // answers with Failed set
	Invalid     uint64 // answers refused with ErrInvalidProbe
	Unknown     uint64 // answers refused with ErrUnknownPeer
	Late        uint64 // answers dropped because their round trip passed the pool's max age, or after Close
	RateLimited uint64 // probes not sent for the per-second cap

	// Trust (see Prequal): Raised counts answers raised to what this
	// client sees, an InFlight below its own attempts on the peer (common
	// for honest servers too: attempts on the wire) or a Latency below the
	// fastest recent reply; Distrusted counts answers taken at the
	// peer's measured latency because its replies had been far slower
	// than its answers implied (a server whose probe handler does not see
	// its traffic, or lies): the count that points at a mis-wired server.
	Raised     uint64
	Distrusted uint64
}
