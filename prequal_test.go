package balancer

import (
	"errors"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Prequal's promises beyond the contract, checked by FuzzPickers: without
// a prober it is P2CPeakEWMA.
var _ = declareTraits("Prequal", fuzzTrait{zeroWeight: zwEligible})

// proberFunc is a Prober of one function.
type proberFunc func(p *Peer, to ProbeReceiver)

func (f proberFunc) Probe(p *Peer, to ProbeReceiver) { f(p, to) }

// queueProber records the probes it is asked for and answers none until
// told: the asynchronous prober, in a preallocated queue.
type queueProber struct {
	mu     sync.Mutex
	probes []*Peer
}

func (q *queueProber) Probe(p *Peer, _ ProbeReceiver) {
	q.mu.Lock()
	q.probes = append(q.probes, p)
	q.mu.Unlock()
}

// take returns the probes asked for since the last take.
func (q *queueProber) take() []*Peer {
	q.mu.Lock()
	defer q.mu.Unlock()
	out := q.probes
	q.probes = nil
	return out
}

// newTestPrequal returns a Prequal over peers on clk, seeded, with opts.
func newTestPrequal(t *testing.T, clk *fakeClock, peers []*Peer, opts ...Option) *Prequal {
	t.Helper()
	opts = append([]Option{clk.opt(), WithRand(rand.NewPCG(1, 2))}, opts...)
	b, err := NewPrequal(peers, opts...)
	require.NoError(t, err)
	return b
}

// ms is a latency in milliseconds.
func ms(x float64) time.Duration { return time.Duration(x * float64(time.Millisecond)) }

// answer feeds b one answer, which must be taken.
func answer(t *testing.T, b *Prequal, p *Peer, rif float64, lat, rtt time.Duration) {
	t.Helper()
	require.NoError(t, b.Answer(p, ProbeAnswer{InFlight: rif, Latency: lat, RoundTrip: rtt}))
}

// TestPrequal_fallbackIsP2CPeakEWMA checks that without a prober, and
// with a prober closed before the first pick, Prequal picks as
// NewP2CPeakEWMA does, pick for pick, over the same seed, clock and
// outcomes: heavy-tailed latencies by peer, a failure now and then,
// attempts held in flight.
func TestPrequal_fallbackIsP2CPeakEWMA(t *testing.T) {
	for _, mode := range []string{"no prober", "closed prober"} {
		t.Run(mode, func(t *testing.T) {
			clkA, clkB := newFakeClock(), newFakeClock()
			pa := makePeers(8, func(i int) string { return string(rune('a' + i)) }, nil)
			pb := makePeers(8, func(i int) string { return string(rune('a' + i)) }, nil)
			ref := newTestP2C(t, clkA, pa)
			var opts []Option
			if mode == "closed prober" {
				opts = append(opts, WithProber(&queueProber{}))
			}
			b := newTestPrequal(t, clkB, pb, opts...)
			if mode == "closed prober" {
				require.NoError(t, b.Close())
			}
			out := rand.New(rand.NewPCG(7, 8))
			var heldA, heldB []*Peer
			for i := range 2000 {
				x, errA := ref.Pick(nil)
				y, errB := b.Pick(nil)
				require.Equal(t, errA, errB, "pick %d", i)
				if errA == nil {
					require.Equal(t, x.Addr(), y.Addr(), "pick %d", i)
					heldA, heldB = append(heldA, x), append(heldB, y)
				}
				if len(heldA) > 3 || len(heldA) > 0 && out.IntN(2) == 0 {
					k := out.IntN(len(heldA))
					lat := time.Duration(float64(time.Millisecond) * math.Exp(out.NormFloat64()*1.2) * float64(1+k%3))
					o := Outcome{Latency: lat, Failed: out.IntN(100) == 0}
					require.NoError(t, ref.Done(heldA[k], o))
					require.NoError(t, b.Done(heldB[k], o))
					heldA = append(heldA[:k], heldA[k+1:]...)
					heldB = append(heldB[:k], heldB[k+1:]...)
				}
				d := time.Duration(out.IntN(3)) * time.Millisecond
				clkA.add(d)
				clkB.add(d)
			}
		})
	}
}

// TestPrequal_hotCold checks the hot-cold rule on hand-built pools (no
// probes sent, no removal: WithProbeRate(0, 1)). Each case's answers arrive
// in order (a peer's later answer replaces its earlier one in the pool,
// but every answer enters the recent counts); the threshold is the
// nearest-rank q-quantile of those counts, the ⌈q·n⌉-th smallest, worked
// out in the case's comment, and the expected peer follows: the cold
// answer (count ≤ threshold) of the lowest latency + round trip, or with
// all hot the lowest count.
func TestPrequal_hotCold(t *testing.T) {
	type ans struct {
		peer     string
		rif      float64
		lat, rtt time.Duration
	}
	tests := []struct {
		name    string
		q       float64
		answers []ans
		want    string
	}{
		// counts 1 2 5 9, n 4. q .5: ⌈2⌉ = 2nd, 2: a, b cold, b faster.
		{"q 0.5", 0.5, []ans{{"a", 1, ms(40), 0}, {"b", 2, ms(10), 0}, {"c", 5, ms(5), 0}, {"d", 9, ms(1), 0}}, "b"},
		// q .75: ⌈3⌉ = 3rd, 5: a, b, c cold, c fastest.
		{"q 0.75", 0.75, []ans{{"a", 1, ms(40), 0}, {"b", 2, ms(10), 0}, {"c", 5, ms(5), 0}, {"d", 9, ms(1), 0}}, "c"},
		// q .25: ⌈1⌉ = 1st, 1: a alone cold.
		{"q 0.25", 0.25, []ans{{"a", 1, ms(40), 0}, {"b", 2, ms(10), 0}, {"c", 5, ms(5), 0}, {"d", 9, ms(1), 0}}, "a"},
		// q 1: the largest, 9: all cold, d fastest.
		{"q 1", 1, []ans{{"a", 1, ms(40), 0}, {"b", 2, ms(10), 0}, {"c", 5, ms(5), 0}, {"d", 9, ms(1), 0}}, "d"},
		// counts 0 0 0 3 4 (a's three zeros replaced in the pool by its 3),
		// q .5: ⌈2.5⌉ = 3rd, 0: all hot, the lowest count, a.
		{"all hot: lowest count", 0.5, []ans{{"a", 0, ms(1), 0}, {"a", 0, ms(1), 0}, {"a", 0, ms(1), 0}, {"a", 3, ms(50), 0}, {"b", 4, ms(1), 0}}, "a"},
		// all hot with equal counts: the lower latency, b.
		{"all hot: tie on count", 0.5, []ans{{"c", 0, ms(1), 0}, {"c", 0, ms(1), 0}, {"c", 0, ms(1), 0}, {"a", 3, ms(50), 0}, {"b", 3, ms(20), 0}, {"c", 9, ms(1), 0}}, "b"},
		// counts 1 1, both cold: a 15+1 ms against b 10+20: a.
		{"round trip counts", 0.6, []ans{{"a", 1, ms(15), ms(1)}, {"b", 1, ms(10), ms(20)}}, "a"},
		// the far zone's server is faster, the near one's wins by 14 ms.
		{"near zone beats far", 1, []ans{{"a", 2, ms(12), ms(30)}, {"b", 2, ms(20), ms(8)}}, "b"},
		// the round trip is smoothed (gain 1/8): b's first 40, then 0:
		// 40 + (0 − 40)/8 = 35; b 1 + 35 = 36 > a 30 + 0.
		{"smoothed round trip", 1, []ans{{"a", 0, ms(30), 0}, {"b", 0, ms(1), ms(40)}, {"b", 0, ms(1), 0}}, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := makePeers(4, func(i int) string { return string(rune('a' + i)) }, nil)
			b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1), WithHotQuantile(tt.q))
			byName := map[string]*Peer{}
			for _, p := range peers {
				byName[p.Addr()] = p
			}
			for _, a := range tt.answers {
				answer(t, b, byName[a.peer], a.rif, a.lat, a.rtt)
			}
			assert.Equal(t, tt.want, mustPick(t, b, nil).Addr())
		})
	}
}

