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
	return f.estimateOf(p, ffOf(p), m, now)
}

// estimateOf is estimateLocked with p's state st at hand. It reads atomics
// only.
func (f *FastestFirst) estimateOf(p *Peer, st *ffPeer, m float64, now int64) float64 {
	e := m
	if st.lat.measured.Load() {
		e = st.lat.estimate()
		if e > m {
			e = m + (e-m)*decayWeight(now-st.lat.stamp.Load(), f.tau)
		}
	}
	if p.inFlight() > 0 {
		e = max(e, float64(now-st.since.Load()))
	}
	return e
}

// reweighLocked moves p's weight when p's estimate has left its band, or
// when force is set: in the exact mode by recomputing p's list; in the
// sampled mode by reweighing p alone against its list's last recompute,
// O(1), and recomputing the list, O(n), only once every n such reweighs
// of it, so that a report costs O(1) amortized however often estimates
// leave their bands. Requires f.mu.
//
// What the sampled mode defers: the fastest estimate m and the largest
// unscaled weight, which every weight is scaled by, stay those of the last
// recompute until the next, and so does the draw table (a pick compares
// in-flight counts per unit of the new weight at once, but draws by the
// old). A peer that fails, stalls or slows still drops at its first report,
// against the old m; what waits is the rescaling of the others, at most n
// reweighs later, which with n peers reporting is about one report each.
func (f *FastestFirst) reweighLocked(l *peerList, p *Peer, now int64, force bool) {
	if l.single {
		return // a single server is picked whatever its weight
	}
	if !force && ffOf(p).inBand(f.estimateLocked(p, f.fastestOf(p), now)) {
		return
	}
	peers, which := l.primary, 0
	if p.backup.Load() {
		peers, which = l.backup, 1
	}
	if f.lockFree && f.known[which].Load() && f.top[which] > 0 {
		if f.pending[which].Add(1) < int64(len(peers)) {
			f.reweighOneLocked(p, which, now)
			return
		}
	}
	f.recomputeLocked(peers, which, now)
}

// reweighOneLocked derives p's weight and band as recomputeLocked would,
// against its list's fastest estimate and largest unscaled weight at the
// last recompute, and writes it into the draw table's comparison weights.
// Requires f.mu.
func (f *FastestFirst) reweighOneLocked(p *Peer, which int, now int64) {
	f.work++
	if p.down.Load() || p.weight.Load() == 0 {
		return // its band is open: nothing it reports moves its weight
	}
	m, top := math.Float64frombits(f.fastest[which].Load()), f.top[which]
	st := ffOf(p)
	st.est = f.estimateLocked(p, m, now)
	st.share = float64(p.weight.Load()) * f.ratio(m, st.est)
	if st.lat.measured.Load() && st.lat.estimate() > st.est*f.band {
		st.exploring.Store(true) // as in recomputeLocked
		st.confirmed.Store(0)
	}
	w := int64(math.Round(fastestScale * st.share / top))
	w = min(max(w, f.floor), fastestScale)
	f.setBandLocked(p, m, top, w, true)
	st.derived.Store(w)
	if t := f.draw.Load(); t != nil && t.list == f.load() {
		tb := &t.primary
		if which == 1 {
			tb = &t.backup
		}
		if p.index < len(tb.w) && !p.down.Load() {
			tb.w[p.index].Store(w)
		}
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
		st := ffOf(p)
		if p.down.Load() || p.weight.Load() == 0 || !st.lat.measured.Load() {
			continue
		}
		raw := st.lat.estimate()
		if p.inFlight() > 0 {
			raw = max(raw, float64(now-st.since.Load()))
		}
		m, measured = min(m, raw), true
	}
	if !measured {
		m = 0
	}
	f.fastest[which].Store(math.Float64bits(m))
	f.known[which].Store(measured)
	f.pending[which].Store(0)

	var top float64
	for _, p := range peers {
		st := ffOf(p)
		st.est, st.share = 0, 0
		if p.down.Load() || p.weight.Load() == 0 {
			continue
		}
		if measured {
			st.est = f.estimateLocked(p, m, now)
		}
		st.share = float64(p.weight.Load()) * f.ratio(m, st.est)
		if measured && st.lat.measured.Load() && st.lat.estimate() > st.est*f.band {
			// The weight rests on the decay, not on replies.
			st.exploring.Store(true)
			st.confirmed.Store(0)
		}
		top = max(top, st.share)
	}
	f.top[which] = top
	for _, p := range peers {
		st := ffOf(p)
		if p.down.Load() || p.weight.Load() == 0 {
			// A down peer is never picked; a weightless one stays at 0.
			st.setBand(0, math.Inf(1))
			if p.weight.Load() == 0 {
				st.derived.Store(0)
			}
			continue
		}
		w := int64(math.Round(fastestScale * st.share / top))
		w = min(max(w, f.floor), fastestScale)
		f.setBandLocked(p, m, top, w, measured)
		st.derived.Store(w)
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
	st := ffOf(p)
	e := st.est
	switch {
	case !measured:
		st.setBand(0, math.Inf(1))
	case e > m && e <= f.tol*m:
		st.setBand(m/f.band, f.tol*m)
	case w == f.floor && f.exponent > 0 && e > f.tol*m:
		// The weight leaves the floor when 100·base·(tol·m/e)^α/top
		// reaches floor + ½.
		up := f.tol * m * math.Pow(fastestScale*float64(p.weight.Load())/(top*(float64(f.floor)+0.5)), 1/f.exponent)
		st.setBand(min(e, up)/f.band, math.Inf(1))
	default:
		st.setBand(e/f.band, e*f.band)
	}
}

// fastestOf returns the fastest estimate of p's list at its last
// recompute.
func (f *FastestFirst) fastestOf(p *Peer) float64 {
	return math.Float64frombits(f.fastest[listOf(p)].Load())
}
