package balancer

import (
	"math"
	"slices"
	"sync/atomic"

	"github.com/lbgo/balancer/internal/defaults"
)

// Bounded trust in what servers say of themselves. A probe answer or a
// load report is a claim this client cannot check in full, but part of it
// the client sees for itself, and a claim is never allowed below that part:
//
//   - Its own attempts. A server holds at least the attempts this client
//     has in flight on it (less the few still on the wire), so a probe
//     answer's in-flight count is raised to the client's own count before
//     it enters Prequal's pool (raiseRIF). WithReportedLoad's pickers
//     already do this (serverCount.note takes max(0, R − (own + 1)) as the
//     others' count).
//   - Its replies' latency. No request at any load takes less than the
//     fastest recent reply, so an answer's latency estimate is raised to
//     the fastest reply of the last one or two floor periods less the round
//     trip (raiseLatency): an honest estimate, a mean, is almost always
//     above it; an "idle" answer of 0 from a server whose replies take
//     20 ms is not.
//     An answer also implies a latency for the attempts it
//     wins: the server's estimate at its count, scaled to the attempts this
//     client then has on it, plus the round trip (claimTrust.implied). Each
//     reply's measured latency is compared with what the peer's last answer
//     implies (claimTrust.observe); a peer whose replies keep coming slower
//     (the smoothed ratio above distrustAbove) loses the benefit of its
//     answers: each enters the pool with its latency raised to the smoothed
//     latency of the peer's replies, less the round trip (measured), until
//     its replies agree with its answers again (the ratio back below
//     trustBelow). ProbeStats counts both. Keeping such a peer in the pool
//     at its measured latency, rather than out of it, matters when the
//     claims are wrong for a while but the server is fine: a server that
//     failed fast reports its errors' short latencies for a while after it
//     recovers; balanced by P2CPeakEWMA's rule, its failure penalty held
//     it out for the rest of the run (balance sim -check, blackhole-fast).
//   - ReportedWRR's weights. One peer's report cannot be checked against
//     the others', but it can be bounded by them: no weight counts above
//     maxWeightRatio times the median of the weights reported
//     (clampWeights), and a weight above the median counts for the median
//     while the peer's replies are over slowRatio times the median
//     latency (trustLocked): a claim of more capacity than the others,
//     from a peer slower than they are.
//
// The ratio's bounds. The smoothed ratio is an EWMA (gain 1/8, RFC 6298's
// SRTT gain) of measured/implied, each sample clamped to maxTrustSample.
// An honest server's replies scatter around its estimate (an exponential
// service time has a ratio of mean 1 and is above 8 one time in 3,000);
// with the sample clamped at 16, one outlier lifts the EWMA from 1 to at
// most 2.9, and it takes five samples of 16 in a row to cross 8 (2.9, 4.5,
// 5.9, 7.2, 8.3). A liar (an answer of 0 in flight and 0 latency from a
// server that takes 20 ms over loopback) gives ratios of hundreds: its
// fifth reply crosses 8. Once distrusted, the ratio must fall below 3,
// ten replies at a ratio of 1, before its answers count again:
// hysteresis, so that a peer near the bound does not flap. The simulator
// chose 8 over 4 and 6: honest servers whose speeds are redrawn every
// second cross those now and then, when a reply is slowed by the other
// clients' attempts an answer could not foresee (balance sim, Prequal,
// seeds 1-3: fleet64's p99 264 ms with no distrust at all, 272 at 6, 264
// at 8; fleet16 and zones16 as with none).
const (
	trustGain      = 1.0 / 8
	maxTrustSample = 16.0
	distrustAbove  = 8.0
	trustBelow     = 3.0
)