// TestPrequal_localCount checks that a used answer counts the attempt: a
// 1 (1 ms), b 1 (2 ms), c 3 (0.5 ms); counts 1 1 3, q 2/3: the 2nd, 1.
// Pick 1: a and b cold, a faster; a's count goes to 2, hot. Pick 2: b
// alone cold; b to 2. Pick 3: all hot, a and b at 2, a faster. Without the
// local count it would be a, a, a.
func TestPrequal_localCount(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1), WithHotQuantile(2.0/3))
	answer(t, b, peers[0], 1, ms(1), 0)
	answer(t, b, peers[1], 1, ms(2), 0)
	answer(t, b, peers[2], 3, ms(0.5), 0)
	var got []string
	for range 3 {
		got = append(got, mustPick(t, b, nil).Addr())
	}
	assert.Equal(t, []string{"a", "b", "a"}, got)
}

// TestPrequal_localLatency checks that a used answer's latency grows with
// the local count, as latency × (count + uses + 1)/(count + 1): a 3 in
// flight at 8 ms, b 1 at 11 ms, and c 100 at 1 s, which keeps the
// threshold (q 1: the largest, 100) above every count here. Pick 1: a (8
// against 11); a is then 8 × 5/4 = 10. Pick 2: a (10 < 11); then 8 × 6/4
// = 12. Pick 3: b (11 < 12). A count that left the latency alone would
// give a four times (its budget) before b.
func TestPrequal_localLatency(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1), WithHotQuantile(1))
	answer(t, b, peers[2], 100, time.Second, 0)
	answer(t, b, peers[0], 3, ms(8), 0)
	answer(t, b, peers[1], 1, ms(11), 0)
	var got []string
	for range 3 {
		got = append(got, mustPick(t, b, nil).Addr())
	}
	assert.Equal(t, []string{"a", "a", "b"}, got)
}

// TestPrequal_maxAge checks that an answer serves picks until it is
// maxAge old, counted from when the server answered (the answer's arrival
// less half its round trip), and not after: then the pick falls back to
// P2CPeakEWMA's rule, here a draw between b and c (a has an attempt in
// flight and no reply yet, so loses to neither... both unmeasured idle:
// a pair without a). The budget (4 uses, the cap: the pool of 16 holds
// every one of the 3 peers) is not the limit over 2 picks.
func TestPrequal_maxAge(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1), WithProbePool(16, 100*time.Millisecond))
	answer(t, b, peers[0], 0, ms(1), ms(20)) // answered at now − 10 ms
	clk.add(90 * time.Millisecond)           // 100 ms old: still in
	assert.Equal(t, "a", mustPick(t, b, nil).Addr())
	clk.add(time.Nanosecond) // past the age
	assert.Equal(t, 1, len(b.pool.e))
	p := mustPick(t, b, nil)
	assert.Equal(t, 0, len(b.pool.e), "aged out at the pick")
	assert.NotEqual(t, "a", p.Addr(), "the fallback prefers the peers with nothing in flight")
}

