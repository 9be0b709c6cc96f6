package balancer

import "math"

// FastestFirst's weights: the latency estimate of each peer, the weights
// derived from the estimates (law 1), the band that keeps them still
// (law 3), and the decay toward the fastest (law 4). See FastestFirst.

// floorEstimate returns an estimate at which p's weight is surely at the
// floor: tolerance × fastest × (100/floor)^(1/α), widened by the band so
// that the next recompute keeps it there; 0 while nothing is measured.
func (f *FastestFirst) floorEstimate(p *Peer) float64 {
	m := f.fastestOf(p)
	if m <= 0 || f.exponent == 0 {
		return 0
	}
	return f.tol * m * math.Pow(fastestScale/float64(f.floor), 1/f.exponent) * f.band
}

// listOf returns the index of p's list in FastestFirst.fastest.
func listOf(p *Peer) int {
	if p.backup.Load() {
		return 1
	}
	return 0
}

// estimateLocked returns p's latency estimate (ns) at now, m being the
// fastest estimate of its list: the peak EWMA decayed toward m over the
// time since its last reply (law 4), or m if it has none, raised to the
// time it has had attempts in flight without an answer. Requires f.mu.
func (f *FastestFirst) estimateLocked(p *Peer, m float64, now int64) float64 {
	e := m
	if p.lat.measured.Load() {
		e = p.lat.estimate()
		if e > m {
			e = m + (e-m)*decayWeight(now-p.lat.stamp.Load(), f.tau)
		}
	}
	if p.inFlight() > 0 {
		e = max(e, float64(now-p.lat.since.Load()))
	}
	return e
}

// reweighLocked recomputes the weights of p's list when p's estimate has left
// its band, or when force is set. Requires f.mu.
func (f *FastestFirst) reweighLocked(l *peerList, p *Peer, now int64, force bool) {
	if l.single {
		return // a single server is picked whatever its weight
	}
	if !force && p.lat.inBand(f.estimateLocked(p, f.fastestOf(p), now)) {
		return
	}
	if p.backup.Load() {
		f.recomputeLocked(l.backup, 1, now)
	} else {
		f.recomputeLocked(l.primary, 0, now)
	}
}

// recomputeLocked derives the weights of one list (which: 0 primary, 1
// backup) from the estimates at now and sets the bands they hold for.
// Requires f.mu.
//
// The fastest estimate m is the least raw estimate (peak EWMA and silence,
// without the decay toward m, which would be circular) among the measured
// peers that are up and have a configured weight. Peer i then gets
//
//	s_i = base_i × min(1, tol·m/e_i)^α,  weight_i = round(100 · s_i / max s)
//
// clamped to [floor, 100]. Until some peer is measured the weights follow
// the configured ones alone; a peer's first reply forces a recompute.
func (f *FastestFirst) recomputeLocked(peers []*Peer, which int, now int64) {
	f.recomputes++
	f.work += uint64(len(peers))
	if f.lockFree {
		defer f.publishDrawLocked(f.load())
	}
	m, measured := math.Inf(1), false
	for _, p := range peers {
		if p.down.Load() || p.weight.Load() == 0 || !p.lat.measured.Load() {
			continue
		}
		raw := p.lat.estimate()
		if p.inFlight() > 0 {
			raw = max(raw, float64(now-p.lat.since.Load()))
		}
		m, measured = min(m, raw), true
	}
	if !measured {
		m = 0
	}
	f.fastest[which].Store(math.Float64bits(m))

	var top float64
	for _, p := range peers {
		p.lat.est, p.lat.share = 0, 0
		if p.down.Load() || p.weight.Load() == 0 {
			continue
		}
		if measured {
			p.lat.est = f.estimateLocked(p, m, now)
		}
		p.lat.share = float64(p.weight.Load()) * f.ratio(m, p.lat.est)
		if measured && p.lat.measured.Load() && p.lat.estimate() > p.lat.est*f.band {
			// The weight rests on the decay, not on replies.
			p.lat.exploring.Store(true)
			p.lat.confirmed.Store(0)
		}
		top = max(top, p.lat.share)
	}
	for _, p := range peers {
		if p.down.Load() || p.weight.Load() == 0 {
			// A down peer is never picked; a weightless one stays at 0.
			p.lat.setBand(0, math.Inf(1))
			if p.weight.Load() == 0 {
				p.effectiveWeight = 0
			}
			continue
		}
		w := int64(math.Round(fastestScale * p.lat.share / top))
		w = min(max(w, f.floor), fastestScale)
		f.setBandLocked(p, m, top, w, measured)
		p.effectiveWeight = w
	}
	f.reweighed(peers, now)
}

// ratio returns min(1, tol·m/e)^α.
func (f *FastestFirst) ratio(m, e float64) float64 {
	m *= f.tol
	if e <= m {
		return 1
	}
	x := m / e
	if f.exponent == 2 {
		return x * x
	}
	return math.Pow(x, f.exponent)
}

// setBandLocked sets the band of estimates p's new weight w holds for:
// [e/band, e·band] around its estimate e, except where a wider band
// changes no weight. Within the tolerance the weight is full, so the band
// runs from m/band, where p would become the fastest, to the tolerance
// itself: the weight is continuous there, and once past it the band
// around the new estimate keeps it from crossing back for noise. At the
// floor the weight cannot go lower, so the band is open above, and it
// reaches down to where the weight would leave the floor. Requires f.mu.
func (f *FastestFirst) setBandLocked(p *Peer, m, top float64, w int64, measured bool) {
	e := p.lat.est
	switch {
	case !measured:
		p.lat.setBand(0, math.Inf(1))
	case e > m && e <= f.tol*m:
		p.lat.setBand(m/f.band, f.tol*m)
	case w == f.floor && f.exponent > 0 && e > f.tol*m:
		// The weight leaves the floor when 100·base·(tol·m/e)^α/top
		// reaches floor + ½.
		up := f.tol * m * math.Pow(fastestScale*float64(p.weight.Load())/(top*(float64(f.floor)+0.5)), 1/f.exponent)
		p.lat.setBand(min(e, up)/f.band, math.Inf(1))
	default:
		p.lat.setBand(e/f.band, e*f.band)
	}
}

// fastestOf returns the fastest estimate of p's list at its last
// recompute.
func (f *FastestFirst) fastestOf(p *Peer) float64 {
	return math.Float64frombits(f.fastest[listOf(p)].Load())
}
