package balancer

import (
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/internal/defaults"
)

// P2CPeakEWMA's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("P2CPeakEWMA", fuzzTrait{zeroWeight: zwEligible})

// newTestP2C returns a P2CPeakEWMA over peers on clk with a seeded source.
func newTestP2C(t *testing.T, clk *fakeClock, peers []*Peer, opts ...Option) *P2CPeakEWMA {
	t.Helper()
	opts = append([]Option{clk.opt(), WithRand(rand.NewPCG(1, 2))}, opts...)
	b, err := NewP2CPeakEWMA(peers, opts...)
	require.NoError(t, err)
	return b
}

// p2cMeasure feeds one latency sample for p into its picker's estimate at the
// clock's time, as a Done would, without an attempt in flight.
func p2cMeasure(s *peerSet, p *Peer, at time.Time, lat time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	latOf(p).observe(at.UnixNano(), float64(lat), float64(defaults.Decay))
}

func TestPeakEWMA_observe(t *testing.T) {
	tau := float64(10 * time.Second)
	ms := float64(time.Millisecond)
	halfLife := time.Duration(tau * math.Ln2)
	tests := []struct {
		name   string
		first  float64       // first sample, at time 0
		dt     time.Duration // time of the second sample
		second float64
		want   float64
	}{
		{"first sample taken as is", 0, 0, 40 * ms, 40 * ms},
		{"higher sample replaces at once", 40 * ms, time.Millisecond, 90 * ms, 90 * ms},
		{"lower sample after τ weighs 1-1/e", 90 * ms, 10 * time.Second, 10 * ms, 90*ms/math.E + 10*ms*(1-1/math.E)},
		{"lower sample after τ·ln2 weighs one half", 90 * ms, halfLife, 10 * ms, 50 * ms},
		{"lower sample at the same instant changes nothing", 90 * ms, 0, 10 * ms, 90 * ms},
		{"clock stepping back counts as no time", 90 * ms, -time.Second, 10 * ms, 90 * ms},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s latencyStats
			if tt.first != 0 {
				s.observe(0, tt.first, tau)
			}
			s.observe(int64(tt.dt), tt.second, tau)
			assert.InDelta(t, tt.want, s.estimate(), 1, "estimate (ns)")
			assert.Equal(t, int64(tt.dt), s.stamp.Load(), "stamp")
		})
	}
}

func TestP2CPeakEWMA_options(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"clock, rand, decay, penalty", []Option{WithClock(time.Now), WithRand(rand.NewPCG(1, 2)), WithDecay(time.Second), WithFailurePenalty(time.Second)}, true},
		{"warm-up is not used", []Option{WithWarmup(time.Second)}, false},
		{"zero decay", []Option{WithDecay(0)}, false},
		{"negative decay", []Option{WithDecay(-time.Second)}, false},
		{"zero penalty", []Option{WithFailurePenalty(0)}, false},
		{"nil rand", []Option{WithRand(nil)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewP2CPeakEWMA(weighted(1, 1), tt.opts...)
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
		})
	}
}

// With two peers both are always drawn, so the picks follow the cost rule
// alone: the next attempt goes to the lower of latency × (in flight + 1).
func TestP2CPeakEWMA_lowerCostWins(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestP2C(t, clk, peers)
	lat := []float64{10, 26} // ms; no two products tie over these picks
	for i, p := range peers {
		p2cMeasure(&b.peerSet, p, clk.now(), time.Duration(lat[i]*float64(time.Millisecond)))
	}
	var inflight [2]float64
	for k := range 30 {
		want := 0
		if lat[1]*(inflight[1]+1) < lat[0]*(inflight[0]+1) {
			want = 1
		}
		inflight[want]++
		got := mustPick(t, b, nil)
		assert.Equal(t, peers[want].Addr(), got.Addr(), "pick %d", k)
	}
}

