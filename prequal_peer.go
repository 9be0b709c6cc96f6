package balancer

import (
	"fmt"
	"math"
	"sync/atomic"
)

// What Prequal learns of each peer: its answers (Answer), its attempts'
// failures (Done), and the per-peer state that holds them.

// Done also feeds the attempt's latency into the peak EWMA, as
// P2CPeakEWMA's; a failure drops the peer's answer from the pool and keeps
// its answers out for fail_timeout, or, with max_fails 0, until an attempt
// on it succeeds. A success with a load report that counts the server's
// requests in flight is a fresh answer (replied); one without, on a peer
// whose last attempt did not fail, takes no lock.
func (b *Prequal) Done(p *Peer, o Outcome) error {
	if err := b.donePeak(&b.peakEWMA, p, o); err != nil {
		return err
	}
	if o.Abandoned || b.prober == nil || p.owner.Load() != &b.peerSet {
		return nil
	}
	h := p.state.Load()
	st := prequalState(h)
	if !o.Failed {
		b.judge(p, h, st, o) // trust.go
		if o.Load != nil && o.Load.HasInFlight {
			b.replied(p, h, st, o)
		}
	}
	if !o.Failed && !st.failedLast.Load() {
		return nil
	}
	b.pool.mu.Lock()
	if p.owner.Load() == &b.peerSet && p.state.Load() == h {
		st.failedLast.Store(o.Failed)
		if o.Failed {
			b.pool.dropLocked(p)
		}
		b.statusLocked(st)
	}
	b.pool.mu.Unlock()
	return nil
}

// statusLocked sets whether st's peer is unprobed (failed probes in a row,
// or a failed last attempt) and keeps the count. Requires the pool's lock
// and the peer held by b.
func (b *Prequal) statusLocked(st *prequalPeer) {
	st.silent.Store(st.probeFails >= prequalProbeFails)
	want := st.probeFails >= prequalProbeFails || st.failedLast.Load()
	if want == st.unprobed.Load() {
		return
	}
	st.unprobed.Store(want)
	if want {
		b.unprobed.Add(1)
	} else {
		b.unprobed.Add(-1)
	}
}

// Answer records a probe's answer: into the pool (replacing the peer's
// older one), the recent in-flight counts and the peer's round trip. A
// failed answer counts against the peer's probing (three in a row and it
// is unprobed, see Prequal); an answer whose round trip passed the pool's
// max age, or that comes after Close, is dropped as late. Every outcome is counted (ProbeStats). It
// returns ErrUnknownPeer for a peer b does not hold and ErrInvalidProbe
// for an answer out of range, naming the value, and then changes nothing
// else. O(pool size) under the pool's lock, allocation-free.
func (b *Prequal) Answer(p *Peer, a ProbeAnswer) error {
	if p == nil {
		b.stats.unknown.Add(1)
		return fmt.Errorf("balancer: Prequal: Answer(nil): %w", ErrUnknownPeer)
	}
	if p.owner.Load() != &b.peerSet {
		b.stats.unknown.Add(1)
		return fmt.Errorf("balancer: Prequal: Answer(%q): %w", p.addr, ErrUnknownPeer)
	}
	if !a.Failed {
		if err := checkProbe(p, a); err != nil {
			b.stats.invalid.Add(1)
			return err
		}
	}
	h := p.state.Load()
	st, ok := (*prequalPeer)(nil), false
	if h != nil {
		st, ok = h.own.(*prequalPeer)
	}
	if !ok {
		b.stats.unknown.Add(1) // claimed by another picker since the owner check
		return fmt.Errorf("balancer: Prequal: Answer(%q): %w", p.addr, ErrUnknownPeer)
	}
	b.sawProbe(p, a, prequalProbeFails) // sight.go
	if b.closed.Load() || !a.Failed && int64(a.RoundTrip) > b.maxAge {
		b.stats.late.Add(1)
		return nil
	}
	now := b.now()
	pl := &b.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if b.closed.Load() {
		// Close emptied the pool after this answer's first look: it
		// must not refill it.
		b.stats.late.Add(1)
		return nil
	}
	if p.owner.Load() != &b.peerSet || p.state.Load() != h {
		b.stats.unknown.Add(1)
		return fmt.Errorf("balancer: Prequal: Answer(%q): %w", p.addr, ErrUnknownPeer)
	}
	if a.Failed {
		b.stats.failed.Add(1)
		st.probeFails++
		if st.probeFails == prequalProbeFails {
			st.nextProbe.Store(now + b.maxAge)
		}
		b.statusLocked(st)
		return nil
	}
	b.stats.answered.Add(1)
	st.probeFails = 0
	b.statusLocked(st)
	rt := float64(a.RoundTrip)
	if st.rttOK {
		st.rtt += (rt - st.rtt) / 8
	} else {
		st.rtt, st.rttOK = rt, true
	}
	st.trust.claim(float64(a.Latency), a.InFlight, st.rtt) // trust.go
	if st.failedLast.Load() && !readmittable(p, now) {
		return nil // its attempts fail: its answers say nothing of them
	}
	rif, raised := raiseRIF(a.InFlight, p.inFlight())
	lat, slower := st.trust.raiseLatency(float64(a.Latency), st.rtt, now)
	if raised || slower {
		b.stats.raised.Add(1)
	}
	if st.trust.distrusted.Load() { // its replies are slower than its answers
		b.stats.distrusted.Add(1)
		lat = st.trust.measured(lat, st.rtt)
	}
	pl.ring.add(rif / weightOf(p))
	pl.answers = min(pl.answers+1, answersPerRemoval)
	pl.putLocked(p, st, rif, a.InFlight, lat, now-int64(a.RoundTrip)/2)
	return nil
}

