package balancer

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ClassicWRR's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("ClassicWRR", fuzzTrait{cycle: cycleWeights, zeroWeight: zwEligible, cwInRange: true})

func TestClassicWRR_trace(t *testing.T) {
	want := []struct {
		pick string
		cw   []int
	}{
		{"b", []int{5, 0, 2}},
		{"c", []int{5, 0, 1}},
		{"a", []int{4, 0, 1}},
		{"a", []int{3, 0, 1}},
		{"a", []int{2, 0, 1}},
		{"c", []int{2, 0, 0}},
		{"a", []int{1, 0, 0}},
		{"a", []int{0, 0, 0}},
	}
	t.Run("scan", func(t *testing.T) {
		s, err := NewClassicWRR(weighted(5, 1, 2))
		require.NoError(t, err)
		for step, w := range want {
			assert.Equal(t, w.pick, picks(t, s, 1, pickLocked), "step %d", step)
			assert.Equal(t, w.cw, currentWeights(s.Peers()), "step %d", step)
		}
	})
	t.Run("cycle", func(t *testing.T) {
		// k picks from the cycle, over two rounds: the current weights
		// it implies, then the exact state it leaves when it closes.
		for k := 1; k <= 2*len(want); k++ {
			s, err := NewClassicWRR(weighted(5, 1, 2))
			require.NoError(t, err)
			picks(t, s, k)
			cw := want[(k-1)%len(want)].cw
			assert.Equal(t, cw, currentWeights(s.Peers()), "implied after %d picks", k)
			s.mu.Lock()
			s.closeLocked()
			s.mu.Unlock()
			assert.Equal(t, cw, currentWeights(s.Peers()), "closed after %d picks", k)
		}
	})
}

// TestClassicWRR_derived checks sequences derived by hand from the
// selector, for cases the recorded vectors do not cover.
func TestClassicWRR_derived(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		want    string
	}{
		// Sorted b(3), a(2); the weight ratio is 3000/2 = 1500.
		// [b3 a2]: 3000/2=1500 > 1500? no, so the last, a.
		// [b3 a1]: 3000/1 > 1500: b. [b2 a1]: 2000 > 1500: b.
		// [b1 a1]: 1000 > 1500? no: a. [b1 a0]: only b.
		{"sorted-reversed", []int{2, 3}, "a b b a b a b b a b"},
		// Sorted a(5), b(3); the ratio is 5000/3 = 1666.
		// [5 3] 1666: b. [5 2] 2500: a. [4 2] 2000: a. [3 2] 1500: b.
		// [3 1] 3000: a. [2 1] 2000: a. [1 1] 1000: b. [1 0]: a.
		{"5-3", []int{5, 3}, "b a a b a a b a b a a b a a b a"},
		// nginx's integer division decides. Ratio 180000/160 = 1125.
		// [180 160] 1125 ≯ 1125: b. [180 159] 1132 > 1125: a.
		// [179 159] 179000/159 = 1125.8 floors to 1125 ≯ 1125: b,
		// where exact fractions (179/159 > 180/160) would give a.
		{"rounding", []int{180, 160}, "b a b"},
		// A zero weight never has a current weight above 0.
		{"zero-and-two", []int{0, 2}, "b b b b"},
		// No weight at all: after the reset nothing is above 0 either,
		// and, as nginx returned peer 0, the first in sorted order.
		{"all-zero", []int{0, 0}, "a a a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewClassicWRR(weighted(tt.weights...))
			require.NoError(t, err)
			n := len(strings.Fields(tt.want))
			assert.Equal(t, tt.want, picks(t, s, n), "cycle")
			s, err = NewClassicWRR(weighted(tt.weights...))
			require.NoError(t, err)
			assert.Equal(t, tt.want, picks(t, s, n, pickLocked), "scan")
		})
	}
}