// maxWeightRatio is the most a ReportedWRR peer's weight may be, as a
// multiple of the median of the weights reported in its list. gRPC's C++
// and Java static-stride schedulers clamp at 10× the mean (kMaxRatio,
// K_MAX_RATIO, "chosen without any experimenting"), Envoy and grpc-go not
// at all. Neither bound stops a lying peer: a peer of n
// capped at c times the median of the others takes at most c/(n − 1 + c)
// of the picks; c = 10 lets one peer of 10 take 53%, and the mean, which
// the liar's own weight drags up, lets it take more. At c = 3 the share is
// at most 3/(n + 2), under three times the fair share 1/n for every n, and
// the median, unlike the mean, ignores the liar. A fleet whose honest
// capacities differ by more than 3× the median (one machine three times
// the typical one) gives its largest peers less than their capacity; a
// configured weight= still multiplies the clamped weight.
const maxWeightRatio = 3

// claimTrust is what Prequal keeps of one peer to judge its answers: the
// latency the last one implies and the smoothed ratio of measured to
// implied latency. Written by Answer (implied, under the pool's lock) and
// Done (ratio, lock-free: a load and a store); a reader may pair a new
// word with an old one, which shifts one sample a little.
type claimTrust struct {
	lat   atomic.Uint64 // float64 bits: the last answer's latency estimate, ns
	rif0  atomic.Uint64 // float64 bits: the last answer's in-flight count
	rtt   atomic.Uint64 // float64 bits: the smoothed round trip when it came, ns
	ratio atomic.Uint64 // float64 bits: EWMA of measured/implied; 0 before the first sample
	has   atomic.Bool   // an answer came

	distrusted atomic.Bool  // the replies are slower than the answers (guarded by the pool's lock for writes)
	replies    replyLatency // the successful replies' smoothed latency

	// The fastest reply of the current and the previous floor period
	// (float64 bits, ns; 0: none) and when the current one began.
	fastest, fastestPrev atomic.Uint64
	period               atomic.Int64
}

// floorPeriod is how long a reply's latency bounds the peer's answers
// from below: a floor period, the fastest reply counting for between one
// and two of them. The pool's max age by default: a server that was
// faster a second ago may be again.
const floorPeriod = int64(defaults.ProbeMaxAge)

// fastestReply records a reply's latency (ns) at now into the floor.
func (t *claimTrust) fastestReply(measured float64, now int64) {
	bits := math.Float64bits(max(measured, math.SmallestNonzeroFloat64))
	if start := t.period.Load(); now-start >= floorPeriod || now < start {
		if t.period.CompareAndSwap(start, now) {
			prev := t.fastest.Swap(bits)
			if now-start >= 2*floorPeriod || now < start {
				prev = 0 // the current period had ended a period ago: nothing recent
			}
			t.fastestPrev.Store(prev)
			return
		}
	}
	for {
		old := t.fastest.Load()
		if old != 0 && math.Float64frombits(old) <= measured {
			return
		}
		if t.fastest.CompareAndSwap(old, bits) {
			return
		}
	}
}

// floor returns the fastest reply (ns) of the last one to two floor
// periods before now, 0 if none.
func (t *claimTrust) floor(now int64) float64 {
	start := t.period.Load()
	age := now - start
	if age >= 2*floorPeriod || age < 0 {
		return 0
	}
	f := math.Float64frombits(t.fastest.Load())
	if p := t.fastestPrev.Load(); age < floorPeriod && p != 0 && (f == 0 || math.Float64frombits(p) < f) {
		f = math.Float64frombits(p)
	}
	return f
}

// raiseLatency returns an answer's latency estimate (ns) raised to what
// this client's replies show the server takes: the fastest reply of the
// last floor period or two less the round trip (a request at any load
// takes at least what the fastest recent one took), and whether it was
// raised. An honest estimate, a mean, is above the fastest reply; one of 0
// from a server whose replies take 20 ms is not.
func (t *claimTrust) raiseLatency(lat, rtt float64, now int64) (float64, bool) {
	if f := t.floor(now) - rtt; lat < f {
		return f, true
	}
	return lat, false
}

// claim records an answer's latency estimate (ns), count and the round
// trip then (ns), for the replies to come.
func (t *claimTrust) claim(lat, rif0, rtt float64) {
	t.lat.Store(math.Float64bits(lat))
	t.rif0.Store(math.Float64bits(rif0))
	t.rtt.Store(math.Float64bits(rtt))
	t.has.Store(true)
}

