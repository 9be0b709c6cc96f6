package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// LeastConn's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("LeastConn", fuzzTrait{zeroWeight: zwEligible})

func TestCompareLoad(t *testing.T) {
	tests := []struct {
		name           string
		pc, pw, qc, qw int64
		want           int
	}{
		// nginx.md section 7: a(w=2, 3 in flight) against b(w=1, 1):
		// b·a = 1·2 < a·b = 3·1, so b is less loaded.
		{"doc example", 1, 1, 3, 2, -1},
		{"doc example reversed", 3, 2, 1, 1, 1},
		// 2/4 against 1/2: 2·2 = 1·4.
		{"equal ratios", 2, 4, 1, 2, 0},
		{"both idle", 0, 5, 0, 1, 0},
		// 5/3 against 2/1: 5·1 = 5 < 2·3 = 6.
		{"weighted", 5, 3, 2, 1, -1},
		// Weight 0 ranks behind any weight, however busy.
		{"zero weight idle", 0, 0, 100, 1, 1},
		{"weight against zero", 100, 1, 0, 0, -1},
		{"two zero weights", 1, 0, 2, 0, -1},
		{"two zero weights equal", 2, 0, 2, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, compareLoad(tt.pc, tt.pw, tt.qc, tt.qw))
			assert.Equal(t, tt.want, compareLoadWide(tt.pc, tt.pw, tt.qc, tt.qw), "wide")
			assert.Equal(t, tt.want, reportedLoad{}.compare(tt.pc, 0, tt.pw, tt.qc, 0, tt.qw), "as the scans call it")
		})
	}
	// Past 2^63: weights scaled by slow start's 2^10 (weight 2^30, the
	// most a list may sum to) with 2^23 attempts in flight. 2^23·2^40 =
	// 2^63 overflows int64; the loads 2^23/2^40 and (2^23-1)/2^40 still
	// compare as their counts do, and 2^23/2^40 equals 2^22/2^39.
	const w, c = int64(1) << 40, int64(1) << 23
	for _, tt := range []struct {
		name           string
		pc, pw, qc, qw int64
		want           int
	}{
		{"wide busier", c, w, c - 1, w, 1},
		{"wide idler", c - 1, w, c, w, -1},
		{"wide equal ratios", c, w, c / 2, w / 2, 0},
	} {
		assert.Equal(t, tt.want, reportedLoad{}.compare(tt.pc, 0, tt.pw, tt.qc, 0, tt.qw), tt.name)
	}
}

// TestLeastConn_lowestLoad sets in-flight counts and checks which peer the
// first scan picks, derived by cross multiplication.
func TestLeastConn_lowestLoad(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		conns   []int64
		want    string
	}{
		// nginx.md section 7: 1·2 < 3·1.
		{"doc example", []int{2, 1}, []int64{3, 1}, "b"},
		// a: 2/1, b: 5/3; b·a = 5·1 = 5 < a·b = 2·3 = 6.
		{"weighted", []int{1, 3}, []int64{2, 5}, "b"},
		// a 2/2 and b 1/1 tie at 1, c 0/1 is lower and alone.
		{"first minimum", []int{2, 1, 1}, []int64{2, 1, 0}, "c"},
		// a 4/2 = 2, b 3/1 = 3, c 5/3 < 2 (5·2 = 10 < 4·3 = 12).
		{"fractional", []int{2, 1, 3}, []int64{4, 3, 5}, "c"},
		// The weight-0 peer is idle but ranks behind b.
		{"zero weight", []int{0, 1}, []int64{0, 5}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peers := weighted(tt.weights...)
			for i, c := range tt.conns {
				peers[i].slots.Store(c)
			}
			b, err := NewLeastConn(peers)
			require.NoError(t, err)
			p, err := b.Pick(nil)
			require.NoError(t, err)
			assert.Equal(t, tt.want, p.Addr())
			assert.Equal(t, make([]int, len(peers)), currentWeights(peers), "no tie: current weights untouched")
		})
	}
}

// TestLeastConn_ties: with nothing in flight every peer ties, so each pick
// is one full smooth round-robin step over all of them, and {5,1,1} gives
// the sequence of the commit that introduced smooth WRR (nginx.md section
// 6): (5,1,1) a (−2,1,1); (3,2,2) a (−4,2,2); (1,3,3) b (1,−4,3);
// (6,−3,4) a (−1,−3,4); (4,−2,5) c (4,−2,−2); (9,−1,−1) a (2,−1,−1);
// (7,0,0) a (0,0,0).
func TestLeastConn_ties(t *testing.T) {
	peers := weighted(5, 1, 1)
	b, err := NewLeastConn(peers)
	require.NoError(t, err)
	want := []struct {
		pick string
		cw   []int
	}{
		{"a", []int{-2, 1, 1}},
		{"a", []int{-4, 2, 2}},
		{"b", []int{1, -4, 3}},
		{"a", []int{-1, -3, 4}},
		{"c", []int{4, -2, -2}},
		{"a", []int{2, -1, -1}},
		{"a", []int{0, 0, 0}},
	}
	for step, w := range want {
		assert.Equal(t, w.pick, picks(t, b, 1), "step %d", step)
		assert.Equal(t, w.cw, currentWeights(peers), "step %d", step)
	}
}