// An idle peer's estimate decays toward zero, so a peer whose last reply is
// old gets tried again (Finagle's load read): 20 ms measured τ·ln4 ago costs
// 5 ms now and beats 10 ms measured now.
func TestP2CPeakEWMA_idleCostDecays(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestP2C(t, clk, peers)
	p2cMeasure(&b.peerSet, peers[1], clk.now(), 20*time.Millisecond)
	clk.add(time.Duration(float64(defaults.Decay) * math.Log(4)))
	p2cMeasure(&b.peerSet, peers[0], clk.now(), 10*time.Millisecond)
	now := clk.now().UnixNano()
	_, c := b.cost(peers[1], p2cOf(peers[1]), now, &lazyClock{t: now, ok: true})
	assert.InDelta(t, float64(5*time.Millisecond), c, 1)
	assert.Equal(t, "b", mustPick(t, b, nil).Addr())
}

// An unmeasured peer costs nothing while idle, then is probed one attempt
// at a time until its first reply.
func TestP2CPeakEWMA_unmeasuredProbedOneAtATime(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	a, nb := peers[0], peers[1]
	b := newTestP2C(t, clk, peers)
	p2cMeasure(&b.peerSet, a, clk.now(), 100*time.Millisecond)

	assert.Equal(t, "b", mustPick(t, b, nil).Addr(), "idle unmeasured peer costs 0")
	for k := range 5 {
		// a's cost grows with every attempt left in flight; b still loses.
		assert.Equal(t, "a", mustPick(t, b, nil).Addr(), "pick %d while b's probe is out", k)
	}
	require.NoError(t, b.Done(nb, Outcome{Latency: 50 * time.Millisecond}))
	// b: 50 ms × 1 against a: 100 ms × 6.
	assert.Equal(t, "b", mustPick(t, b, nil).Addr())
}

// Two peers both waiting for their first reply compare by in-flight count,
// so they share the attempts evenly.
func TestP2CPeakEWMA_twoProbesCompareInFlight(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestP2C(t, clk, peers)
	for k := 1; k <= 10; k++ {
		mustPick(t, b, nil)
		if k%2 == 0 {
			assert.Equal(t, k/2, peers[0].InFlight(), "after %d picks", k)
			assert.Equal(t, k/2, peers[1].InFlight(), "after %d picks", k)
		}
	}
}

// A failure counts as at least the penalty, so a peer failing in 1 ms looks
// slower than one answering in 10 ms instead of faster.
func TestP2CPeakEWMA_fastFailureIsPenalized(t *testing.T) {
	tests := []struct {
		name    string
		opts    []Option
		penalty time.Duration
	}{
		{"default penalty", nil, defaults.FailurePenalty},
		{"custom penalty", []Option{WithFailurePenalty(time.Second)}, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := []*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0))}
			b := newTestP2C(t, clk, peers, tt.opts...)
			p2cMeasure(&b.peerSet, peers[0], clk.now(), 10*time.Millisecond)
			p2cMeasure(&b.peerSet, peers[1], clk.now(), 10*time.Millisecond)
			peers[1].pick() // an attempt on b, as Pick would count it
			require.NoError(t, b.Done(peers[1], Outcome{Failed: true, Latency: time.Millisecond}))
			assert.InDelta(t, float64(tt.penalty), latOf(peers[1]).estimate(), 1)
			for k := range 10 {
				assert.Equal(t, "a", mustPick(t, b, nil).Addr(), "pick %d", k)
			}
		})
	}
}

// The latency of a slow failure is kept when it exceeds the penalty.
func TestP2CPeakEWMA_slowFailureKeepsItsLatency(t *testing.T) {
	clk := newFakeClock()
	peers := []*Peer{NewPeer("a", MaxFails(0))}
	b := newTestP2C(t, clk, peers)
	p := mustPick(t, b, nil)
	require.NoError(t, b.Done(p, Outcome{Failed: true, Latency: 8 * time.Second}))
	assert.InDelta(t, float64(8*time.Second), latOf(p).estimate(), 1)
}

