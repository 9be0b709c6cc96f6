package balancer

// nginx's round-robin module (ngx_http_upstream_round_robin.c, RR.c; see
// eligibility.go) where the pickers share it: the smooth step and scan,
// which SmoothWRR, LeastConn's ties, the hash methods and the weight groups
// run, and the round-robin fallback the hash and random methods hand a
// request to. The frame around every pick is frame.go's.

// smoothStep is nginx's step for one eligible peer (RR.c 565-570): its
// current weight grows by its effective weight, which then recovers by one
// toward its weight. It returns what the peer adds to the round's total,
// the effective weight before the recovery. Requires the owner's lock.
func smoothStep(p *Peer) int64 {
	ew := p.effectiveWeight
	p.currentWeight += ew
	if w := p.smooth; ew < w {
		p.effectiveWeight++
		if ew+1 == w {
			p.recovering.Store(false)
		}
	}
	return ew
}

// scanSmooth is nginx's ngx_http_upstream_get_peer, line for line (RR.c
// 539-593); a nil r has tried nothing. Requires the owner's lock.
//
// The clock is read only for a peer with failures on record: one without
// cannot be inside a fail window, and its check time is read by nothing
// before a failure sets it, so nginx's update of it on selection (RR.c
// 591-593) is skipped for it, as the cycle skips it. A clock read costs more
// than the rest of a scan of a few peers.
func scanSmooth(peers []*Peer, r *Request, clk *lazyClock) *Peer {
	var best *Peer
	var total int64
	for i, p := range peers {
		if r != nil && r.isTried(i) || p.down.Load() || p.full() ||
			p.fails.Load() != 0 && p.inFailWindow(clk.get()) && !p.panics(clk) {
			continue // ineligible (RR.c 546-563), or, in panic, not
		}
		total += smoothStep(p)
		if best == nil || p.currentWeight > best.currentWeight {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	best.currentWeight -= total
	if best.fails.Load() != 0 {
		best.probeLocked(clk.get())
	}
	return best
}

// roundRobin hands r to nginx's smooth round-robin, as the hash and random
// methods do (get_rr_peer) for an empty key, a total weight of 0 or past 20
// fruitless tries; their lock-free picks return handOff to their frame and
// then call it. A first attempt is served from the precomputed cycle
// without the lock while it is open, as SmoothWRR serves it; otherwise the
// frame runs again, under the lock, on the list current there, around
// fallbackLocked.
func (s *smoothRR) roundRobin(r *Request) (*Peer, error) {
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			// The cycle's next slot, or -1 for a closed cycle. While it
			// is open no peer has max_conns, so none can be full.
			if i := c.slot(c.ctr.Add(1)); i >= 0 {
				p := c.list.primary[i]
				p.pick()
				return fastFirst(c.list, r, int(i), p)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clk := lazyClock{now: s.now}
	l := s.load()
	return pickFrame(l, r, func(_ []*Peer, _ bool) int {
		return s.fallbackLocked(l, r, &clk)
	})
}

// fallbackLocked is nginx's ngx_http_upstream_get_round_robin_peer as the
// hash and random methods call it, on the same per-request state, past the
// single-server rule pickFrame applies: the smooth scan over l's primaries
// (there are no backups), sharing every peer's current and effective
// weights, as SmoothWRR runs it: from the cycle for a first attempt while
// it is open, else grouped by weight or plain. l is the current list. It
// returns the index of the peer taken, or -1. Requires s.mu.
//
// The cycle is tried for the first time at a list's first fallback, not at
// every change, so that a picker whose requests all hash never builds one.
func (s *smoothRR) fallbackLocked(l *peerList, r *Request, clk *lazyClock) int {
	if s.openedFor != l {
		s.openedFor = l
		s.maybeOpenLocked(l)
	}
	fresh := r.fresh()
	if c := s.cycle.Load(); c != nil && fresh {
		if i := c.slot(c.ctr.Add(1)); i >= 0 {
			c.list.primary[i].pick()
			return int(i)
		}
	}
	s.closeLocked()
	var ws *slowStart // non-nil while a peer may be warming
	if !s.slow.idleLocked() {
		ws = s.warmLocked(l, clk)
	}
	for {
		p := s.scanPrimaryLocked(l, r, clk, ws)
		if p == nil {
			s.recFor = nil // the scan moved weights: not a step of the period
			return -1
		}
		// A lock-free pick of the owner may have filled p's max_conns
		// since the scan read it: scan again, p now full.
		if p.acquire() {
			s.scannedLocked(l, p, fresh)
			return p.index
		}
	}
}

// ownLocked gives primary i of l its current weight back in its own field,
// before code other than the scan moves it (ConsistentHash's smooth step
// among the peers of one hash text): the cycle closes, the recorder stops,
// and a peer the groups hold leaves them until a scan finds it regular
// again. Requires s.mu.
func (s *smoothRR) ownLocked(l *peerList, i int32) {
	s.closeLocked()
	s.recFor = nil
	if g := s.groups; g != nil && g.list == l && g.of[i] >= 0 {
		g.demote(i)
	}
}

// takeLocked counts p, found eligible by a hash picker under the owner's
// lock, in flight by acquire (a lock-free first attempt may have filled it
// since), starts its probe window if its fail window has passed (nginx's
// `checked = now`, skipped for a peer with no failures on record, whose
// check time nothing reads; see scanSmooth), and returns its index, or -1
// if it was full.
func takeLocked(p *Peer, clk *lazyClock) int {
	if !p.acquire() {
		return -1
	}
	if p.fails.Load() != 0 {
		p.probeLocked(clk.get())
	}
	return p.index
}

// scanWarm is scanSmooth with each peer's step in slowScale units, scaled
// by its slow-start factor (warmStep). Requires the owner's lock and the
// current weights scaled (enterScaleLocked).
func scanWarm(peers []*Peer, r *Request, clk *lazyClock, w *slowStart) *Peer {
	var best *Peer
	var total int64
	now := clk.get()
	for i, p := range peers {
		if r != nil && r.isTried(i) || p.down.Load() || p.full() ||
			p.fails.Load() != 0 && p.inFailWindow(now) && !p.panics(clk) {
			continue // ineligible (RR.c 546-563), or, in panic, not
		}
		total += warmStep(p, w, now)
		if best == nil || p.currentWeight > best.currentWeight {
			best = p
		}
	}
	if best == nil {
		return nil
	}
	best.currentWeight -= total
	if best.fails.Load() != 0 {
		best.probeLocked(now)
	}
	return best
}

// warmStep is smoothStep in slowScale units: the current weight grows by
// the effective weight scaled by p's factor at now, and the effective
// weight recovers by one toward its weight, as in nginx. It returns what
// the peer adds to the round's total. Requires the owner's lock.
func warmStep(p *Peer, w *slowStart, now int64) int64 {
	ew := p.effectiveWeight
	step := w.scaledWeight(p, ew, now)
	p.currentWeight += step
	if ew < p.smooth {
		p.effectiveWeight++
		if ew+1 == p.smooth {
			p.recovering.Store(false)
		}
	}
	return step
}
