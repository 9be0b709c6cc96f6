package balancer

// SmoothWRR in detail. The rule is ngx_http_upstream_get_peer in
// ngx_http_upstream_round_robin.c, from nginx 1.3.0/1.2.1 on: on each pick
// every eligible peer's current_weight grows by its effective_weight, the
// largest wins (the first in order on a tie), and the winner gives back the
// total. Failures, max_fails/fail_timeout and the probe after the window,
// backup and down peers, max_conns, the single-server rule and per-request
// tries all follow nginx.
//
// Cost of a pick. While every primary peer is healthy at full weight, the
// sequence is periodic with period W, the sum of the weights, so SmoothWRR
// serves it from a precomputed cycle: one atomic add on a shared counter,
// its reduction modulo W by two multiplications, one table read and the
// peer's in-flight increment; no lock, O(1). The cycle is built once per
// peer-list change in O(W·d), d the number of distinct weights, holds W
// entries of 4 bytes plus W/n·n checkpoint counts of 4 bytes, and is used
// only when W <= maxCycle and W·d <= maxCycleWork. Anything that breaks the
// period (a failure, a retry, a recovering effective weight, max_conns)
// turns the cycle back into the exact current weights it stands for, in
// O(n) from the nearest checkpoint, and SmoothWRR runs nginx's scan under
// a lock until every peer is back at full health. From there the cycle
// resumes: at once if every current weight is 0, else after the scan has
// recorded one period, W picks, from the state it found (healthy peers
// repeat every W picks, but a retry or a failure leaves them on another
// orbit than the one from 0), which is then served as a cycle of its own.
// The scan is O(n) for short lists; from groupedScanMin (16) primaries on
// it keeps the healthy ones grouped by weight (see weightGroups) and costs
// O(d + k + log n), k the number of peers not at full health, with the same
// picks and weights as nginx's.

// SmoothWRR is nginx's smooth weighted round-robin, from nginx 1.3.0/1.2.1
// on, as 1.22.1 runs it (ngx_http_upstream_round_robin.c): each pick adds
// every eligible peer's effective weight to its current weight, and the
// largest wins and gives back the total; {5,1,1} gives a a b a c a a.
// Failures, probes, backup and down peers, max_conns and retries follow
// nginx ([Peer], [Request]). Choose it to spread load smoothly by weight or
// to predict what nginx does.
//
// A first attempt is O(1) and lock-free while every primary is healthy at
// full weight and the weights sum to at most 65,536 (the precomputed
// cycle's bound); otherwise a pick runs nginx's scan under a lock: O(n)
// below 16 primaries, O(d + k + log n) from 16 on (d distinct weights, k
// peers not at full health), with the same picks. The zero value is not usable; use
// [NewSmoothWRR]. SmoothWRR is safe for concurrent use.
type SmoothWRR struct {
	smoothRR
}

// smoothWRRSpec is SmoothWRR's declaration (see pickerSpec).
var smoothWRRSpec = pickerSpec{name: "SmoothWRR", options: []string{"WithSlowStart"}}

// NewSmoothWRR returns a SmoothWRR over peers. opts: the shared options
// (see Option).
func NewSmoothWRR(peers []*Peer, opts ...Option) (*SmoothWRR, error) {
	cfg, err := newConfig(smoothWRRSpec, opts)
	if err != nil {
		return nil, err
	}
	s := &SmoothWRR{}
	s.currentWeight = s.impliedLocked
	if err := s.init(peers, cfg, s.changedLocked); err != nil {
		return nil, err
	}
	return s, nil
}

// Pick returns the next peer in nginx's smooth order. It is O(1) and
// lock-free while the weights are static (or there is one peer) and r is
// fresh; otherwise it runs the scan under the lock.
func (s *SmoothWRR) Pick(r *Request) (*Peer, error) {
	// The fast paths run ahead of pickFrame, which the locked path runs:
	// a fresh request on a healthy list needs none of the frame's checks,
	// and the frame's call and closure would double the pick's cost.
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			// The cycle's next slot, or -1 for a closed cycle.
			if i := c.slot(c.ctr.Add(1)); i >= 0 {
				p := c.list.primary[i]
				p.pick()
				return fastFirst(c.list, r, int(i), p)
			}
		} else if l := s.load(); l.single {
			// nginx's single-server rule reads only down and max_conns
			// and moves no weight (RR.c 449-460): no lock needed.
			if p := l.primary[0]; !p.down.Load() && p.acquire() {
				return fastFirst(l, r, 0, p)
			}
		}
	}
	return s.pickSlow(r)
}

// pickSlow is Pick's exact scan, kept out of Pick so that the lock and its
// deferred release stay off the cycle's path.
func (s *SmoothWRR) pickSlow(r *Request) (*Peer, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pickLocked(r)
}

// Done implements Picker.Done.
func (s *SmoothWRR) Done(p *Peer, o Outcome) error { return s.report(p, o) }