// TestPrequal_reuseBudget checks the budget against the paper's formula
// worked out by hand, and that an answer serves exactly its budget.
func TestPrequal_reuseBudget(t *testing.T) {
	tests := []struct {
		m, n           int
		rProbe, rRemov float64
		want           float64
	}{
		{8, 40, 2, 1, 1 + 1/0.6},      // (1 − 0.2)·2 − 1 = 0.6
		{16, 100, 3, 1, 1 + 1/1.52},   // 0.84·3 − 1 = 1.52
		{16, 10, 3, 1, maxReuse},      // pool ≥ peers: the cap
		{10, 10, 3, 1, maxReuse},      // denominator 0
		{16, 1000, 3, 1, 1 + 1/1.952}, // 0.984·3 − 1
		{8, 40, 1.2, 1, maxReuse},     // 0.8·1.2 − 1 < 0
		{4, 400, 1.03, 1, maxReuse},   // 1 + 1/0.0197 > the cap
		{4, 8, 0, 0, maxReuse},
		{4, 0, 3, 1, maxReuse},
	}
	for _, tt := range tests {
		assert.InDelta(t, tt.want, reuseBudget(tt.m, tt.n, tt.rProbe, tt.rRemov), 1e-12, "%+v", tt)
	}

	// 3 peers in a pool of 16: 4 uses. One answer of a, and a kept cold
	// (q 1): four picks of a from the pool, then none in the pool.
	clk := newFakeClock()
	peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1), WithHotQuantile(1))
	answer(t, b, peers[0], 0, ms(1), 0)
	for i := range maxReuse {
		require.Equal(t, 1, len(b.pool.e), "use %d", i)
		assert.Equal(t, "a", mustPick(t, b, nil).Addr(), "use %d", i)
	}
	assert.Equal(t, 0, len(b.pool.e), "spent")

	// A fractional budget: the mean is the budget, 2, 3, 3 for 2 2/3.
	pl := probePool{budget: 1 + 1/0.6}
	var uses []int32
	for range 3 {
		uses = append(uses, pl.newUsesLocked())
	}
	assert.Equal(t, []int32{2, 3, 3}, uses)
}

// TestPrequal_removal checks the pick's one removal, the oldest and the
// worst in turn, the worst being the hottest answer or, with none hot, the
// slowest (latency + round trip); then that a pick removes one answer
// besides the one it uses.
func TestPrequal_removal(t *testing.T) {
	type ent struct {
		name string
		rif  float64
		lat  float64 // ms
		rtt  float64 // ms
		at   int64
	}
	build := func(es []ent) *probePool {
		pl := &probePool{size: 8}
		for _, e := range es {
			st := &prequalPeer{rtt: float64(ms(e.rtt))}
			pl.e = append(pl.e, poolEntry{peer: NewPeer(e.name), st: st, rif: e.rif, lat: float64(ms(e.lat)), at: e.at})
		}
		return pl
	}
	names := func(pl *probePool) map[string]bool {
		m := map[string]bool{}
		for _, e := range pl.e {
			m[e.peer.Addr()] = true
		}
		return m
	}
	// None hot (threshold +Inf): oldest d, slowest c (30 + 5 = 35 against
	// b's 20 + 10 = 30), oldest a, and b is left.
	pl := build([]ent{{"a", 0, 10, 0, 2}, {"b", 0, 20, 10, 4}, {"c", 0, 30, 5, 3}, {"d", 0, 40, 0, 1}})
	for _, gone := range []string{"d", "c", "a", "b"} {
		pl.removeOneLocked(math.Inf(1))
		assert.False(t, names(pl)[gone], "%s removed", gone)
		assert.Equal(t, 4-len(names(pl)), 1+slicesIndex([]string{"d", "c", "a", "b"}, gone))
	}
	// Hot above 2: b (3) and d (9) hot; the worst is d, the hottest,
	// though a is the slowest.
	pl = build([]ent{{"a", 1, 90, 0, 1}, {"b", 3, 20, 0, 2}, {"c", 2, 30, 0, 3}, {"d", 9, 1, 0, 4}})
	pl.oldest = true // the next removal takes the worst
	pl.removeOneLocked(2)
	assert.Equal(t, map[string]bool{"a": true, "b": true, "c": true}, names(pl))

	// A pick of a picker that probes removes one answer besides those it
	// uses up once three answers came since the last removal: of 4
	// answers (oldest d), a is used (4 uses, the cap) and d removed.
	clk := newFakeClock()
	peers := makePeers(5, func(i int) string { return string(rune('a' + i)) }, nil)
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(1, 1000), WithProbePool(16, time.Second), WithHotQuantile(1))
	for _, a := range []struct {
		i   int
		lat float64
	}{{3, 40}, {0, 10}, {2, 30}, {1, 20}} {
		answer(t, b, peers[a.i], 0, ms(a.lat), 0)
		clk.add(time.Millisecond)
	}
	assert.Equal(t, "a", mustPick(t, b, nil).Addr())
	assert.Equal(t, 3, len(b.pool.e))
	assert.Equal(t, -1, b.pool.indexLocked(peers[3]), "d, the oldest, removed")
	// The credit holds one removal at most (the 4th answer found it full),
	// so the next pick (b, the fastest cold answer: a, used, is at 1 in
	// flight, above the threshold 0) removes none; after two more answers
	// still none (c, the fastest cold one left); after a third, one.
	assert.Equal(t, "b", mustPick(t, b, nil).Addr())
	assert.Equal(t, 3, len(b.pool.e), "no answer since the last removal: none")
	answer(t, b, peers[4], 0, ms(50), 0)
	answer(t, b, peers[3], 0, ms(60), 0)
	require.Equal(t, 5, len(b.pool.e))
	c := mustPick(t, b, nil)
	assert.Equal(t, "c", c.Addr())
	assert.Equal(t, 5, len(b.pool.e), "two answers: none")
	// c's attempt ends before its next answer, which would otherwise be
	// raised to the attempt this client still has on it (trust.go).
	require.NoError(t, b.Done(c, Outcome{Latency: ms(30)}))
	answer(t, b, peers[2], 0, ms(30), 0)
	assert.Equal(t, "c", mustPick(t, b, nil).Addr())
	assert.Equal(t, 4, len(b.pool.e), "three answers: one removal")
}

// slicesIndex is slices.Index for the removal table.
func slicesIndex(s []string, x string) int {
	for i, v := range s {
		if v == x {
			return i
		}
	}
	return -1
}

