package balancer

import (
	"math"
	"sync/atomic"
)

// Prequal's probing: how many probes a pick sends, to whom, within what
// rate, and what is counted.

// probeCounters are ProbeStats' atomics.
type probeCounters struct {
	sent, answered, failed, invalid, unknown, late, rateLimited atomic.Uint64
	raised, distrusted                                          atomic.Uint64
}

// Stats returns the picker's counters with its probes' (Probes).
func (b *Prequal) Stats() PickerStats {
	st := b.twoChoices.Stats()
	st.Probes = b.probeStats()
	return st
}

// ProbeStats returns the probe counters. Lock-free.
//
// Deprecated: use Stats().Probes.
func (b *Prequal) ProbeStats() ProbeStats { return b.probeStats() }

// probeStats reads the probe counters. Lock-free.
func (b *Prequal) probeStats() ProbeStats {
	c := &b.stats
	return ProbeStats{
		Sent: c.sent.Load(), Answered: c.answered.Load(), Failed: c.failed.Load(),
		Invalid: c.invalid.Load(), Unknown: c.unknown.Load(), Late: c.late.Load(),
		RateLimited: c.rateLimited.Load(),
		Raised:      c.raised.Load(), Distrusted: c.distrusted.Load(),
	}
}

// probeBucket caps the probes a second by the generic cell rate algorithm
// (a token bucket as one word): tat is the theoretical arrival time of the
// next probe; a probe at now is sent if max(tat, now) + interval − now is
// within the burst, and moves tat there by compare-and-swap. Over any span
// T it sends at most burst/interval + T/interval probes.
type probeBucket struct {
	tat      atomic.Int64
	interval int64 // ns a probe
	burst    int64 // ns of credit: a hundredth of a second's probes, at least one
}

func newProbeBucket(perSecond float64) probeBucket {
	interval := int64(math.Max(1, 1e9/perSecond))
	return probeBucket{interval: interval, burst: max(interval, int64(1e7))}
}

// take reports whether a probe may go at now, and if so counts it.
func (k *probeBucket) take(now int64) bool {
	for {
		t := k.tat.Load()
		next := max(t, now) + k.interval
		if next-now > k.burst {
			return false
		}
		if k.tat.CompareAndSwap(t, next) {
			return true
		}
	}
}

// probesThisPick returns how many probes this pick sends: ⌊(k+1)·perPick⌋
// − ⌊k·perPick⌋ for the k-th pick, so that a fraction spreads evenly.
func (b *Prequal) probesThisPick() int {
	if b.perPick == math.Trunc(b.perPick) {
		return int(b.perPick)
	}
	k := float64(b.picks.Add(1) - 1)
	return int(math.Floor((k+1)*b.perPick) - math.Floor(k*b.perPick))
}

// sendProbes sends up to k probes, within the per-second cap, to distinct
// peers of t's primaries (its backups if it has none), drawn by probeTarget.
func (b *Prequal) sendProbes(t *drawTable, k int, clk *lazyClock) {
	b.sending.Add(1)
	defer b.sending.Add(-1)
	if b.closed.Load() {
		return
	}
	peers, d := t.list.primary, &t.primary
	if len(peers) == 0 {
		peers, d = t.list.backup, &t.backup
	}
	if len(peers) == 0 {
		return
	}
	var sent [maxProbesPerPick]int
	now := clk.get()
	for n := range k {
		i := b.probeTarget(peers, d, clk, now, sent[:n])
		if i < 0 {
			return
		}
		if !b.bucket.take(now) {
			b.stats.rateLimited.Add(uint64(k - n))
			return
		}
		sent[n] = i
		b.stats.sent.Add(1)
		b.prober.Probe(peers[i], b)
	}
}

// probeTarget draws a peer to probe: one that may take an attempt now, not
// already probed by this pick (sent), and, if unprobed, due for its probe
// (once per max age, claimed by compare-and-swap). Of a few draws it takes
// the first whose answer the pool lacks, else the first that qualified; -1
// if none did.
func (b *Prequal) probeTarget(peers []*Peer, d *drawList, clk *lazyClock, now int64, sent []int) int {
	first := -1
draws:
	for range 2 * p2cEffort {
		i := b.drawOne(d, len(peers))
		for _, j := range sent {
			if i == j {
				continue draws
			}
		}
		st := prequalState(d.st[i])
		if !peers[i].eligible(clk) || st.unprobed.Load() && now < st.nextProbe.Load() {
			continue
		}
		if !st.inPool.Load() {
			first = i
			break
		}
		if first < 0 {
			first = i
		}
	}
	if first < 0 {
		return -1
	}
	if st := prequalState(d.st[first]); st.unprobed.Load() {
		next := st.nextProbe.Load()
		if now < next || !st.nextProbe.CompareAndSwap(next, now+b.maxAge) {
			return -1
		}
	}
	return first
}