// replied puts the load report of a successful reply into the pool as a
// fresh answer of its peer: the server's count R, less the attempt it
// replied to (counted while the report was written, gone now), at the
// latency of the peer's last probe answer scaled to that count (the
// server's estimate grows as count + 1, as the pool's score takes it),
// answered half a round trip ago; raised to this client's own attempts and
// to its replies' floor, and to its replies' latency if distrusted, as a
// probe's answer is (trust.go). Without a probe answer yet there is no
// estimate to scale, and a peer whose last attempt failed or whose probes
// fail keeps its reports out, as its answers. The report enters the
// recent counts but pays for no removal: the removals follow the probes
// (answersPerRemoval). Under the pool's lock, O(pool size), no allocation.
func (b *Prequal) replied(p *Peer, h *peerState, st *prequalPeer, o Outcome) {
	if !st.trust.has.Load() || b.closed.Load() {
		return // no answer yet: no latency estimate to scale
	}
	now := b.now()
	pl := &b.pool
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if b.closed.Load() || p.owner.Load() != &b.peerSet || p.state.Load() != h || st.failedLast.Load() || st.unprobed.Load() {
		return
	}
	r0 := max(o.Load.InFlight-1, 0) // the replied request has left
	lat0 := math.Float64frombits(st.trust.lat.Load())
	rif00 := math.Float64frombits(st.trust.rif0.Load())
	lat := lat0 * (r0 + 1) / (rif00 + 1)
	rif, raised := raiseRIF(r0, p.inFlight())
	lat, slower := st.trust.raiseLatency(lat, st.rtt, now)
	if raised || slower {
		b.stats.raised.Add(1)
	}
	if st.trust.distrusted.Load() {
		lat = st.trust.measured(lat, st.rtt)
	}
	pl.ring.add(rif / weightOf(p))
	pl.putLocked(p, st, rif, r0, lat, now-int64(st.rtt)/2)
}

// readmittable reports whether p, whose last attempt failed, may compete
// by its answers again: nginx counts its failures (max_fails above 0) and
// its last failure is more than fail_timeout old, so that the attempt its
// answers win is nginx's probe of it (take claims it), one a fail_timeout.
// With max_fails 0 nginx never takes a peer out, and its answers stay out
// until an attempt on it succeeds.
func readmittable(p *Peer, now int64) bool {
	return p.maxFails.Load() != 0 && now-p.accessed.Load() > p.window()
}

// checkProbe returns an error naming the first field of a out of range.
func checkProbe(p *Peer, a ProbeAnswer) error {
	switch x := a.InFlight; {
	case math.IsNaN(x) || math.IsInf(x, 0) || x < 0 || x > MaxProbeInFlight:
		return fmt.Errorf("balancer: Prequal: Answer(%q): InFlight %v out of [0, %d]: %w", p.addr, x, MaxProbeInFlight, ErrInvalidProbe)
	case a.Latency < 0 || a.Latency > MaxProbeLatency:
		return fmt.Errorf("balancer: Prequal: Answer(%q): Latency %v out of [0, %v]: %w", p.addr, a.Latency, MaxProbeLatency, ErrInvalidProbe)
	case a.RoundTrip < 0 || a.RoundTrip > MaxProbeLatency:
		return fmt.Errorf("balancer: Prequal: Answer(%q): RoundTrip %v out of [0, %v]: %w", p.addr, a.RoundTrip, MaxProbeLatency, ErrInvalidProbe)
	}
	return nil
}

// prequalPeer is Prequal's per-peer state (peerstate.go): P2CPeakEWMA's,
// for the fallback, and what the probes taught.
type prequalPeer struct {
	p2cPeer

	// Guarded by the pool's lock.
	pos        int     // index in its list, as the last list change set it
	backup     bool    // in the backup list
	rtt        float64 // smoothed round trip, ns
	rttOK      bool    // rtt holds a sample
	probeFails int     // failed probes in a row

	// Written under the pool's lock, read lock-free by the picks.
	inPool     atomic.Bool  // the pool holds an answer of the peer
	unprobed   atomic.Bool  // balanced by P2CPeakEWMA's rule (statusLocked)
	failedLast atomic.Bool  // the last attempt reported failed
	silent     atomic.Bool  // its probes fail (prequalProbeFails in a row)
	nextProbe  atomic.Int64 // unprobed: the earliest next probe, unix ns

	trust claimTrust // its answers against its replies (trust.go)
}

func newPrequalPeer(int64) *peerState {
	s := &prequalPeer{}
	s.own = s
	return &s.peerState
}

// prequalNone is the state prequalOf returns for a peer that holds none of
// Prequal's.
var prequalNone prequalPeer

// prequalOf returns Prequal's state of p, or prequalNone. Lock-free.
func prequalOf(p *Peer) *prequalPeer { return prequalState(p.state.Load()) }

// prequalState returns the Prequal state h heads, or prequalNone.
func prequalState(h *peerState) *prequalPeer {
	if h != nil {
		if s, ok := h.own.(*prequalPeer); ok {
			return s
		}
	}
	return &prequalNone
}