// TestPrequal_probeRate checks the probes a pick sends: 3 by default, to
// distinct peers; a fraction spread evenly (0.5: every other pick); and the
// per-second cap on the clock: 10 a second with a burst of a hundredth of
// a second's worth, at least one probe (one), lets exactly one probe
// through every 100 ms, so over picks 1 ms apart for 1 s, 10 of the 3000
// asked for; 1000 a second with its burst of 10 lets 10 of a pick's 16
// through at once (over 20 peers), then one a millisecond.
func TestPrequal_probeRate(t *testing.T) {
	peers := makePeers(10, func(i int) string { return string(rune('a' + i)) }, nil)
	t.Run("default 3 a pick", func(t *testing.T) {
		clk := newFakeClock()
		q := &queueProber{}
		b := newTestPrequal(t, clk, makePeers(10, func(i int) string { return string(rune('a' + i)) }, nil), WithProber(q))
		for range 50 {
			mustPick(t, b, nil)
			got := q.take()
			require.Len(t, got, 3)
			assert.True(t, got[0] != got[1] && got[1] != got[2] && got[0] != got[2], "distinct peers")
			clk.add(10 * time.Millisecond)
		}
		assert.Equal(t, uint64(150), b.ProbeStats().Sent)
	})
	t.Run("none on a retry", func(t *testing.T) {
		clk := newFakeClock()
		q := &queueProber{}
		b := newTestPrequal(t, clk, makePeers(10, func(i int) string { return string(rune('a' + i)) }, nil), WithProber(q))
		var r Request
		for attempt := range 4 {
			p := mustPick(t, b, &r)
			want := 0
			if attempt == 0 {
				want = 3
			}
			assert.Len(t, q.take(), want, "attempt %d", attempt)
			require.NoError(t, b.Done(p, Outcome{Failed: true}))
		}
	})
	t.Run("half a pick", func(t *testing.T) {
		clk := newFakeClock()
		q := &queueProber{}
		b := newTestPrequal(t, clk, peers, WithProber(q), WithProbeRate(0.5, 1000))
		var per []int
		for range 6 {
			mustPick(t, b, nil)
			per = append(per, len(q.take()))
		}
		assert.Equal(t, []int{0, 1, 0, 1, 0, 1}, per)
	})
	t.Run("per second", func(t *testing.T) {
		clk := newFakeClock()
		q := &queueProber{}
		b := newTestPrequal(t, clk, makePeers(10, func(i int) string { return string(rune('a' + i)) }, nil), WithProber(q), WithProbeRate(3, 10))
		for range 1000 {
			mustPick(t, b, nil)
			clk.add(time.Millisecond)
		}
		s := b.ProbeStats()
		assert.Equal(t, uint64(10), s.Sent)
		assert.Equal(t, uint64(3000-10), s.RateLimited)
		assert.Len(t, q.take(), 10)
	})
	t.Run("per second, burst", func(t *testing.T) {
		clk := newFakeClock()
		q := &queueProber{}
		b := newTestPrequal(t, clk, makePeers(20, func(i int) string { return string(rune('a' + i)) }, nil), WithProber(q), WithProbeRate(16, 1000))
		mustPick(t, b, nil)
		assert.Len(t, q.take(), 10, "the burst, of the 16 asked for")
		for range 999 {
			clk.add(time.Millisecond)
			mustPick(t, b, nil)
		}
		assert.Len(t, q.take(), 999, "then one a millisecond")
	})
}

// TestPrequal_badAnswers checks that every bad answer is refused with its
// sentinel and a message naming the value, counted, and changes nothing:
// the pool and the recent counts stay empty.
func TestPrequal_badAnswers(t *testing.T) {
	tests := []struct {
		name    string
		a       ProbeAnswer
		unknown bool // for a peer the picker does not hold
		err     error
		msg     string
		count   func(ProbeStats) uint64
	}{
		{"NaN in flight", ProbeAnswer{InFlight: math.NaN()}, false, ErrInvalidProbe, "InFlight NaN", func(s ProbeStats) uint64 { return s.Invalid }},
		{"infinite in flight", ProbeAnswer{InFlight: math.Inf(1)}, false, ErrInvalidProbe, "InFlight +Inf", func(s ProbeStats) uint64 { return s.Invalid }},
		{"negative in flight", ProbeAnswer{InFlight: -1}, false, ErrInvalidProbe, "InFlight -1", func(s ProbeStats) uint64 { return s.Invalid }},
		{"huge in flight", ProbeAnswer{InFlight: MaxProbeInFlight + 1}, false, ErrInvalidProbe, "InFlight 1.048577e+06", func(s ProbeStats) uint64 { return s.Invalid }},
		{"negative latency", ProbeAnswer{Latency: -1}, false, ErrInvalidProbe, "Latency -1ns", func(s ProbeStats) uint64 { return s.Invalid }},
		{"huge latency", ProbeAnswer{Latency: MaxProbeLatency + 1}, false, ErrInvalidProbe, "Latency 1h0m0.000000001s", func(s ProbeStats) uint64 { return s.Invalid }},
		{"negative round trip", ProbeAnswer{RoundTrip: -time.Second}, false, ErrInvalidProbe, "RoundTrip -1s", func(s ProbeStats) uint64 { return s.Invalid }},
		{"unknown peer", ProbeAnswer{InFlight: 1}, true, ErrUnknownPeer, `"stranger"`, func(s ProbeStats) uint64 { return s.Unknown }},
		{"late", ProbeAnswer{InFlight: 1, RoundTrip: time.Second + 1}, false, nil, "", func(s ProbeStats) uint64 { return s.Late }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
			b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1))
			p := peers[0]
			if tt.unknown {
				p = NewPeer("stranger")
			}
			err := b.Answer(p, tt.a)
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				assert.ErrorContains(t, err, tt.msg)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, uint64(1), tt.count(b.ProbeStats()))
			assert.Equal(t, uint64(0), b.ProbeStats().Answered)
			assert.Equal(t, 0, len(b.pool.e), "pool unchanged")
			assert.Equal(t, 0, b.pool.ring.n, "recent counts unchanged")
		})
	}
	t.Run("nil peer", func(t *testing.T) {
		b := newTestPrequal(t, newFakeClock(), []*Peer{NewPeer("a")}, WithProber(&queueProber{}))
		assert.ErrorIs(t, b.Answer(nil, ProbeAnswer{}), ErrUnknownPeer)
		assert.Equal(t, uint64(1), b.ProbeStats().Unknown)
	})
}