// implied returns the latency (ns) the last answer implies for an attempt
// that found own of this client's attempts on the peer (itself included):
// the estimate at the answered count, scaled as the pool scores an answer
// used own − 1 times past it (prequal_pool.go's score), plus the round trip.
func (t *claimTrust) implied(own float64) float64 {
	lat := math.Float64frombits(t.lat.Load())
	rif0 := math.Float64frombits(t.rif0.Load())
	return lat*max(rif0+1, own)/(rif0+1) + math.Float64frombits(t.rtt.Load())
}

// observe feeds one reply's measured latency (ns) on an attempt that found
// own attempts on the peer into the ratio and returns whether the peer
// should now be distrusted (with the hysteresis of distrustAbove and
// trustBelow). No answer yet: nothing to judge, false.
func (t *claimTrust) observe(measured, own float64) (distrust bool) {
	if !t.has.Load() {
		return false
	}
	s := maxTrustSample
	if imp := t.implied(own); measured <= 0 {
		s = 0
	} else if measured < imp*maxTrustSample {
		s = measured / imp
	}
	// A load and a store, not a compare-and-swap loop: two replies racing
	// lose one sample of an EWMA of gain 1/8, where a loop would make
	// every concurrent Done on the peer retry.
	r := 1 + (s-1)*trustGain // the first sample, from agreement
	if old := t.ratio.Load(); old != 0 {
		r = math.Float64frombits(old)
		r += (s - r) * trustGain
	}
	if r == 0 {
		r = math.SmallestNonzeroFloat64 // 0 marks "no sample"
	}
	t.ratio.Store(math.Float64bits(r))
	if t.distrusted.Load() {
		return r >= trustBelow
	}
	return r > distrustAbove
}

// measured returns an answer's latency estimate lat (ns) raised to the
// smoothed latency of the peer's replies less the round trip rtt (ns): a
// distrusted peer's answer counts for what its replies take.
func (t *claimTrust) measured(lat, rtt float64) float64 {
	return max(lat, t.replies.get()-rtt)
}

// raiseRIF returns an answered in-flight count raised to this client's own
// attempts in flight on the peer, and whether it was raised.
func raiseRIF(answered float64, own int64) (float64, bool) {
	if o := float64(own); answered < o {
		return o, true
	}
	return answered, false
}

// judge is Prequal's Done hook: a successful reply's latency against what
// the peer's answers imply. A change of trust takes the pool's lock; the
// common case, none, is lock-free.
func (b *Prequal) judge(p *Peer, h *peerState, st *prequalPeer, o Outcome) {
	own := float64(p.inFlight() + 1)                               // this attempt and those still out
	st.trust.fastestReply(float64(o.Latency), st.lat.stamp.Load()) // the clock donePeak read
	st.trust.replies.observe(float64(o.Latency))
	d := st.trust.observe(float64(o.Latency), own)
	if d == st.trust.distrusted.Load() {
		return
	}
	b.pool.mu.Lock()
	if p.owner.Load() == &b.peerSet && p.state.Load() == h && d != st.trust.distrusted.Load() {
		st.trust.distrusted.Store(d)
		if d {
			b.pool.dropLocked(p) // its answer's claim is the one not to trust
		}
	}
	b.pool.mu.Unlock()
}

// clampWeights caps every positive weight of w at maxWeightRatio times
// their median and returns how many it cut, sorted being scratch space
// (reused: no allocation once it has grown). With fewer than three
// positive weights there is no median that one peer cannot set alone
// (with two, the median is their mean, which the larger drags up): the
// weights are left as they are.
func clampWeights(w []float64, sorted *[]float64) (cut int) {
	s := (*sorted)[:0]
	for _, x := range w {
		if x > 0 {
			s = append(s, x)
		}
	}
	*sorted = s
	if len(s) < 3 {
		return 0
	}
	top := medianSorted(s) * maxWeightRatio
	for i, x := range w {
		if x > top {
			w[i] = top
			cut++
		}
	}
	return cut
}