// TestLeastConn_tieAmongSome: only the peers tied at the lowest load take
// the smooth step; the others' current weights stay where they are.
func TestLeastConn_tieAmongSome(t *testing.T) {
	peers := weighted(1, 1, 1)
	b, err := NewLeastConn(peers)
	require.NoError(t, err)
	// All idle: [1 1 1] → a, which gives back 3: [−2 1 1]. a stays in
	// flight.
	a, err := b.Pick(nil)
	require.NoError(t, err)
	require.Equal(t, "a", a.Addr())
	assert.Equal(t, []int{-2, 1, 1}, currentWeights(peers))
	// b and c tie at 0 in flight, a has 1. Steps over b and c only, each
	// giving back 2: [−2 2 2] b [−2 0 2]; [−2 1 3] c [−2 1 1];
	// [−2 2 2] b [−2 0 2].
	assert.Equal(t, "b c b", picks(t, b, 3))
	assert.Equal(t, []int{-2, 0, 2}, currentWeights(peers))
	require.NoError(t, b.Done(a, Outcome{}))
	// All idle again: [−1 1 3] → c, giving back 3: [−1 1 0].
	assert.Equal(t, "c", picks(t, b, 1))
	assert.Equal(t, []int{-1, 1, 0}, currentWeights(peers))
}

// TestLeastConn_inFlight: with every attempt left in flight the choice
// follows the in-flight counts, weighted.
func TestLeastConn_inFlight(t *testing.T) {
	peers := weighted(3, 1)
	b, err := NewLeastConn(peers)
	require.NoError(t, err)
	// 1. 0/3 and 0/1 tie: [3 1] → a, giving back 4: [−1 1].
	// 2. a 1/3, b 0/1: b (0·3 < 1·1).
	// 3. a 1/3, b 1/1: a (1·1 < 1·3). 4. a 2/3: a (2 < 3).
	// 5. a 3/3, b 1/1 tie: [2 2] → a, the first: [−2 2].
	// 6. a 4/3, b 1/1: b (1·3 < 4·1).
	assert.Equal(t, "a b a a a b", picks(t, b, 6, pickHold))
	assert.Equal(t, []int{-2, 2}, currentWeights(peers))
	assert.Equal(t, 4, peers[0].InFlight())
	assert.Equal(t, 2, peers[1].InFlight())

	// Reporting ends the attempts: a 0/3 against b 2/1.
	for range 4 {
		require.NoError(t, b.Done(peers[0], Outcome{}))
	}
	assert.Equal(t, "a", picks(t, b, 1, pickHold))
	require.NoError(t, b.Done(peers[1], Outcome{}))
	require.NoError(t, b.Done(peers[1], Outcome{}))
	assert.ErrorIs(t, b.Done(peers[1], Outcome{}), ErrNotInFlight)
}

// TestLeastConn_failWindow: a failed peer is out for fail_timeout however
// idle it is, comes back with effective weight 0, loses the ties while it
// recovers, and is then picked as the probe.
func TestLeastConn_failWindow(t *testing.T) {
	clk := newFakeClock() // t=100
	peers := weighted(1, 1)
	b, err := NewLeastConn(peers, clk.opt())
	require.NoError(t, err)
	// Tie: [1 1] → a, giving back 2: [−1 1].
	a, err := b.Pick(nil)
	require.NoError(t, err)
	require.Equal(t, "a", a.Addr())
	require.NoError(t, b.Done(a, Outcome{Failed: true}))
	assert.Equal(t, 0, a.State().EffectiveWeight, "1 − 1/1")

	for clk.now().Unix() <= 110 {
		// b alone is eligible: no tie, current weights untouched.
		assert.Equal(t, "b b", picks(t, b, 2), "at t=%d", clk.now().Unix())
		clk.add(time.Second)
	}
	assert.Equal(t, []int{-1, 1}, currentWeights(peers))
	// t=111, both idle, a tie each time:
	// a −1+0 (ew 0 → 1), b 1+1: total 1, b, [−1 1].
	// a −1+1, b 1+1: total 2, b, [0 0].
	// a 0+1, b 0+1: a, the first, [−1 1]: the probe.
	assert.Equal(t, "b b a", picks(t, b, 3))
	assert.Equal(t, clk.now(), a.State().Checked, "the probe starts a new window")
	assert.Equal(t, 0, a.State().Fails, "the successful probe cleared fails")
	assert.Equal(t, []int{-1, 1}, currentWeights(peers))
}

