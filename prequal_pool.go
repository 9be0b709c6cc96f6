package balancer

import (
	"math"
	"sync"
	"sync/atomic"
)

// Prequal's pool of probe answers (Wydrowski et al., NSDI 2024, §3 and §4):
// at most one answer per peer (a newer one replaces the older), at most
// size answers, none older than maxAge. A pick scans it once, under mu, in
// O(size): it drops the answers past their age, chooses by the hot-cold
// rule, takes the chosen peer's attempt, charges the answer one use (its
// in-flight count goes up by one, the attempt this client just sent, and
// its reuse budget down by one: it leaves the pool at 0) and removes one
// more answer, the oldest and the worst in turn. Answers and list changes
// take the same lock; nothing in it allocates, blocks or calls out.

// rifRingSize is how many of the latest answered in-flight counts the
// hot-cold threshold is the quantile of: more than one pool's worth, so
// that the threshold reflects the fleet's recent counts and not only the
// few the pool holds after its removals.
const rifRingSize = 64

// answersPerRemoval is how many answers pay for one removal: the paper's
// and prequal-rs's 3 probes and 1 removal a query. Tied to the answers
// rather than to the picks, a pick whose probes the per-second cap
// refused removes less, and the pool does not drain to the last answer.
const answersPerRemoval = 3

// maxReuse caps a probe's reuse budget: the paper's formula gives no bound
// when the pool holds as many answers as there are peers (its denominator
// is then 0 or less).
const maxReuse = 4

// poolEntry is one probe answer in the pool.
type poolEntry struct {
	peer *Peer
	st   *prequalPeer
	rif  float64 // the server's in-flight count, plus this client's uses
	rif0 float64 // the server's in-flight count as answered
	lat  float64 // the server's latency estimate at that count, ns
	at   int64   // when the server answered, unix ns
	uses int32   // what is left of the reuse budget
}

// probePool is the pool and what its rule reads; every field is guarded by
// mu, and so are the prequalPeer fields the comments say.
type probePool struct {
	mu sync.Mutex

	e       []poolEntry  // len ≤ size; the backing array is allocated once
	n       atomic.Int32 // len(e), read without the lock
	size    int
	maxAge  int64   // ns
	q       float64 // the hot quantile
	ring    rifRing
	budget  float64 // the reuse budget of a new answer (reuseBudget)
	credit  float64 // the budget's fractional part, carried from answer to answer
	oldest  bool    // the next per-pick removal takes the oldest (else the worst)
	answers int     // answers since the last removal, up to answersPerRemoval
	removes bool    // the picker probes (perPick > 0), so its picks remove
}

// rifRing holds the last rifRingSize answered in-flight counts, in arrival
// order (fifo) and sorted (sorted[:n]), so that a quantile is one read.
type rifRing struct {
	fifo   [rifRingSize]float64
	sorted [rifRingSize]float64
	n      int // values held
	next   int // fifo's next slot
}

// add records x, dropping the oldest value when full: O(rifRingSize), one
// shift of the values between the old value's place and the new one's.
func (r *rifRing) add(x float64) {
	switch {
	case r.n < len(r.fifo):
		i := r.find(x)
		copy(r.sorted[i+1:r.n+1], r.sorted[i:r.n])
		r.sorted[i] = x
		r.n++
	case r.fifo[r.next] != x:
		i, j := r.find(r.fifo[r.next]), r.find(x) // the old value's place, the new one's
		if j > i {
			copy(r.sorted[i:j-1], r.sorted[i+1:j])
			r.sorted[j-1] = x
		} else {
			copy(r.sorted[j+1:i+1], r.sorted[j:i])
			r.sorted[j] = x
		}
	}
	r.fifo[r.next] = x
	r.next = (r.next + 1) % len(r.fifo)
}

// find returns the first index of sorted[:n] whose value is ≥ x, by a
// binary search whose step is a conditional move, not a branch (the
// comparisons of a ring of counts are unpredictable).
func (r *rifRing) find(x float64) int {
	base, n := 0, r.n
	for n > 1 {
		half := n / 2
		if r.sorted[base+half-1] < x {
			base += half
		}
		n -= half
	}
	if n == 1 && r.sorted[base] < x {
		base++
	}
	return base
}

