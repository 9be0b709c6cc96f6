package balancer

import "sync/atomic"

// ReportedWRR's cold start. While fewer than two primaries have a weight
// that counts (see ReportedWRR in detail) but at least one primary has
// reported (its report fresh: within the expiration period, blackout or
// not), the primaries are picked as LeastConn picks them: the eligible
// peer with the fewest of this client's attempts in flight per unit of
// configured weight, nginx's smooth step among the tied (scanLeastConn).
// That is the blackout of a fleet's start, A58's 10 s by default, and a
// fleet where one server reports.
//
// Why not the configured weights, as A58 and nginx would run them. Round
// robin gives every server the same share whatever its speed. Eight
// servers of speeds 1, 1, 1, 1, 2, 2, 4, 4 at 68% of their capacity get
// 1.36 times what a slow one serves each; in the 10 s blackout each slow
// server queues 0.36 × 10 s of its own work, and the queue takes seconds
// to drain once the weights count: p99 4.1 s over the first 30 s in the
// simulator's coldstart scenario (median of 5 seeds), where LeastConn
// keeps 134 ms. A slow server holds its attempts longer, so a client that
// counts its own attempts in flight sends it less without any report:
// p99 137 ms there, 1.00 to 1.05 times LeastConn's seed for seed, and the
// shares after the handover within a point of capacity (sim's
// TestColdStart). The client's view is all a picker has before the reports
// count; once they do, A58's weights take over, as before.
//
// The handover. At the first recompute at which two primaries have a
// weight that counts, the list runs on the derived weights, and a primary
// still in blackout (one that began reporting later: a server added, or
// back after a gap) gets the mean of the weighted, as A58 gives it. At a
// fleet's start every server's first report comes within the first
// replies, so all leave the blackout within one update period of each
// other, and the mean stands for a server for that period at most. A
// server added later gets the mean for its blackout; with the fleet's
// other servers weighted by their capacity, the mean is a share of the
// capacity a server of average speed would get, which a slow newcomer
// exceeds by its speed's shortfall only (slow start, WithSlowStart, ramps
// it in where that matters).
//
// With no fresh report at all, the list runs on its configured weights as
// SmoothWRR, exactly (nginx's order, the conformance tests): the servers
// send no reports, and ReportedWRR is its plain counterpart. The first
// report that begins a peer's run, in that state, recomputes at once
// rather than at the next due recompute, so that the cold start begins
// with the first reply.
//
// Cost. Cold, every pick takes the lock and scans the primaries, O(n), as
// LeastConn's scan does; the precomputed cycle stays closed (smoothRR's
// held). That lasts for the blackout only, and BenchmarkReportedWRR_cold
// measures it. Backups keep their smooth order over their own weights.

// rwrrStart is ReportedWRR's cold-start state.
type rwrrStart struct {
	// cold is set while the primaries are picked by the clients' counts;
	// guarded by mu.
	cold bool
	// plain mirrors, lock-free, that the primaries run on their configured
	// weights (neither cold nor derived): a report that begins a run then
	// recomputes at once.
	plain atomic.Bool
}

// coldLocked reports whether l's primaries should be picked cold at now:
// the last targetsLocked found fewer than two weighted, and some
// candidate primary has a fresh report. Requires s.mu.
func (s *ReportedWRR) coldLocked(l *peerList, now int64) bool {
	if s.wantDerived || l.single {
		return false
	}
	for _, p := range l.primary {
		if p.down.Load() || p.weight.Load() <= 0 {
			continue
		}
		if last := rwrrOf(p).last.Load(); last != noReport && now-last < s.expiration {
			return true
		}
	}
	return false
}

// markColdLocked sets the cold-start flags, for a caller that then runs
// smoothRR.changedLocked (which opens the cycle if it may). Requires s.mu
// and s.derived set.
func (s *ReportedWRR) markColdLocked(cold bool) {
	s.cold, s.held = cold, cold
	s.plain.Store(!cold && !s.derived)
}

// switchColdLocked enters or leaves the cold start on l in place, when no
// weight changed: entering, the cycle and the weight groups hand their
// current weights back to the peers, for the cold scan; leaving, the
// cycle opens (or the recorder starts) from where the scan left them.
// Requires s.mu.
func (s *ReportedWRR) switchColdLocked(l *peerList, cold bool) {
	if cold == s.cold {
		return
	}
	s.markColdLocked(cold)
	if cold {
		s.closeLocked()
		if g := s.groups; g != nil {
			g.materializeLocked()
		}
		s.groups, s.groupedFor = nil, nil
		s.recFor = nil
		return
	}
	s.maybeOpenLocked(l)
}

// pickColdLocked is Pick during the cold start: LeastConn's scan over the
// primaries (with slow start's scaled weights while a peer warms), the
// smooth scan over the backups. Requires s.mu.
func (s *ReportedWRR) pickColdLocked(r *Request) (*Peer, error) {
	l := s.load()
	clk := lazyClock{now: s.now}
	var ws *slowStart // non-nil while a peer may be warming
	if !s.slow.idleLocked() {
		ws = s.warmLocked(l, &clk)
	}
	return pickFrame(l, r, func(peers []*Peer, backup bool) int {
		if !backup {
			return scanLeastConn(peers, r, &clk, reportedLoad{}, nil, ws)
		}
		var p *Peer
		if ws != nil {
			p = scanWarm(peers, r, &clk, ws)
		} else {
			p = scanSmooth(peers, r, &clk)
		}
		if p == nil {
			return -1
		}
		p.pick()
		return p.index
	})
}