// TestClassicWRR_period checks the period property, every W = Σweight picks
// giving each peer exactly its weight, and that the cycle gives the same
// sequence as the exact scan: on the configurations of the recorded nginx
// 1.2.0 vectors (whose sequences the conformance test replays through the
// cycle), then on random weights with some peers down.
func TestClassicWRR_period(t *testing.T) {
	type config struct {
		ws   []int
		down []bool
	}
	configs := []config{
		{[]int{5, 1, 1}, nil},
		{[]int{5, 1, 2}, nil},
		{[]int{1, 1, 1}, nil},
		{[]int{3, 2, 1}, nil},
		{[]int{4, 3, 2, 1}, nil},
		{[]int{1, 5}, nil},
		{[]int{2, 2, 1}, nil},
		{[]int{2, 1, 3}, []bool{true, false, false}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for range 200 {
		n := 1 + rng.IntN(10)
		c := config{make([]int, n), make([]bool, n)}
		for i := range c.ws {
			c.ws[i] = 1 + rng.IntN(20)
			c.down[i] = n > 1 && rng.IntN(5) == 0
		}
		configs = append(configs, c)
	}
	for _, c := range configs {
		c.down = append(c.down, make([]bool, len(c.ws)-len(c.down))...)
		total := 0
		for i, w := range c.ws {
			if !c.down[i] {
				total += w
			}
		}
		if total == 0 {
			continue
		}
		build := func() (*ClassicWRR, []*Peer) {
			peers := weighted(c.ws...)
			for i, p := range peers {
				if c.down[i] {
					Down()(p)
				}
			}
			s, err := NewClassicWRR(peers)
			require.NoError(t, err)
			return s, peers
		}
		s, peers := build()
		seq := picks(t, s, 3*total)
		for round := range 3 {
			count := map[string]int{}
			for _, a := range strings.Fields(seq)[round*total : (round+1)*total] {
				count[a]++
			}
			for i, p := range peers {
				want := c.ws[i]
				if c.down[i] {
					want = 0
				}
				require.Equal(t, want, count[p.Addr()], "weights %v down %v round %d peer %s", c.ws, c.down, round, p)
			}
		}
		exact, _ := build()
		require.Equal(t, seq, picks(t, exact, 3*total, pickLocked), "weights %v down %v", c.ws, c.down)
	}
}

// TestClassicWRR_failurePenalty: a failure costs the peer weight/max_fails
// of its round, then the next round starts whole.
func TestClassicWRR_failurePenalty(t *testing.T) {
	peers := []*Peer{NewPeer("a", Weight(5), MaxFails(2)), NewPeer("b", MaxFails(2)), NewPeer("c", MaxFails(2))}
	s, err := NewClassicWRR(peers)
	require.NoError(t, err)
	assert.Equal(t, "c b", picks(t, s, 2))
	p, err := s.Pick(nil)
	require.NoError(t, err)
	require.Equal(t, "a", p.Addr())
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	st := p.State()
	// Picked at 5 → 4, then 4 − 5/2 = 2.
	assert.Equal(t, 2, st.CurrentWeight)
	assert.Equal(t, 5, st.EffectiveWeight, "no effective weight in the classic algorithm")
	assert.Equal(t, 1, st.Fails, "below max_fails: still eligible")
	// a spends its 2, then a whole round c b a a a a a.
	assert.Equal(t, "a a c b a a a a a", picks(t, s, 9))

	t.Run("clamped", func(t *testing.T) {
		a := NewPeer("a", Weight(3), MaxFails(0))
		b := NewPeer("b", Weight(2), MaxFails(1))
		s, err := NewClassicWRR([]*Peer{a, b}, newFakeClock().opt())
		require.NoError(t, err)
		// Sorted a(3), b(2), ratio 1500: [3 2] 1500 ≯ 1500: b.
		p, err := s.Pick(nil)
		require.NoError(t, err)
		require.Same(t, b, p)
		require.NoError(t, s.Done(p, Outcome{Failed: true}))
		assert.Equal(t, 0, b.State().CurrentWeight, "1 − 2/1 clamped at 0")
		p, err = s.Pick(nil)
		require.NoError(t, err)
		require.Same(t, a, p)
		require.NoError(t, s.Done(p, Outcome{Failed: true}))
		// b is out; [3 0]: a.
		assert.Equal(t, 2, a.State().CurrentWeight, "max_fails=0: no penalty")
	})
}

// TestClassicWRR_retry: a retry skips the tried peer, and when no untried
// eligible peer has weight left in the round, it starts the next round.
func TestClassicWRR_retry(t *testing.T) {
	peers := []*Peer{NewPeer("a", Weight(5), MaxFails(2)), NewPeer("b", MaxFails(2)), NewPeer("c", MaxFails(2))}
	s, err := NewClassicWRR(peers)
	require.NoError(t, err)
	assert.Equal(t, "c b", picks(t, s, 2))
	var r Request
	p, err := s.Pick(&r)
	require.NoError(t, err)
	require.Equal(t, "a", p.Addr())
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	// a is tried and b, c have nothing left: the round ends, all go back
	// to [5 1 1], and among b and c (1000/1 ≯ 1000/1) the last, c.
	p, err = s.Pick(&r)
	require.NoError(t, err)
	assert.Equal(t, "c", p.Addr())
	require.NoError(t, s.Done(p, Outcome{}))
	assert.Equal(t, []int{5, 1, 0}, currentWeights(s.Peers()))
	// Sorted [a5 b1 c0]: 5000/1 ≯ 5000/1, so b, then a five times.
	assert.Equal(t, "b a a a a a c b", picks(t, s, 8))
	_, err = s.Pick(&r)
	require.NoError(t, err)
	_, err = s.Pick(&r)
	assert.ErrorIs(t, err, ErrTriesExhausted, "three peers, three tries")
}

// TestClassicWRR_failWindow: a peer with max_fails failures is skipped for
// fail_timeout, then picked as the probe; its success reopens the cycle.
func TestClassicWRR_failWindow(t *testing.T) {
	clk := newFakeClock() // t=100
	a, b := NewPeer("a", Weight(2)), NewPeer("b")
	s, err := NewClassicWRR([]*Peer{a, b}, clk.opt())
	require.NoError(t, err)
	// Sorted a(2), b(1), ratio 2000: [2 1] b, then [2 0] a.
	assert.Equal(t, "b", picks(t, s, 1))
	p, err := s.Pick(nil)
	require.NoError(t, err)
	require.Same(t, a, p)
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	assert.Equal(t, 0, a.State().CurrentWeight, "1 − 2/1 clamped at 0")

	// Out through t=110: b alone, each pick ending a round ([2 1] → b).
	for clk.now().Unix() <= 110 {
		assert.Equal(t, "b b", picks(t, s, 2), "at t=%d", clk.now().Unix())
		clk.add(time.Second)
	}
	// t=111: a is back with its whole round, [2 0]: a, the probe.
	p, err = s.Pick(nil)
	require.NoError(t, err)
	assert.Same(t, a, p, "probe at t=111")
	assert.Equal(t, clk.now(), a.State().Checked, "the probe starts a new window")
	assert.Nil(t, s.cycle.Load(), "no cycle while a has failures on record")
	require.NoError(t, s.Done(p, Outcome{}))
	assert.Equal(t, 0, a.State().Fails, "a successful probe clears fails")
	// [1 0]: a, which ends the round; the cycle takes over: b a a.
	assert.Equal(t, "a", picks(t, s, 1))
	assert.NotNil(t, s.cycle.Load())
	assert.Equal(t, "b a a b a a", picks(t, s, 6))
}

// TestClassicWRR_backup: the backups run their own classic rounds once no
// primary is eligible.
func TestClassicWRR_backup(t *testing.T) {
	clk := newFakeClock()
	a := NewPeer("a")
	bk1, bk2 := NewPeer("b", Weight(2), Backup()), NewPeer("c", Backup())
	s, err := NewClassicWRR([]*Peer{a, bk1, bk2}, clk.opt())
	require.NoError(t, err)
	assert.Equal(t, "a a a", picks(t, s, 3))

	var r Request
	p, err := s.Pick(&r)
	require.NoError(t, err)
	require.Same(t, a, p)
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	// Sorted backups b(2), c(1): [2 1] 2000 ≯ 2000: c.
	p, err = s.Pick(&r)
	require.NoError(t, err)
	assert.Same(t, bk2, p)
	require.NoError(t, s.Done(p, Outcome{}))
	// New requests while a is out: [2 0] b b, then a round c b b.
	assert.Equal(t, "b b c b b", picks(t, s, 5))

	// A backup failure costs its round too: a new round [2 1] gives c,
	// then b at [2 0] fails and 1 − 2/1 clamps at 0; b is out, and c,
	// alone with nothing left, starts the next round.
	assert.Equal(t, "c", picks(t, s, 1))
	p, err = s.Pick(nil)
	require.NoError(t, err)
	require.Same(t, bk1, p)
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	assert.Equal(t, "c", picks(t, s, 1), "b is out, c starts a round alone")

	clk.add(11 * time.Second)
	assert.Equal(t, "a a", picks(t, s, 2), "the primary is back")
}

func TestClassicWRR_down(t *testing.T) {
	peers := weighted(5, 1, 1)
	s, err := NewClassicWRR(peers)
	require.NoError(t, err)
	assert.Equal(t, "c b a", picks(t, s, 3))
	require.NoError(t, s.SetDown(peers[0], true))
	// A change restarts the rounds; sorted [b1 c1]: 1000/1 ≯ 1000/1: c.
	assert.Equal(t, "c b c b", picks(t, s, 4))
	require.NoError(t, s.SetDown(peers[0], false))
	assert.Equal(t, "c b a a a a a", picks(t, s, 7))
	for _, p := range peers {
		require.NoError(t, s.SetDown(p, true))
	}
	_, err = s.Pick(nil)
	assert.ErrorIs(t, err, ErrNoLivePeer)
}

func TestClassicWRR_setWeightResorts(t *testing.T) {
	peers := weighted(5, 1, 1)
	s, err := NewClassicWRR(peers)
	require.NoError(t, err)
	require.NoError(t, s.SetWeight(peers[2], 6))
	// Sorted c(6), a(5), b(1): [6 5 1] 6000/5=1200 ≯ 1200; 5000/1 ≯ 5000:
	// b. [6 5 0]: c vs a ≯: a. [6 4 0]: 6000/4=1500 > 1200: c.
	assert.Equal(t, "b a c", picks(t, s, 3))
}

func TestClassicWRR_maxConns(t *testing.T) {
	a, b := NewPeer("a", Weight(3), MaxConns(1)), NewPeer("b")
	s, err := NewClassicWRR([]*Peer{a, b})
	require.NoError(t, err)
	// [3 1] 3000 ≯ 3000: b. [3 0]: a, now full.
	var got []string
	for range 3 {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		got = append(got, p.Addr())
	}
	// Third: a is full; b has nothing left, so the round restarts and b
	// alone is eligible.
	assert.Equal(t, []string{"b", "a", "b"}, got)
	assert.Nil(t, s.cycle.Load(), "max_conns keeps the exact scan")
}

func TestClassicWRR_singlePeer(t *testing.T) {
	a := NewPeer("a")
	s, err := NewClassicWRR([]*Peer{a})
	require.NoError(t, err)
	for range 3 {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, s.Done(p, Outcome{Failed: true}))
		assert.Equal(t, 0, a.State().Fails, "the single server is never out")
	}
}

func TestClassicWRR_pickAllocs(t *testing.T) {
	for _, n := range []int{3, 64, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ws := make([]int, n)
			for i := range ws {
				ws[i] = 1 + i%7
			}
			s, err := NewClassicWRR(weighted(ws...))
			require.NoError(t, err)
			var r Request
			allocs := testing.AllocsPerRun(1000, func() {
				r.Reset()
				p, _ := s.Pick(&r)
				_ = s.Done(p, Outcome{})
			})
			assert.Zero(t, allocs, "cycle")
			require.NotNil(t, s.cycle.Load())

			// max_conns keeps every pick on the locked scan.
			peers := weighted(ws...)
			for _, p := range peers {
				MaxConns(1 << 20)(p)
			}
			s, err = NewClassicWRR(peers)
			require.NoError(t, err)
			allocs = testing.AllocsPerRun(1000, func() {
				r.Reset()
				p, _ := s.Pick(&r)
				_ = s.Done(p, Outcome{})
				p, _ = s.Pick(nil)
				_ = s.Done(p, Outcome{})
			})
			assert.Zero(t, allocs, "scan")
			require.Nil(t, s.cycle.Load())

			// Only the last peer up, so every pick records its index:
			// past 64 the tried set lives outside the Request.
			peers = weighted(ws...)
			for _, p := range peers[:n-1] {
				Down()(p)
			}
			MaxConns(1 << 20)(peers[n-1])
			s, err = NewClassicWRR(peers)
			require.NoError(t, err)
			allocs = testing.AllocsPerRun(1000, func() {
				r.Reset()
				p, _ := s.Pick(&r)
				_ = s.Done(p, Outcome{})
				p, _ = s.Pick(nil)
				_ = s.Done(p, Outcome{})
			})
			assert.Zero(t, allocs, "last peer")
		})
	}
}