// replyLatency is the smoothed latency of a peer's replies as this client
// measures them (ns, float64 bits; 0: none yet): an EWMA of gain 1/8,
// lock-free (a load and a store). A failure counts with its latency (a
// timeout's is the timeout, a lower bound), so that a peer whose queue
// outgrows the timeout still looks slow.
type replyLatency struct{ ewma atomic.Uint64 }

func (r *replyLatency) observe(x float64) {
	if !(x > 0) {
		return
	}
	e := x
	if old := r.ewma.Load(); old != 0 {
		e = math.Float64frombits(old)
		e += (x - e) * trustGain
	}
	r.ewma.Store(math.Float64bits(e)) // racing replies may lose one sample, as in observe
}

func (r *replyLatency) get() float64 { return math.Float64frombits(r.ewma.Load()) }

// slowRatio is how far above the median of its list's reply latencies a
// peer's must be for ReportedWRR to stop trusting a report that gives it
// more than the median weight. A weight is a claim of capacity: a peer
// weighted above the others that answers more than four times as slowly as
// the typical peer is being sent more than it can serve (a utilization
// reported near 0 by a loaded server), and the cap at 3× the median alone
// would still send it 2.5 times its fair share. An honest peer is slow
// because it is loaded or slowed, and then reports a utilization near 1
// and a weight below the median, which this leaves alone. Twice the median
// was too near: on a loaded machine an honest server of three times the
// smallest one's capacity was cut now and then, and took 47.6% of the
// calls where grpc-go's weighted_round_robin gave it 50%
// (loadreport/grpcreport's differential test); an overloaded liar's queue
// grows without bound, past four times as surely as past two.
const slowRatio = 4

// trustLocked bounds the reported weights in s.share of peers, one list:
// each is cut to maxWeightRatio × the median weight (clampWeights), and a
// peer above the median weight whose replies' smoothed latency is above
// slowRatio × the median of the list's is cut to the median weight. It
// returns how many weights it cut. Requires s.mu; allocation-free once
// the scratch has grown.
func (s *ReportedWRR) trustLocked(peers []*Peer) int {
	cut := clampWeights(s.share, &s.median)
	w := median(s.share, &s.median)
	lat := s.median[:0]
	for i, p := range peers {
		if l := rwrrOf(p).replies.get(); s.share[i] > 0 && l > 0 {
			lat = append(lat, l)
		}
	}
	s.median = lat
	if w == 0 || len(lat) < 3 {
		return cut
	}
	m := medianSorted(lat)
	for i, p := range peers {
		if s.share[i] > w && rwrrOf(p).replies.get() > slowRatio*m {
			s.share[i] = w
			cut++
		}
	}
	return cut
}

// median returns the median of the positive values of w (0 if none),
// sorted being scratch space.
func median(w []float64, sorted *[]float64) float64 {
	s := (*sorted)[:0]
	for _, x := range w {
		if x > 0 {
			s = append(s, x)
		}
	}
	*sorted = s
	if len(s) == 0 {
		return 0
	}
	return medianSorted(s)
}

// medianSorted sorts s and returns its median, the mean of the middle two
// for an even count. s is not empty.
func medianSorted(s []float64) float64 {
	slices.Sort(s)
	m := s[len(s)/2]
	if len(s)%2 == 0 {
		m = (s[len(s)/2-1] + m) / 2
	}
	return m
}

// ClampedWeights counts the reported weights ReportedWRR has cut to its
// cap, three times the median of the weights reported in the peer's list,
// one per peer and recompute: a peer counted recompute after recompute
// reports far more capacity than the others (a utilization near 0), which
// on an honest fleet means a server three times the median one. Lock-free.
//
// Deprecated: use Stats().ClampedWeights.
func (s *ReportedWRR) ClampedWeights() uint64 { return s.clamped.Load() }

// Stats returns the picker's counters with its cuts of reported weights
// (ClampedWeights).
func (s *ReportedWRR) Stats() PickerStats {
	st := s.smoothRR.Stats()
	st.ClampedWeights = s.clamped.Load()
	return st
}