// TestPrequal_options checks each option's range, errors naming the
// option and the value.
func TestPrequal_options(t *testing.T) {
	pr := &queueProber{}
	tests := []struct {
		opt  Option
		want string // "" valid
	}{
		{WithProber(nil), "WithProber(nil)"},
		{WithProber(pr), ""},
		{WithProbeRate(0, 1), ""},
		{WithProbeRate(16, 1e6), ""},
		{WithProbeRate(-1, 10), "WithProbeRate(-1, 10)"},
		{WithProbeRate(17, 10), "WithProbeRate(17, 10)"},
		{WithProbeRate(math.NaN(), 10), "WithProbeRate(NaN, 10)"},
		{WithProbeRate(3, 0), "WithProbeRate(3, 0)"},
		{WithProbeRate(3, math.Inf(1)), "WithProbeRate(3, +Inf)"},
		{WithProbeRate(3, 1e-3), ""},
		{WithProbeRate(3, 1e-300), "WithProbeRate(3, 1e-300)"}, // its interval in ns would overflow
		{WithProbePool(1, time.Millisecond), ""},
		{WithProbePool(0, time.Second), "WithProbePool(0, 1s)"},
		{WithProbePool(1025, time.Second), "WithProbePool(1025, 1s)"},
		{WithProbePool(16, 0), "WithProbePool(16, 0s)"},
		{WithProbePool(16, 2*time.Hour), "WithProbePool(16, 2h0m0s)"},
		{WithHotQuantile(1), ""},
		{WithHotQuantile(0.01), ""},
		{WithHotQuantile(0), "WithHotQuantile(0)"},
		{WithHotQuantile(1.5), "WithHotQuantile(1.5)"},
		{WithHotQuantile(math.NaN()), "WithHotQuantile(NaN)"},
		{WithDecay(0), "WithDecay(0s)"},
		{WithFailurePenalty(-1), "WithFailurePenalty(-1ns)"},
	}
	for _, tt := range tests {
		_, err := NewPrequal([]*Peer{NewPeer("a")}, tt.opt)
		if tt.want == "" {
			assert.NoError(t, err)
			continue
		}
		assert.ErrorIs(t, err, ErrInvalidConfig, tt.want)
		assert.ErrorContains(t, err, tt.want)
	}
}

// closingProber counts its probes, and fails the test for a probe that
// starts after Close returned.
type closingProber struct {
	t      *testing.T
	after  atomic.Bool // Close has returned
	probes atomic.Int64
	closed atomic.Int64
}

func (c *closingProber) Probe(p *Peer, to ProbeReceiver) {
	if c.after.Load() {
		c.t.Errorf("Probe(%s) after Close returned", p.Addr())
	}
	c.probes.Add(1)
	_ = to.Answer(p, ProbeAnswer{InFlight: float64(p.InFlight()), Latency: time.Millisecond})
}

func (c *closingProber) Close() error { c.closed.Add(1); return errors.New("closed") }

// TestPrequal_close checks that Close stops the probing, even with picks
// racing it, closes the prober once and returns its error, and leaves
// Pick working.
func TestPrequal_close(t *testing.T) {
	peers := makePeers(6, func(i int) string { return string(rune('a' + i)) }, nil)
	pr := &closingProber{t: t}
	b, err := NewPrequal(peers, WithProber(pr))
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := b.Pick(nil)
				if err == nil {
					_ = b.Done(p, Outcome{Latency: time.Millisecond})
				}
			}
		})
	}
	for pr.probes.Load() < 100 {
		time.Sleep(time.Millisecond) // wait for the pickers to run (a bounded real event)
	}
	assert.EqualError(t, b.Close(), "closed")
	pr.after.Store(true)
	close(stop)
	wg.Wait()
	assert.NoError(t, b.Close(), "a second Close does nothing")
	assert.Equal(t, int64(1), pr.closed.Load())
	for range 10 {
		p := mustPick(t, b, nil)
		require.NoError(t, b.Done(p, Outcome{}))
	}
	assert.Equal(t, 0, len(b.pool.e), "emptied")
}

// TestPrequal_removedPeer checks that Remove and Update drop a removed
// peer's answer, and refuse its later answers.
func TestPrequal_removedPeer(t *testing.T) {
	for _, how := range []string{"Remove", "Update"} {
		t.Run(how, func(t *testing.T) {
			clk := newFakeClock()
			peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
			b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}), WithProbeRate(0, 1))
			for _, p := range peers {
				answer(t, b, p, 0, ms(1), 0)
			}
			c := peers[2]
			if how == "Remove" {
				require.NoError(t, b.Remove(c))
			} else {
				require.NoError(t, b.Update([]*Peer{NewPeer("a"), NewPeer("b")}))
			}
			assert.Equal(t, -1, b.pool.indexLocked(c))
			assert.Equal(t, 2, len(b.pool.e))
			assert.False(t, prequalOf(c).inPool.Load())
			assert.ErrorIs(t, b.Answer(c, ProbeAnswer{}), ErrUnknownPeer)
			for range 20 {
				p := mustPick(t, b, nil)
				assert.NotSame(t, c, p)
				require.NoError(t, b.Done(p, Outcome{}))
			}
		})
	}
}