// quantile returns the q-quantile of the values held, by nearest rank (the
// ⌈q·n⌉-th smallest), or +Inf when there are none: nothing is hot before
// the first answer.
func (r *rifRing) quantile(q float64) float64 {
	if r.n == 0 {
		return math.Inf(1)
	}
	k := int(math.Ceil(q*float64(r.n))) - 1
	return r.sorted[min(max(k, 0), r.n-1)]
}

// reuseBudget is the paper's reuse budget b = 1 + δ/((1 − m/n)·r_probe −
// r_remove), δ = 1, for a pool of m answers over n peers, r_probe probes
// and r_remove removals a pick, clamped to [1, maxReuse]; maxReuse when the
// denominator is 0 or less (the pool holds every peer: m ≥ n) or n is 0.
// The paper derives it so that the pool's answers are used up at the rate
// the probes replace them.
func reuseBudget(m, n int, rProbe, rRemove float64) float64 {
	if n == 0 {
		return maxReuse
	}
	den := (1-float64(m)/float64(n))*rProbe - rRemove
	if den <= 0 {
		return maxReuse
	}
	return min(max(1+1/den, 1), maxReuse)
}

// newUsesLocked returns a new answer's uses: the budget's integer part,
// plus one whenever the fractional parts carried so far add up to one, so
// that the mean is the budget, deterministically.
func (pl *probePool) newUsesLocked() int32 {
	whole, frac := math.Modf(pl.budget)
	u := int32(whole)
	if pl.credit += frac; pl.credit >= 1-1e-9 { // 1/3 + 2/3 may fall short of 1
		pl.credit--
		u++
	}
	return max(u, 1)
}

// putLocked records an answer of st's peer p taken at at, of count rif0
// and latency lat, its count raised to rif (trust.go's raiseRIF): it
// replaces the peer's answer if older, or takes a free place, or the
// oldest answer's.
func (pl *probePool) putLocked(p *Peer, st *prequalPeer, rif, rif0, lat float64, at int64) {
	j := pl.indexLocked(p)
	switch {
	case j >= 0:
		if pl.e[j].at > at {
			return // a newer answer is already here
		}
	case len(pl.e) < pl.size:
		pl.e = append(pl.e, poolEntry{})
		j = len(pl.e) - 1
		pl.n.Store(int32(len(pl.e)))
	default:
		j = 0
		for k := range pl.e {
			if pl.e[k].at < pl.e[j].at {
				j = k
			}
		}
		pl.e[j].st.inPool.Store(false)
	}
	pl.e[j] = poolEntry{peer: p, st: st, rif: rif, rif0: rif0, lat: lat, at: at, uses: pl.newUsesLocked()}
	st.inPool.Store(true)
}

// indexLocked returns the index of p's answer, or -1.
func (pl *probePool) indexLocked(p *Peer) int {
	for j := range pl.e {
		if pl.e[j].peer == p {
			return j
		}
	}
	return -1
}

// removeLocked drops answer j (the last one takes its place).
func (pl *probePool) removeLocked(j int) {
	pl.e[j].st.inPool.Store(false)
	last := len(pl.e) - 1
	pl.e[j] = pl.e[last]
	pl.e[last] = poolEntry{}
	pl.e = pl.e[:last]
	pl.n.Store(int32(last))
}

// dropLocked drops p's answer, if any.
func (pl *probePool) dropLocked(p *Peer) {
	if j := pl.indexLocked(p); j >= 0 {
		pl.removeLocked(j)
	}
}

// ageLocked drops the answers older than maxAge at now.
func (pl *probePool) ageLocked(now int64) {
	for j := 0; j < len(pl.e); {
		if now-pl.e[j].at > pl.maxAge {
			pl.removeLocked(j)
			continue
		}
		j++
	}
}