// TestLeastConn_failureLowersEffectiveWeight: below max_fails a failed peer
// stays eligible, and the lowered effective weight costs it ties until it
// recovers by one per tie.
func TestLeastConn_failureLowersEffectiveWeight(t *testing.T) {
	peers := []*Peer{NewPeer("a", Weight(2), MaxFails(2)), NewPeer("b", Weight(2), MaxFails(2))}
	b, err := NewLeastConn(peers)
	require.NoError(t, err)
	// Tie: [2 2] → a, giving back 4: [−2 2]; a fails: ew 2 − 2/2 = 1.
	a, err := b.Pick(nil)
	require.NoError(t, err)
	require.Equal(t, "a", a.Addr())
	require.NoError(t, b.Done(a, Outcome{Failed: true}))
	// a −2+1 (ew → 2), b 2+2: total 3, b, [−1 1].
	// a −1+2, b 1+2: total 4, b, [1 −1].
	// a 1+2, b −1+2: a, [−1 1].
	assert.Equal(t, "b b a", picks(t, b, 3))
	assert.Equal(t, []int{-1, 1}, currentWeights(peers))
	assert.Equal(t, 2, a.State().EffectiveWeight)
}

// TestLeastConn_backup: the backups are used, by least connections, once no
// primary is eligible, and a retry moves on to them.
func TestLeastConn_backup(t *testing.T) {
	clk := newFakeClock()
	a := NewPeer("a")
	bk1, bk2 := NewPeer("b", Backup()), NewPeer("c", Backup())
	b, err := NewLeastConn([]*Peer{a, bk1, bk2}, clk.opt())
	require.NoError(t, err)
	assert.Equal(t, "a a", picks(t, b, 2))

	var r Request
	p, err := b.Pick(&r)
	require.NoError(t, err)
	require.Same(t, a, p)
	require.NoError(t, b.Done(p, Outcome{Failed: true}))
	// The retry: a is tried, so the backups, idle and tied: [1 1] → b.
	p, err = b.Pick(&r)
	require.NoError(t, err)
	assert.Same(t, bk1, p)
	// b still in flight: c is the least loaded backup for a new request.
	assert.Equal(t, "c", picks(t, b, 1))
	require.NoError(t, b.Done(p, Outcome{}))
	p, err = b.Pick(&r)
	require.NoError(t, err)
	assert.Same(t, bk2, p, "b is tried")
	require.NoError(t, b.Done(p, Outcome{}))
	_, err = b.Pick(&r)
	assert.ErrorIs(t, err, ErrTriesExhausted, "three peers, three tries")

	clk.add(11 * time.Second)
	assert.Equal(t, "a a", picks(t, b, 2), "the primary is back")
}

func TestLeastConn_singlePeer(t *testing.T) {
	a := NewPeer("a", MaxConns(1))
	b, err := NewLeastConn([]*Peer{a})
	require.NoError(t, err)
	for range 3 {
		p, err := b.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, b.Done(p, Outcome{Failed: true}))
		assert.Equal(t, 0, a.State().Fails, "the single server is never out")
	}
	// The single-server rule still checks max_conns.
	p, err := b.Pick(nil)
	require.NoError(t, err)
	_, err = b.Pick(nil)
	assert.ErrorIs(t, err, ErrNoLivePeer)
	require.NoError(t, b.Done(p, Outcome{}))
}

func TestLeastConn_maxConns(t *testing.T) {
	peers := []*Peer{NewPeer("a", Weight(10), MaxConns(1)), NewPeer("b")}
	b, err := NewLeastConn(peers)
	require.NoError(t, err)
	// a: tie at 0, [10 1] → a. Then a is full, so b however loaded.
	assert.Equal(t, "a b b b", picks(t, b, 4, pickHold))
}

func TestLeastConn_pickAllocs(t *testing.T) {
	for _, n := range []int{3, 64, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			ws := make([]int, n)
			for i := range ws {
				ws[i] = 1 + i%7
			}
			b, err := NewLeastConn(weighted(ws...))
			require.NoError(t, err)
			var r Request
			allocs := testing.AllocsPerRun(1000, func() {
				p, _ := b.Pick(nil)
				_ = b.Done(p, Outcome{})
				r.Reset()
				p, _ = b.Pick(&r)
				_ = b.Done(p, Outcome{})
				p, _ = b.Pick(&r)
				_ = b.Done(p, Outcome{})
			})
			assert.Zero(t, allocs)

			// Only the last peer up, so every pick records its index:
			// past 64 the tried set lives outside the Request.
			peers := weighted(ws...)
			for _, p := range peers[:n-1] {
				Down()(p)
			}
			b, err = NewLeastConn(peers)
			require.NoError(t, err)
			allocs = testing.AllocsPerRun(1000, func() {
				r.Reset()
				p, _ := b.Pick(&r)
				_ = b.Done(p, Outcome{})
				p, _ = b.Pick(nil)
				_ = b.Done(p, Outcome{})
			})
			assert.Zero(t, allocs, "last peer")
		})
	}
}