// syncProber answers every probe at once, inside Probe, with what answer
// says of the peer.
type syncProber struct {
	answer func(p *Peer) ProbeAnswer
}

func (s *syncProber) Probe(p *Peer, to ProbeReceiver) { _ = to.Answer(p, s.answer(p)) }

// TestPrequal_fastFailingIsNoSink runs 60 s of picks 10 ms apart over
// three healthy peers and x, which fails every attempt at once but answers
// every probe with 0 in flight and 0 latency: the best answer a pool can
// hold. nginx's rule bounds x's picks: with max_fails f and fail_timeout w,
// x takes at most f attempts before it is out for w, then one attempt (the
// probe after the window) per window, so at most f + T/w over T, the bound
// FastestFirst, which sends exactly that probe per window, reaches; the
// same loop runs FastestFirst, and Prequal must give x no more than it.
// With max_fails 0 nginx never takes x out, and only FastestFirst's count
// (its failure penalty) bounds it. (Prequal keeps a failed peer's answers
// out for fail_timeout, so x takes exactly nginx's attempts: 6 and 12
// here, FastestFirst's; with max_fails 0 one, its answers staying out
// until a success.)
func TestPrequal_fastFailingIsNoSink(t *testing.T) {
	const (
		T    = 60 * time.Second
		step = 10 * time.Millisecond
	)
	for _, tt := range []struct {
		maxFails int
		window   time.Duration
	}{{1, 10 * time.Second}, {3, 5 * time.Second}, {0, 10 * time.Second}} {
		t.Run("", func(t *testing.T) {
			run := func(newPicker func([]*Peer, *fakeClock) Balancer) int {
				clk := newFakeClock()
				peers := makePeers(4, func(i int) string { return string(rune('a' + i)) },
					func(int) []PeerOption { return []PeerOption{MaxFails(tt.maxFails), FailTimeout(tt.window)} })
				x := peers[3]
				b := newPicker(peers, clk)
				n := 0
				for range T / step {
					p := mustPick(t, b, nil)
					o := Outcome{Latency: 10 * time.Millisecond}
					if p == x {
						n++
						o = Outcome{Failed: true}
					}
					require.NoError(t, b.Done(p, o))
					clk.add(step)
				}
				return n
			}
			pq := run(func(peers []*Peer, clk *fakeClock) Balancer {
				x := peers[3]
				return newTestPrequal(t, clk, peers, WithProber(&syncProber{func(p *Peer) ProbeAnswer {
					if p == x {
						return ProbeAnswer{}
					}
					return ProbeAnswer{InFlight: float64(p.InFlight()), Latency: 10 * time.Millisecond, RoundTrip: time.Millisecond}
				}}))
			})
			ff := run(func(peers []*Peer, clk *fakeClock) Balancer {
				b, err := NewFastestFirst(peers, clk.opt(), WithRand(rand.NewPCG(1, 2)))
				require.NoError(t, err)
				return b
			})
			bound := tt.maxFails + int(T/tt.window)
			if tt.maxFails == 0 {
				bound = int(T / step) // nginx never takes x out: only FastestFirst's count bounds it
			}
			t.Logf("max_fails %d, fail_timeout %v: x picked %d times by Prequal, %d by FastestFirst, bound %d", tt.maxFails, tt.window, pq, ff, bound)
			assert.LessOrEqual(t, ff, bound, "FastestFirst within nginx's bound")
			assert.LessOrEqual(t, pq, bound)
			assert.LessOrEqual(t, pq, ff)
		})
	}
}

// TestPrequal_mixedPool checks how an unprobed peer (three failed probes in
// a row: a server without the probe handler) competes with a probed one:
// the pick compares the pool candidate's expected latency (estimate +
// round trip) with the unprobed peer's peak-EWMA cost (estimate × (in
// flight + 1)), both in ns, and the lower takes the attempt.
func TestPrequal_mixedPool(t *testing.T) {
	tests := []struct {
		name     string
		probed   time.Duration // a's answer: latency (round trip 2 ms)
		unprobed time.Duration // c's measured latency
		held     int           // c's attempts in flight
		want     string
	}{
		{"unprobed faster", ms(30), ms(10), 0, "c"},           // 10 < 32
		{"probed faster", ms(5), ms(10), 0, "a"},              // 7 < 10
		{"unprobed busy", ms(30), ms(10), 3, "a"},             // 10 × 4 = 40 > 32
		{"round trip decides", ms(9), ms(10), 0, "c"},         // 9 + 2 = 11 > 10
		{"a tie goes to the unprobed", ms(8), ms(10), 0, "c"}, // 8 + 2 = 10: the pool is not below
	}
	// c's probes fail: a pick first draws one of the two by weight and
	// gives c the attempt when it lands on c (silentShare), half the
	// picks, unless c has more in flight than a; otherwise the comparison
	// decides. So over fresh pickers c takes every pick where it is the
	// cheaper, about half where it is not, and none when it is busy.
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			toC := 0
			const trials = 200
			for seed := range uint64(trials) {
				if mixedPick(t, seed, tt.probed, tt.unprobed, tt.held) == "c" {
					toC++
				}
			}
			switch {
			case tt.want == "a" && tt.held > 0:
				// c's draws give it no share: more in flight than a.
				assert.Zero(t, toC)
			case tt.want == "c":
				// drawUnprobed gives up after 10 draws that miss c, one
				// pick in 2^10: a miss or two in 200 is that.
				assert.GreaterOrEqual(t, toC, trials-3)
			default:
				assert.InDelta(t, trials/2, toC, 30, "the silent peer's draws only")
			}
		})
	}
}