func TestP2CPeakEWMA_failureModel(t *testing.T) {
	t.Run("fail window, then one probe", func(t *testing.T) {
		clk := newFakeClock()
		peers := weighted(1, 1)
		a, pb := peers[0], peers[1]
		b := newTestP2C(t, clk, peers)
		require.NoError(t, b.SetDown(a, true))
		p := mustPick(t, b, nil)
		require.Equal(t, pb, p)
		require.NoError(t, b.Done(p, Outcome{Failed: true}))

		clk.add(defaults.FailTimeout) // nginx compares with <=: still out
		_, err := b.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer)

		clk.add(time.Second) // past the window: one probe
		probe := mustPick(t, b, nil)
		assert.Equal(t, pb, probe)
		_, err = b.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer, "second attempt while the probe is out")
		require.NoError(t, b.Done(probe, Outcome{Latency: time.Millisecond}))
		assert.Equal(t, pb, mustPick(t, b, nil), "a successful probe clears the failures")
	})
	t.Run("backup when no primary is eligible", func(t *testing.T) {
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a"), NewPeer("b"), NewPeer("c", Backup()), NewPeer("d", Backup())}
		b := newTestP2C(t, clk, peers)
		var r Request
		p := mustPick(t, b, &r)
		require.NoError(t, b.Done(p, Outcome{Failed: true}))
		q := mustPick(t, b, &r)
		assert.NotEqual(t, p, q, "a retry goes to the other primary")
		require.NoError(t, b.Done(q, Outcome{Failed: true}))
		x := mustPick(t, b, &r)
		assert.True(t, x.IsBackup(), "then to a backup, got %v", x)
	})
	t.Run("tries bound the attempts", func(t *testing.T) {
		clk := newFakeClock()
		b := newTestP2C(t, clk, []*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0))})
		var r Request
		for range 2 {
			p := mustPick(t, b, &r)
			require.NoError(t, b.Done(p, Outcome{Failed: true}))
		}
		_, err := b.Pick(&r)
		assert.ErrorIs(t, err, ErrTriesExhausted)
	})
	t.Run("max_conns", func(t *testing.T) {
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a", MaxConns(1)), NewPeer("b")}
		b := newTestP2C(t, clk, peers)
		p2cMeasure(&b.peerSet, peers[0], clk.now(), time.Millisecond)
		p2cMeasure(&b.peerSet, peers[1], clk.now(), time.Second)
		assert.Equal(t, "a", mustPick(t, b, nil).Addr())
		assert.Equal(t, "b", mustPick(t, b, nil).Addr(), "a is full")
	})
	t.Run("single peer ignores max_fails", func(t *testing.T) {
		clk := newFakeClock()
		b := newTestP2C(t, clk, []*Peer{NewPeer("a")})
		p := mustPick(t, b, nil)
		require.NoError(t, b.Done(p, Outcome{Failed: true}))
		assert.Equal(t, p, mustPick(t, b, nil))
	})
	t.Run("no peers, all down", func(t *testing.T) {
		clk := newFakeClock()
		b := newTestP2C(t, clk, nil)
		_, err := b.Pick(nil)
		assert.ErrorIs(t, err, ErrNoPeers)
		require.NoError(t, b.Add(NewPeer("a", Down()), NewPeer("b", Down())))
		_, err = b.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer)
	})
}

// When the draws keep landing on ineligible peers, the pick counts the
// eligible ones and draws among them: it still finds them, both of them.
func TestP2CPeakEWMA_fewEligible(t *testing.T) {
	clk := newFakeClock()
	var peers []*Peer
	for i := range 40 {
		var opts []PeerOption
		if i != 7 && i != 31 {
			opts = append(opts, Down())
		}
		peers = append(peers, NewPeer(string(rune('A'+i)), opts...))
	}
	b := newTestP2C(t, clk, peers)
	got := map[string]int{}
	for range 200 {
		p := mustPick(t, b, nil)
		got[p.Addr()]++
		require.NoError(t, b.Done(p, Outcome{Latency: time.Millisecond}))
	}
	assert.Len(t, got, 2)
	assert.Positive(t, got[peers[7].Addr()])
	assert.Positive(t, got[peers[31].Addr()])
}