// TestClassicWRR_matchesModel drives ClassicWRR and classicModel (below), a
// plain transcription of the rules in ClassicWRR's doc, with the same random
// operations (picks with retries, failures, successes, the clock moving) and
// checks that every pick and every peer's state agree. This covers the
// switches between the cycle and the exact scan under failures.
func TestClassicWRR_matchesModel(t *testing.T) {
	for seed := range uint64(200) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			clk := newFakeClock()
			model := &classicModel{}
			peers, byAddr := randomCluster(rng, &model.ngxModel, func() int { return rng.IntN(7) })
			if len(model.primary) == 0 {
				t.Skip("no primary")
			}
			s, err := NewClassicWRR(peers, clk.opt())
			require.NoError(t, err)
			failProb := []float64{0, 0.05, 0.3}[rng.IntN(3)]
			for step := range 200 {
				if rng.IntN(10) == 0 {
					clk.add(time.Duration(rng.IntN(3)) * time.Second)
				}
				now := clk.now().UnixNano()
				requestAsModel(t, rng, s, &model.ngxModel, model.pick, model.free, failProb, now, step)
				for _, m := range model.all() {
					st := byAddr[m.addr].State()
					require.Equal(t, m.fails, int64(st.Fails), "step %d peer %s fails", step, m.addr)
					require.Equal(t, m.w, int64(st.EffectiveWeight), "step %d peer %s ew", step, m.addr)
					// A down peer's current weight is never read.
					if !model.single && !m.down {
						require.Equal(t, m.cw, int64(st.CurrentWeight), "step %d peer %s cw", step, m.addr)
					}
				}
			}
		})
	}
}