// mixedPick is one pick of TestPrequal_mixedPool's: a probed at the given
// latency (round trip 2 ms), c unprobed at its measured latency with held
// attempts in flight; the picker seeded with seed.
func mixedPick(t *testing.T, seed uint64, probed, unprobed time.Duration, held int) string {
	clk := newFakeClock()
	peers := makePeers(2, func(i int) string { return string(rune('a' + 2*i)) }, nil) // a, c
	a, c := peers[0], peers[1]
	b, err := NewPrequal(peers, clk.opt(), WithRand(rand.NewPCG(seed, 2)), WithProber(&queueProber{}), WithProbeRate(0, 1), WithHotQuantile(1))
	require.NoError(t, err)
	for range prequalProbeFails {
		require.NoError(t, b.Answer(c, ProbeAnswer{Failed: true}))
	}
	require.True(t, prequalOf(c).unprobed.Load())
	require.Equal(t, int64(1), b.unprobed.Load())
	// c's latency, measured by an attempt, and its attempts held.
	require.NoError(t, b.SetDown(a, true))
	require.Same(t, c, mustPick(t, b, nil))
	require.NoError(t, b.Done(c, Outcome{Latency: unprobed}))
	for range held {
		require.Same(t, c, mustPick(t, b, nil))
	}
	require.NoError(t, b.SetDown(a, false))
	answer(t, b, a, 0, probed, ms(2))
	return mustPick(t, b, nil).Addr()
}

// asyncProber queues probes in a fixed ring (no allocation once made) and
// answers them when drained, as a transport would from its own goroutine.
type asyncProber struct {
	mu   sync.Mutex
	ring [256]*Peer
	n    int
	to   ProbeReceiver
	// drained counts the probes drain has answered.
	drained atomic.Int64
}

func (q *asyncProber) Probe(p *Peer, to ProbeReceiver) {
	q.mu.Lock()
	if q.n < len(q.ring) {
		q.ring[q.n] = p
		q.n++
		q.to = to
	}
	q.mu.Unlock()
}

// drain answers every queued probe with the peer's own in-flight count.
func (q *asyncProber) drain(lat time.Duration) {
	q.mu.Lock()
	var batch [256]*Peer
	n := copy(batch[:], q.ring[:q.n])
	q.n = 0
	to := q.to
	q.mu.Unlock()
	for _, p := range batch[:n] {
		_ = to.Answer(p, ProbeAnswer{InFlight: float64(p.InFlight()), Latency: lat, RoundTrip: lat / 10})
	}
	q.drained.Add(int64(n))
}

// TestPrequal_allocs checks that Pick, Done and Answer allocate nothing,
// with a prober that answers inside Probe and with one that queues.
func TestPrequal_allocs(t *testing.T) {
	peers := makePeers(100, func(i int) string { return string(rune('a'+i%26)) + string(rune('a'+i/26)) }, nil)
	sp := &syncProber{func(p *Peer) ProbeAnswer {
		return ProbeAnswer{InFlight: float64(p.InFlight()), Latency: time.Millisecond, RoundTrip: 100 * time.Microsecond}
	}}
	// The per-second cap lifted: at the loop's pace every pick probes.
	b, err := NewPrequal(peers, WithProber(sp), WithProbeRate(3, 1e9))
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		p, err := b.Pick(nil)
		if err == nil {
			_ = b.Done(p, Outcome{Latency: time.Millisecond})
		}
	})
	assert.Zero(t, allocs, "Pick+Done, answering inside Probe")
	assert.Equal(t, uint64(3*1001), b.ProbeStats().Answered, "every pick probed and was answered")
	assert.Zero(t, b.ProbeStats().RateLimited)

	q := &asyncProber{}
	peers = makePeers(100, func(i int) string { return string(rune('a'+i%26)) + string(rune('a'+i/26)) }, nil)
	b, err = NewPrequal(peers, WithProber(q), WithProbeRate(3, 1e9))
	require.NoError(t, err)
	allocs = testing.AllocsPerRun(1000, func() {
		p, err := b.Pick(nil)
		if err == nil {
			_ = b.Done(p, Outcome{Latency: time.Millisecond, Failed: p == peers[7]})
		}
		q.drain(time.Millisecond)
	})
	assert.Zero(t, allocs, "Pick+Done+Answer, queued")
	a := ProbeAnswer{InFlight: 2, Latency: time.Millisecond}
	allocs = testing.AllocsPerRun(1000, func() { _ = b.Answer(peers[3], a) })
	assert.Zero(t, allocs, "Answer")
}

// TestPrequal_concurrent runs picks, reports, answers from other
// goroutines and list changes at once (go test -race), then checks that
// every attempt was reported and the counters add up.
func TestPrequal_concurrent(t *testing.T) {
	fixed := makePeers(6, func(i int) string { return string(rune('a' + i)) }, nil)
	q := &asyncProber{}
	b, err := NewPrequal(fixed, WithProber(q), WithProbePool(4, time.Second))
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Go(func() { // answers
		for {
			select {
			case <-stop:
				return
			default:
			}
			q.drain(time.Millisecond)
			runtime_Gosched()
		}
	})
	wg.Go(func() { // list changes
		extra := NewPeer("x")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%2 == 0 {
				_ = b.Add(extra)
			} else {
				_ = b.Remove(extra)
			}
			_ = b.Update(append(append([]*Peer{}, fixed...), NewPeer("y")))
			_ = b.SetDown(fixed[i%6], i%3 == 0)
			runtime_Gosched()
		}
	})
	var picks atomic.Int64
	var pickers sync.WaitGroup
	for g := range 4 {
		pickers.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			// 2000 picks, and more until some answers have come back while
			// picks ran: on a loaded machine the answering goroutine may
			// not run at all during the first 2000.
			for i := 0; i < 2000 || q.drained.Load() < 100 && i < 1_000_000; i++ {
				p, err := b.Pick(nil)
				if err != nil {
					continue
				}
				picks.Add(1)
				_ = b.Done(p, Outcome{Latency: time.Duration(rng.IntN(2000)) * time.Microsecond, Failed: rng.IntN(20) == 0})
			}
		})
	}
	pickers.Wait()
	close(stop)
	wg.Wait()
	for _, p := range b.Peers() {
		assert.Zero(t, p.InFlight(), "%s: every attempt reported", p.Addr())
	}
	s := b.ProbeStats()
	assert.LessOrEqual(t, s.Answered+s.Failed+s.Unknown+s.Late, s.Sent, "at most one answer a probe: %+v", s)
	assert.NotZero(t, s.Answered)
	require.NoError(t, b.Close())
}