// Pairs are two distinct peers, each drawn in proportion to its weight:
// P(first = i) = w_i/W and P(second = j | first = i) = w_j/(W − w_i).
func TestP2CPeakEWMA_drawPairDistribution(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
	}{
		{"uniform", []int{1, 1, 1, 1}},
		{"weighted", []int{1, 2, 3, 4}},
		{"one weightless", []int{0, 2, 3, 5}},
	}
	const n = 200000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestP2C(t, newFakeClock(), weighted(tt.weights...))
			d := &b.draw.Load().primary
			var total float64
			for _, w := range tt.weights {
				total += float64(w)
			}
			k := len(tt.weights)
			counts := make([]float64, k*k)
			bad := 0
			for range n {
				a, c := b.drawPair(d, k)
				if a == c || c < 0 {
					bad++
					continue
				}
				counts[a*k+c]++
			}
			require.Zero(t, bad, "pairs that are not two distinct peers")
			for i, wi := range tt.weights {
				for j, wj := range tt.weights {
					if i == j {
						continue
					}
					want := float64(wi) / total * float64(wj) / (total - float64(wi))
					assert.InDelta(t, want, counts[i*k+j]/n, 0.005, "pair (%d,%d)", i, j)
				}
			}
		})
	}
}

// Ties go to the first drawn peer, so with every cost equal the picks follow
// the draws: shares proportional to the weights.
func TestP2CPeakEWMA_sharesFollowWeightsOnTies(t *testing.T) {
	ws := []int{1, 2, 3, 4}
	b := newTestP2C(t, newFakeClock(), weighted(ws...))
	got := map[string]float64{}
	const n = 20000
	for range n {
		p := mustPick(t, b, nil)
		got[p.Addr()]++
		// Zero latency: every estimate, and so every cost, stays 0.
		require.NoError(t, b.Done(p, Outcome{}))
	}
	for i, w := range ws {
		assert.InDelta(t, float64(w)/10, got[string(rune('a'+i))]/n, 0.02, "peer %d", i)
	}
}

// A peer added, or removed and added again, starts unmeasured.
func TestP2CPeakEWMA_newPeerStartsUnmeasured(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestP2C(t, clk, peers)
	p2cMeasure(&b.peerSet, peers[1], clk.now(), time.Second)
	require.NoError(t, b.Remove(peers[1]))
	require.NoError(t, b.Add(peers[1]))
	assert.False(t, latOf(peers[1]).measured.Load())
}

func TestP2CPeakEWMA_doneErrors(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestP2C(t, clk, peers)
	p := mustPick(t, b, nil)
	assert.ErrorIs(t, b.Done(p, Outcome{Latency: -1}), ErrInvalidLatency)
	require.NoError(t, b.Done(p, Outcome{}))
	assert.ErrorIs(t, b.Done(p, Outcome{}), ErrNotInFlight)
	assert.ErrorIs(t, b.Done(NewPeer("x"), Outcome{}), ErrUnknownPeer)

	q := mustPick(t, b, nil)
	require.NoError(t, b.Remove(q))
	assert.NoError(t, b.Done(q, Outcome{}), "removed while in flight: ends the attempt")
	assert.ErrorIs(t, b.Done(q, Outcome{}), ErrUnknownPeer, "reported twice after removal")
}

func TestP2CPeakEWMA_pickAllocs(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
	}{
		{"seeded", []Option{WithRand(rand.NewPCG(3, 4))}},
		{"runtime rand", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewP2CPeakEWMA(weighted(1, 2, 3, 4, 5), tt.opts...)
			require.NoError(t, err)
			var r Request
			allocs := testing.AllocsPerRun(1000, func() {
				r.Reset()
				p, err := b.Pick(&r)
				if err == nil {
					err = b.Done(p, Outcome{Latency: time.Millisecond})
				}
				if err != nil {
					panic(err)
				}
			})
			assert.Zero(t, allocs)
		})
	}
}