// score is an answer's expected latency for this client per unit of the
// peer's weight, ns: the server's estimate plus the client's smoothed round
// trip to the peer, over the weight (see prequalWeights).
func (e *poolEntry) score() float64 {
	return (e.lat*(e.rif+1)/(e.rif0+1) + e.st.rtt) / weightOf(e.peer)
}

// load is an answer's in-flight count per unit of the peer's weight, what
// the hot rule reads.
func (e *poolEntry) load() float64 { return e.rif / weightOf(e.peer) }

// prequalWeights: how a configured weight shapes Prequal's choice. A
// weight stands for capacity, as P2CPeakEWMA's cost (latency × (in flight
// + 1) / weight) and WithReportedLoad's L/w take it: a peer of weight w is
// w servers' worth, so its in-flight count is divided by w before the hot
// rule reads it (the recent counts' quantile too, each over its own
// peer's weight), and its expected latency is divided by w before the
// cold answers are compared. Both, because either alone leaves a part of
// the choice blind to the weight: the hot rule alone lets equal-latency
// cold answers tie, and the score alone lets a heavy peer that is hot lose
// every pick to a light cold one. With weights 1 the choice is the one
// without. Probes are drawn by weight too (probeTarget), so a heavy peer's
// answers are in the pool more often. On equal servers this is weighted
// least-requests: the counts settle where (in flight + 1)/w is even
// (TestPrequal_weights derives the shares). Where the weights are the
// servers' capacities and the servers' estimates already show their speed
// (balance sim's hetero, weights 1 to 4 by capacity) it still helps: p99
// 42.1 ms against 50.5 without (seeds 1-3).

// weightOf returns p's weight as a divisor: at least 1, so that a peer of
// weight 0, drawn only when no other is eligible, counts as weight 1.
func weightOf(p *Peer) float64 { return float64(max(p.weight.Load(), 1)) }

// chooseLocked applies the hot-cold rule to the answers of the peers of
// peers (the primaries, or the backups if backup) that r may try now: an
// answer is hot when its in-flight count is above thr; the cold answer of
// the lowest score wins, or, if all are hot, the one of the lowest count
// (then the lowest score). It returns the answer's index, or -1.
func (pl *probePool) chooseLocked(peers []*Peer, backup bool, r *Request, clk *lazyClock, thr float64) int {
	cold, hot := -1, -1
	for j := range pl.e {
		e := &pl.e[j]
		st := e.st
		if st.backup != backup || st.pos >= len(peers) || peers[st.pos] != e.peer ||
			r.isTried(st.pos) || e.peer.weight.Load() == 0 || !e.peer.eligible(clk) {
			continue
		}
		if e.load() <= thr {
			if cold < 0 || e.score() < pl.e[cold].score() {
				cold = j
			}
			continue
		}
		if h := &pl.e[max(hot, 0)]; hot < 0 || e.load() < h.load() || e.load() == h.load() && e.score() < h.score() {
			hot = j
		}
	}
	if cold >= 0 {
		return cold
	}
	return hot
}

// useLocked charges answer j with the attempt just taken on its peer: one
// more in flight, one use less, removed when the budget is spent.
func (pl *probePool) useLocked(j int) {
	e := &pl.e[j]
	e.rif++
	if e.uses--; e.uses <= 0 {
		pl.removeLocked(j)
	}
}

// removeOneLocked is the pick's removal: the oldest answer and the worst in
// turn, the worst being the hottest (the highest count above thr) or, with
// none hot, the slowest (the highest score).
func (pl *probePool) removeOneLocked(thr float64) {
	if len(pl.e) == 0 {
		return
	}
	pl.oldest = !pl.oldest
	w := 0
	for j := 1; j < len(pl.e); j++ {
		e, c := &pl.e[j], &pl.e[w]
		switch {
		case pl.oldest:
			if e.at < c.at {
				w = j
			}
		case e.load() > thr || c.load() > thr:
			if e.load() > c.load() {
				w = j
			}
		case e.score() > c.score():
			w = j
		}
	}
	pl.removeLocked(w)
}