// TestLeastConn_matchesModel drives LeastConn and lcModel (below), a plain
// transcription of nginx's least_conn, with the same random operations:
// requests with retries, attempts left in flight and reported later,
// failures, the clock moving. Every pick and every peer's state must agree,
// with nginx's scan (LeastConn's reference) and with the index.
func TestLeastConn_matchesModel(t *testing.T) {
	seeds := uint64(400)
	if underRace {
		// One goroutine on a fake clock: the race detector has nothing to
		// watch (16 s of the root package's -race run). 100 seeds keep the
		// scan (even seeds) and the index (odd ones); the plain run keeps
		// all 400.
		seeds = 100
	}
	for seed := range seeds {
		indexed := seed%2 == 1
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			clk := newFakeClock()
			model := &lcModel{conns: map[*ngxPeer]int64{}}
			peers, byAddr := randomCluster(rng, &model.ngxModel, func() int { return 1 + rng.IntN(4) })
			if len(model.primary) == 0 {
				t.Skip("no primary")
			}
			b, err := NewLeastConn(peers, clk.opt())
			require.NoError(t, err)
			b.scanOnly = !indexed
			type attempt struct {
				peer  *Peer
				model *ngxPeer
			}
			var held []attempt
			done := func(a attempt, failed bool) {
				model.done(a.model, failed, clk.now().UnixNano())
				require.NoError(t, b.Done(a.peer, Outcome{Failed: failed}))
			}
			failProb := []float64{0, 0.05, 0.3}[rng.IntN(3)]
			for step := range 300 {
				if rng.IntN(10) == 0 {
					clk.add(time.Duration(rng.IntN(3)) * time.Second)
				}
				if len(held) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(held))
					done(held[k], rng.Float64() < failProb)
					held = append(held[:k], held[k+1:]...)
					continue
				}
				var r Request
				model.begin()
				for {
					want := model.pick(clk.now().UnixNano())
					got := pickAsModel(t, b, &r, want, model.exhausted(), step)
					if got == nil {
						break
					}
					a := attempt{got, want}
					if rng.Float64() < failProb {
						done(a, true)
						continue
					}
					if rng.IntN(2) == 0 {
						held = append(held, a)
					} else {
						done(a, false)
					}
					break
				}
				for _, m := range model.all() {
					st := byAddr[m.addr].State()
					require.Equal(t, model.conns[m], int64(st.InFlight), "step %d peer %s in flight", step, m.addr)
					requireModelState(t, step, m, st)
				}
			}
			for _, a := range held {
				done(a, false)
			}
		})
	}
}

// foldEvery makes b's index fold its groups' steps into their bases every
// foldAt steps at one count (0: the default, 2^50/w).
func foldEvery(b *LeastConn, foldAt int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.ix.foldAt = foldAt
	b.ix.prepare(b.load())
}

// lcModel is nginx's least_conn selection (nginx.md section 7) on
// ngxModel's request bookkeeping and accounting, with each peer's
// in-flight count kept beside it.
type lcModel struct {
	ngxModel
	conns map[*ngxPeer]int64
}

func (m *lcModel) pick(now int64) *ngxPeer {
	p := m.pickWith(now, m.getPeer)
	if p != nil {
		m.conns[p]++
	}
	return p
}

func (m *lcModel) getPeer(peers []*ngxPeer, now int64) *ngxPeer {
	eligible := func(p *ngxPeer) bool {
		return !m.tried[p] && !p.down &&
			!(p.maxFails != 0 && p.fails >= p.maxFails && now-p.checked <= p.failTimeout)
	}
	var best *ngxPeer
	var at int
	many := false
	for i, p := range peers {
		if !eligible(p) {
			continue
		}
		switch {
		case best == nil || m.conns[p]*best.w < m.conns[best]*p.w:
			best, at, many = p, i, false
		case m.conns[p]*best.w == m.conns[best]*p.w:
			many = true
		}
	}
	if best == nil {
		return nil
	}
	if many {
		var total int64
		for _, p := range peers[at:] {
			if !eligible(p) || m.conns[p]*best.w != m.conns[best]*p.w {
				continue
			}
			p.cw += p.ew
			total += p.ew
			if p.ew < p.w {
				p.ew++
			}
			if p.cw > best.cw {
				best = p
			}
		}
		best.cw -= total
	}
	if now-best.checked > best.failTimeout {
		best.checked = now
	}
	return best
}

func (m *lcModel) done(p *ngxPeer, failed bool, now int64) {
	m.conns[p]--
	m.free(p, failed, now)
}