// Run with -race: picks and reports from many goroutines.
func TestP2CPeakEWMA_concurrent(t *testing.T) {
	// No failure accounting, so that no pick finds every peer out.
	ws := []int{1, 1, 2, 3}
	peers := makePeers(len(ws), letter, func(i int) []PeerOption { return []PeerOption{Weight(ws[i]), MaxFails(0)} })
	b, err := NewP2CPeakEWMA(peers, WithRand(rand.NewPCG(5, 6)))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 500 {
				p, err := b.Pick(nil)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, b.Done(p, Outcome{Latency: time.Duration(k%7) * time.Millisecond, Failed: k%50 == g}))
			}
		})
	}
	wg.Wait()
	for _, p := range b.Peers() {
		assert.Zero(t, p.InFlight())
	}
}

// maxSource always returns 2^64−1: rand.Rand's Int64N(n) draws it as n−1,
// so a uniform pair's first draw is the last peer.
type maxSource struct{}

func (maxSource) Uint64() uint64 { return math.MaxUint64 }

// A peer that goes down, or loses weight, between the exact draw's count of
// the eligible peers and its pass over them must not make the pick find no
// live peer while another is eligible throughout. Peers a, b (one failure
// of max_fails 2: eligible, and the first to read the clock) and c (down);
// maxSource draws c first every time, so the pick reaches the exact draw,
// counts a and b, and in b's clock read the change hits a. The count then
// holds a's old weight and the pass draws the last unit of it, w − 1: past
// b's range in the pass, since a's weight has shrunk or gone. b stays
// eligible, so ErrNoLivePeer would break its contract: the answer is b,
// or a if it is still up (its weight dropped) and wins the pair.
func TestP2CPeakEWMA_exactDrawRacesAChange(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight int // a's weight before the change
		change func(b *P2CPeakEWMA, a *Peer) error
		want   []string // the peers the pick may return
	}{
		{"a goes down", 1, func(b *P2CPeakEWMA, a *Peer) error { return b.SetDown(a, true) }, []string{"b"}},
		{"a's weight drops", 3, func(b *P2CPeakEWMA, a *Peer) error { return b.SetWeight(a, 1) }, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			peers := []*Peer{
				NewPeer("a", Weight(tc.weight)),
				NewPeer("b", MaxFails(2)),
				NewPeer("c", Weight(tc.weight)),
			}
			var (
				p     *P2CPeakEWMA
				armed bool
				fired int
			)
			clock := func() time.Time {
				if armed {
					armed = false
					fired++
					require.NoError(t, tc.change(p, peers[0]))
				}
				return time.Unix(100, 0)
			}
			var err error
			p, err = NewP2CPeakEWMA(peers, WithClock(clock), WithRand(maxSource{}))
			require.NoError(t, err)
			require.NoError(t, p.SetDown(peers[2], true))
			require.NoError(t, p.Done(mustPickPeer(t, p, peers[1]), Outcome{Failed: true, Latency: time.Millisecond}))
			require.EqualValues(t, 1, peers[1].fails.Load(), "b has one failure, below max_fails")

			armed = true
			q, err := p.Pick(nil)
			require.Equal(t, 1, fired, "the change ran inside the pick")
			require.NoError(t, err, "b was eligible throughout")
			assert.Contains(t, tc.want, q.Addr())
		})
	}
}

// mustPickPeer picks from p until it returns want, at most 100 times,
// reporting the other picks as successes.
func mustPickPeer(t *testing.T, p Picker, want *Peer) *Peer {
	t.Helper()
	for range 100 {
		q := mustPick(t, p, nil)
		if q == want {
			return q
		}
		require.NoError(t, p.Done(q, Outcome{Latency: time.Millisecond}))
	}
	t.Fatalf("no pick of %s in 100", want.Addr())
	return nil
}