// classicModel is the classic selector as ClassicWRR's doc states it, on
// ngxModel's request bookkeeping (tries, the tried set, the switch to
// backups): plain slices, no cycle, no sharing with the code under test.
type classicModel struct{ ngxModel }

func (m *classicModel) pick(now int64) *ngxPeer { return m.pickWith(now, m.getPeer) }

// getPeer is nginx 1.2.0's selector over the peers sorted by weight
// (stable), with the peers this request may not use left out, plus the
// caller's cw--.
func (m *classicModel) getPeer(list []*ngxPeer, now int64) *ngxPeer {
	var peers []*ngxPeer
	for _, p := range list {
		if m.tried[p] || p.down {
			continue
		}
		if p.maxFails != 0 && p.fails >= p.maxFails && now-p.checked <= p.failTimeout {
			continue
		}
		peers = append(peers, p)
	}
	if len(peers) == 0 {
		return nil
	}
	sort.SliceStable(peers, func(i, j int) bool { return peers[i].w > peers[j].w })
	for reset := 0; ; reset++ {
		n := -1
		for i, p := range peers {
			if p.cw <= 0 {
				continue
			}
			if n >= 0 && peers[n].cw*1000/p.cw > peers[n].w*1000/p.w {
				break
			}
			n = i
		}
		if n >= 0 {
			best := peers[n]
			best.cw--
			if now-best.checked > best.failTimeout {
				best.checked = now
			}
			return best
		}
		if reset == 1 {
			best := peers[0]
			if now-best.checked > best.failTimeout {
				best.checked = now
			}
			return best
		}
		for _, p := range list {
			p.cw = p.w
		}
	}
}

