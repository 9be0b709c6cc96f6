package balancer

// guardSet is a peer set's one seam to its guards: panic mode and the
// ejection cap (guard_panic.go), the ejection backoff (guard_backoff.go),
// success-rate ejection (guard_outlier.go) and slow start
// (guard_slowstart.go). peerSet embeds it and calls the hooks below at its
// changes and reports; the pickers read the guards they need (slow, guard)
// as promoted fields and call into them. No guard is a field of peerSet of
// its own, and no guard knows a picker.
type guardSet struct {
	guard *guard // panic mode and the ejection cap; nil: neither. Set by init

	// backoffMax is WithEjectionBackoff's cap (ns), 0 without it.
	// Immutable after init.
	backoffMax int64

	// outlier is WithSuccessRateEjection's state, nil without it. Set by
	// init.
	outlier *outlierGuard

	slow slowStart // WithSlowStart's guard; set by init
}

// setupGuards checks and applies the guards' options of cfg, refusing a
// bad value. Called by init, before the first peer is added.
func (s *peerSet) setupGuards(cfg *config) error {
	s.guard = newGuard(cfg.guards)
	if err := s.initGuards(cfg); err != nil {
		return err
	}
	return s.slow.setup(s.picker, cfg)
}

// guardsReady tells the guards the constructor's peers are in: the peers
// given at construction do not warm (guard_slowstart.go); those added
// from here on do. Called by init, before the picker is in use.
func (s *peerSet) guardsReady() { s.slow.ready = true }

// joinedLocked tells the guards p joined at now (Add, or Update adding
// it): it warms, if slow start is on. Requires s.mu.
func (s *peerSet) joinedLocked(p *Peer, now int64) { s.slow.startLocked(p, now) }

// upLocked tells the guards p came back up at now from down (SetDown, or
// Update keeping it): it warms, if slow start is on. Requires s.mu.
func (s *peerSet) upLocked(p *Peer, now int64) { s.slow.startLocked(p, now) }

// listChanged tells the guards a new peer list is published: their count
// of the peers out is stale.
func (s *peerSet) listChanged() { s.guard.invalidate() }

// outcome hands a report's outcome on p to success-rate ejection, if on,
// before any lock: an abandoned attempt counts for nothing.
func (s *peerSet) outcome(p *Peer, o Outcome) {
	if s.outlier != nil && !o.Abandoned {
		s.countOutcome(p, o.Failed)
	}
}