// runtime_Gosched yields, for the background loops of the tests.
func runtime_Gosched() { runtime.Gosched() }

// TestPrequal_rifRing checks the recent counts' quantile against one
// computed from scratch: the last 64 values (or all, if fewer), sorted,
// the ⌈q·n⌉-th smallest.
func TestPrequal_rifRing(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	var ring rifRing
	var all []float64
	for i := range 300 {
		x := float64(r.IntN(12))
		if i%7 == 0 {
			x = r.Float64() * 100
		}
		ring.add(x)
		all = append(all, x)
		last := append([]float64(nil), all[max(0, len(all)-rifRingSize):]...)
		slices.Sort(last)
		for _, q := range []float64{0.01, 0.3, 0.5, 0.6, 0.84, 1} {
			k := int(math.Ceil(q*float64(len(last)))) - 1
			require.Equal(t, last[max(k, 0)], ring.quantile(q), "after %d values, q %v", i+1, q)
		}
	}
	assert.Equal(t, math.Inf(1), (&rifRing{}).quantile(0.5), "none: nothing hot")
}

// TestPrequal_readmitsRecovered runs x failing fast for the first 30 s,
// then healthy, among three healthy peers, picks 10 ms apart, max_fails 1,
// fail_timeout 10 s, every peer answering probes with its in-flight count
// and 10 ms. nginx probes x once its window has passed, so by 30 s + 10 s
// its next attempt succeeds and readmits it; from 41 s to 60 s it must
// then take a fair part of the picks: at least half its share of a
// quarter. (Keeping its answers out until a success would leave it to
// P2CPeakEWMA's rule, where its failure penalty of 5 s decays for about
// 55 s before it wins a draw.)
func TestPrequal_readmitsRecovered(t *testing.T) {
	const step = 10 * time.Millisecond
	clk := newFakeClock()
	start := clk.now()
	peers := makePeers(4, func(i int) string { return string(rune('a' + i)) }, nil)
	x := peers[3]
	b := newTestPrequal(t, clk, peers, WithProber(&syncProber{func(p *Peer) ProbeAnswer {
		return ProbeAnswer{InFlight: float64(p.InFlight()), Latency: 10 * time.Millisecond, RoundTrip: time.Millisecond}
	}}))
	late, all := 0, 0
	for i := range 6000 {
		at := time.Duration(i) * step
		p := mustPick(t, b, nil)
		o := Outcome{Latency: 10 * time.Millisecond}
		if p == x && at < 30*time.Second {
			o = Outcome{Failed: true}
		}
		if at >= 41*time.Second {
			all++
			if p == x {
				late++
			}
		}
		require.NoError(t, b.Done(p, o))
		clk.set(start.Add(at + step))
	}
	t.Logf("x: %d of %d picks in [41 s, 60 s)", late, all)
	assert.GreaterOrEqual(t, late, all/8)
}

// TestPrequal_unprobedKeepsItsShare: a server whose probes fail (one
// without the probe handler), exactly as fast as four that answer, keeps
// a share of the picks near its fifth. Every attempt's latency is drawn
// from one exponential of mean 2 ms; the probed peers answer 0 in flight,
// 2 ms, round trip 0.1 ms. The unprobed peer's mean (2 ms) then competes
// with the pool's best candidate (2.1 ms scaled by the local count), so
// it wins about as often as a probed one. On the peak EWMA it lost almost
// every pick (7 of 20,000 on the code before): this test fails there.
func TestPrequal_unprobedKeepsItsShare(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(5, func(i int) string { return string(rune('a' + i)) }, nil) // a..d probed, e not
	pr := proberFunc(func(p *Peer, to ProbeReceiver) {
		if p.Addr() == "e" {
			_ = to.Answer(p, ProbeAnswer{Failed: true})
			return
		}
		_ = to.Answer(p, ProbeAnswer{Latency: ms(2), RoundTrip: 100 * time.Microsecond})
	})
	b := newTestPrequal(t, clk, peers, WithProber(pr))
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 20000
	counts := map[string]int{}
	for range n {
		p := mustPick(t, b, nil)
		counts[p.Addr()]++
		clk.add(200 * time.Microsecond)
		require.NoError(t, b.Done(p, Outcome{Latency: time.Duration(rng.ExpFloat64() * float64(ms(2)))}))
	}
	t.Logf("picks: %v", counts)
	require.True(t, prequalOf(peers[4]).unprobed.Load())
	assert.Greater(t, counts["e"], n/10, "the unprobed peer's share: at least half its fifth")
	assert.Less(t, counts["e"], n/2, "nor a sink")
}

// TestPrequal_closeRacingAnswers: answers that race Close never refill
// the pool once Close has returned, so Pick goes on as P2CPeakEWMA at
// once (before, 24 of 300 trials left answers in it).
func TestPrequal_closeRacingAnswers(t *testing.T) {
	for trial := range 200 {
		peers := makePeers(3, func(i int) string { return string(rune('a' + i)) }, nil)
		b, err := NewPrequal(peers, WithProber(&queueProber{}))
		require.NoError(t, err)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range 3 {
			wg.Go(func() {
				<-start
				for range 200 {
					_ = b.Answer(peers[i], ProbeAnswer{Latency: time.Millisecond})
				}
			})
		}
		close(start)
		for range trial % 20 {
			runtime.Gosched()
		}
		require.NoError(t, b.Close())
		wg.Wait()
		require.Zero(t, b.pool.n.Load(), "trial %d: answers in the pool after Close", trial)
	}
}