func (m *classicModel) free(p *ngxPeer, failed bool, now int64) {
	m.freeWith(p, failed, now, func(p *ngxPeer) {
		if p.maxFails != 0 {
			p.cw = max(0, p.cw-p.w/p.maxFails)
		}
	})
}

// TestClassicWRR_roundMatchesScan checks classicRound, which keeps nginx
// 1.2.0's scan incremental, against the scan itself, written out here as
// ngx_http_upstream_get_peer (release-1.2.0) runs it over the peers sorted
// by weight, W times from a fresh round: on lists with many peers per
// weight, weights past 1000 (where the ×1000 integer division rounds), down
// peers, peers of weight 0, and lists of more than 4096 live peers (the
// bitset's second level). It also checks that the cycle opens at the
// benchmark's 10,000 peers.
func TestClassicWRR_roundMatchesScan(t *testing.T) {
	type shape struct{ n, distinct, maxW int }
	shapes := []shape{{2, 2, 5}, {7, 3, 20}, {50, 4, 10}, {300, 8, 3000}, {600, 600, 60}, {5000, 3, 3}}
	rng := rand.New(rand.NewPCG(5, 6))
	trial := 0
	for _, sh := range shapes {
		for range max(1, 40/(1+sh.n/100)) {
			trial++
			choices := make([]int, sh.distinct)
			for k := range choices {
				choices[k] = 1 + rng.IntN(sh.maxW)
			}
			peers := make([]*Peer, sh.n)
			for i := range peers {
				w := choices[rng.IntN(len(choices))]
				if rng.IntN(25) == 0 {
					w = 0
				}
				opts := []PeerOption{Weight(w)}
				if rng.IntN(12) == 0 {
					opts = append(opts, Down())
				}
				peers[i] = NewPeer(fmt.Sprint("p", i), opts...)
			}
			s, err := NewClassicWRR(peers)
			require.NoError(t, err)
			var total int64
			for _, p := range peers {
				if !p.IsDown() {
					total += int64(p.Weight())
				}
			}
			if total == 0 || total > maxCycle {
				continue
			}

			// The list sorted by weight, heaviest first, stable; the live
			// peers of it at full weight; then nginx's loop.
			type peer struct{ i, w, cw int64 }
			var sorted []peer
			for i, p := range peers {
				if !p.IsDown() {
					sorted = append(sorted, peer{int64(i), int64(p.Weight()), int64(p.Weight())})
				}
			}
			sort.SliceStable(sorted, func(a, b int) bool { return sorted[a].w > sorted[b].w })
			want := make([]int32, total)
			for k := range want {
				n := -1
				for i := range sorted {
					if sorted[i].cw <= 0 {
						continue
					}
					if n >= 0 && sorted[n].cw*1000/sorted[i].cw > sorted[n].w*1000/sorted[i].w {
						break
					}
					n = i
				}
				require.GreaterOrEqual(t, n, 0, "trial %d: round ended early at pick %d", trial, k)
				sorted[n].cw--
				want[k] = int32(sorted[n].i)
			}
			got := classicRound(s.primary, total)
			require.Equal(t, want, got, "trial %d: %d peers, weights from %v", trial, sh.n, choices)
		}
	}

	s, err := NewClassicWRR(benchPeers(10000))
	require.NoError(t, err)
	require.NotNil(t, s.cycle.Load(), "10,000 peers of weights 1..10: the cycle is open")
}
