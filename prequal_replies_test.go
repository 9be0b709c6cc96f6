package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPrequal_replyIsAnAnswer: a reply's load report puts a fresh answer
// of its peer into the pool (see Prequal.replied), scaled from the peer's
// last probe answer, within the trust rules. Expected values by hand:
//
//   - no probe answer yet: nothing to scale, the pool stays empty;
//   - after an answer of 3 in flight at 8 ms, a report of R = 6 (the
//     replied attempt among them) is a count of 5 at 8 × (5 + 1)/(3 + 1)
//     = 12 ms, answered half the round trip (2 ms) ago;
//   - a report of 0 from a peer this client holds 2 attempts on is raised
//     to 2 (ProbeStats.Raised counts it), at 8 × (0 + 1)/4 = 2 ms;
//   - a report without HasInFlight, or on a failed attempt, or from a peer
//     whose last attempt failed, changes nothing.
func TestPrequal_replyIsAnAnswer(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(3, letter, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}))
	a := peers[0]
	report := func(p *Peer, r float64) {
		t.Helper()
		require.NoError(t, b.Done(p, Outcome{Latency: ms(5), Load: &ServerLoad{InFlight: r, HasInFlight: true}}))
	}
	take := func(p *Peer) {
		t.Helper()
		require.True(t, p.take(&lazyClock{now: b.now}))
	}
	entry := func(p *Peer) (poolEntry, bool) {
		b.pool.mu.Lock()
		defer b.pool.mu.Unlock()
		if j := b.pool.indexLocked(p); j >= 0 {
			return b.pool.e[j], true
		}
		return poolEntry{}, false
	}

	take(a)
	report(a, 6)
	_, ok := entry(a)
	assert.False(t, ok, "no probe answer yet: no estimate to scale")

	answer(t, b, a, 3, ms(8), ms(4))
	clk.add(time.Millisecond)
	take(a)
	report(a, 6)
	e, ok := entry(a)
	require.True(t, ok)
	assert.Equal(t, [2]float64{5, 5}, [2]float64{e.rif, e.rif0})
	assert.InDelta(t, float64(ms(12)), e.lat, 1)
	assert.Equal(t, clk.now().UnixNano()-int64(ms(2)), e.at)

	raised := b.ProbeStats().Raised
	take(a)
	take(a)
	take(a)
	report(a, 0) // 2 still in flight
	e, _ = entry(a)
	assert.Equal(t, [2]float64{2, 0}, [2]float64{e.rif, e.rif0})
	assert.InDelta(t, float64(ms(2)), e.lat, 1)
	assert.Equal(t, raised+1, b.ProbeStats().Raised)

	before, _ := entry(a)
	clk.add(time.Millisecond)
	require.NoError(t, b.Done(a, Outcome{Latency: ms(5), Load: &ServerLoad{Utilization: 0.5}}))
	e, _ = entry(a)
	assert.Equal(t, before, e, "no count reported")

	require.NoError(t, b.Done(a, Outcome{Latency: ms(5), Failed: true, Load: &ServerLoad{InFlight: 1, HasInFlight: true}}))
	_, ok = entry(a)
	assert.False(t, ok, "a failure drops the answer")
	clk.add(11 * time.Second) // past fail_timeout: a may be tried again
	take(a)
	report(a, 1)
	_, ok = entry(a)
	assert.False(t, ok, "its last attempt failed: its reports stay out")
}

// TestPrequal_replyAllocs: Done with a load report, which takes the
// pool's lock and writes an answer, allocates nothing.
func TestPrequal_replyAllocs(t *testing.T) {
	peers := makePeers(10, letter, nil)
	sp := &syncProber{func(p *Peer) ProbeAnswer {
		return ProbeAnswer{InFlight: float64(p.InFlight()), Latency: time.Millisecond, RoundTrip: 100 * time.Microsecond}
	}}
	b, err := NewPrequal(peers, WithProber(sp), WithProbeRate(3, 1e9))
	require.NoError(t, err)
	load := &ServerLoad{InFlight: 3, HasInFlight: true}
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := b.Pick(nil)
		if err == nil {
			_ = b.Done(p, Outcome{Latency: time.Millisecond, Load: load})
		}
	})
	assert.Zero(t, allocs, "Pick+Done with a report")
}
