package balancer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// SmoothWRR's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("SmoothWRR", fuzzTrait{cycle: cycleWeights, zeroWeight: zwAny, sumZero: true})

func TestSmoothWRR_golden(t *testing.T) {
	// Sequences from nginx.md section 1 (checked there against nginx's own
	// selection function) and the commit message that introduced smooth
	// WRR; two periods each.
	tests := []struct {
		name    string
		weights []int
		want    string
	}{
		{"5-1-1", []int{5, 1, 1}, "a a b a c a a a a b a c a a"},
		{"5-1-2", []int{5, 1, 2}, "a c a a b a c a a c a a b a c a"},
		{"equal", []int{1, 1, 1}, "a b c a b c"},
		{"3-2-1", []int{3, 2, 1}, "a b a c b a a b a c b a"},
		{"1-2-3", []int{1, 2, 3}, "c b a c b c c b a c b c"},
		{"4-3-2-1", []int{4, 3, 2, 1}, "a b c a b d a c b a a b c a b d a c b a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewSmoothWRR(weighted(tt.weights...))
			require.NoError(t, err)
			assert.Equal(t, tt.want, picks(t, s, len(strings.Fields(tt.want))))
		})
	}
}

func TestSmoothWRR_currentWeights(t *testing.T) {
	// The {5,1,2} trace of nginx.md section 1: current weights after each
	// pick ("after -=total").
	want := [][]int{{-3, 1, 2}, {2, 2, -4}, {-1, 3, -2}, {-4, 4, 0}, {1, -3, 2}, {-2, -2, 4}, {3, -1, -2}, {0, 0, 0}}
	s, err := NewSmoothWRR(weighted(5, 1, 2))
	require.NoError(t, err)
	var r Request
	for step, cw := range want {
		r.Reset()
		// A request that is not fresh forces the exact scan, so the
		// current weights are real, not implied by a cycle position.
		r.attempts, r.limit = 1, 10
		p, err := s.Pick(&r)
		require.NoError(t, err)
		require.NoError(t, s.Done(p, Outcome{}))
		assert.Equal(t, cw, currentWeights(s.Peers()), "step %d", step)
	}
}

// TestSmoothWRR_recovery replays nginx.md section 2, scenario A: {5,1,1}
// with max_fails=2 on a frozen clock.
func TestSmoothWRR_recovery(t *testing.T) {
	clk := newFakeClock()
	a := NewPeer("a", Weight(5), MaxFails(2))
	s, err := NewSmoothWRR([]*Peer{a, NewPeer("b", MaxFails(2)), NewPeer("c", MaxFails(2))}, clk.opt())
	require.NoError(t, err)
	var r Request
	p, err := s.Pick(&r)
	require.NoError(t, err)
	assert.Equal(t, "a", p.Addr())
	require.NoError(t, s.Done(p, Outcome{Failed: true}))
	st := a.State()
	assert.Equal(t, 3, st.EffectiveWeight, "5 - 5/2")
	assert.Equal(t, 1, st.Fails)
	// The retry excludes a; b and c tie at current weight 2 and b, first
	// in order, wins.
	p, err = s.Pick(&r)
	require.NoError(t, err)
	assert.Equal(t, "b", p.Addr())
	require.NoError(t, s.Done(p, Outcome{}))
	assert.Equal(t, "c a a b a a c a a a b a", picks(t, s, 12))
	assert.Equal(t, 5, a.State().EffectiveWeight)
}

// TestSmoothWRR_failWindow replays nginx.md section 2, scenario C: a fails
// at t=100 with fail_timeout 10s, is out through t=110, eligible again at
// t=111 with effective weight 0, and picked as the probe at t=112.
func TestSmoothWRR_failWindow(t *testing.T) {
	clk := newFakeClock()
	a, b := NewPeer("a"), NewPeer("b")
	s, err := NewSmoothWRR([]*Peer{a, b}, clk.opt())
	require.NoError(t, err)
	p, err := s.Pick(nil)
	require.NoError(t, err)
	require.Equal(t, "a", p.Addr())
	require.NoError(t, s.Done(p, Outcome{Failed: true}))

	for clk.now().Unix() <= 110 {
		assert.Equal(t, "b b", picks(t, s, 2), "at t=%d", clk.now().Unix())
		clk.add(time.Second)
	}
	// t=111: eligible, but effective weight 0 then 1 loses two rounds.
	assert.Equal(t, "b b", picks(t, s, 2))
	clk.add(time.Second)
	p, err = s.Pick(nil)
	require.NoError(t, err)
	assert.Equal(t, "a", p.Addr(), "probe at t=112")
	assert.Equal(t, clk.now(), a.State().Checked, "the probe starts a new window")
	require.NoError(t, s.Done(p, Outcome{}))
	assert.Equal(t, 0, a.State().Fails, "a successful probe clears fails")
}

func TestSmoothWRR_singlePeer(t *testing.T) {
	// nginx's single-server rule: max_fails is ignored and a report clears
	// failures, so the peer is never taken out.
	a := NewPeer("a")
	s, err := NewSmoothWRR([]*Peer{a})
	require.NoError(t, err)
	for range 3 {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, s.Done(p, Outcome{Failed: true}))
		assert.Equal(t, 0, a.State().Fails)
	}
	var r Request
	_, err = s.Pick(&r)
	require.NoError(t, err)
	_, err = s.Pick(&r)
	assert.ErrorIs(t, err, ErrTriesExhausted, "one server, one try")

	require.NoError(t, s.SetDown(a, true))
	_, err = s.Pick(nil)
	assert.ErrorIs(t, err, ErrNoLivePeer)
}

// TestSmoothWRR_matchesModel drives SmoothWRR and an independent, literal
// model of nginx's round-robin module (ngxModel, below) with the same random
// operations (picks with retries, failures, successes, the clock moving)
// and checks that every pick and every peer's state agree. This covers the
// switches between the precomputed cycle and the exact scan.
func TestSmoothWRR_matchesModel(t *testing.T) {
	for seed := range uint64(300) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 7))
			clk := newFakeClock()
			model := &ngxModel{}
			peers, byAddr := randomCluster(rng, model, func() int { return 1 + rng.IntN(6) })
			if len(model.primary) == 0 {
				t.Skip("no primary")
			}
			s, err := NewSmoothWRR(peers, clk.opt())
			require.NoError(t, err)
			failProb := []float64{0, 0.05, 0.3}[rng.IntN(3)]
			for step := range 200 {
				if rng.IntN(10) == 0 {
					clk.add(time.Duration(rng.IntN(3)) * time.Second)
				}
				now := clk.now().UnixNano()
				requestAsModel(t, rng, s, model, model.pick, model.free, failProb, now, step)
				// nginx's invariant: each scan hands out what it takes back,
				// so the current weights always sum to zero.
				sum := 0
				for _, m := range model.all() {
					st := byAddr[m.addr].State()
					sum += st.CurrentWeight
					require.Equal(t, m.fails, int64(st.Fails), "step %d peer %s fails", step, m.addr)
					require.Equal(t, m.ew, int64(st.EffectiveWeight), "step %d peer %s ew", step, m.addr)
					if !model.single {
						require.Equal(t, m.cw, int64(st.CurrentWeight), "step %d peer %s cw", step, m.addr)
					}
				}
				require.Zero(t, sum, "step %d", step)
			}
		})
	}
}

// TestSmoothWRR_period checks nginx's period property on random weights:
// from a fresh start every W = Σweight picks give each peer exactly its
// weight, and the current weights are all back at zero.
func TestSmoothWRR_period(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		n := 1 + rng.IntN(12)
		ws := make([]int, n)
		total := 0
		for i := range ws {
			ws[i] = 1 + rng.IntN(20)
			total += ws[i]
		}
		peers := weighted(ws...)
		s, err := NewSmoothWRR(peers)
		require.NoError(t, err)
		for round := range 3 {
			count := map[*Peer]int{}
			for range total {
				p, err := s.Pick(nil)
				require.NoError(t, err)
				count[p]++
				require.NoError(t, s.Done(p, Outcome{}))
			}
			for i, p := range peers {
				require.Equal(t, ws[i], count[p], "weights %v round %d peer %s", ws, round, p)
			}
		}
		for _, p := range peers {
			require.Zero(t, p.State().CurrentWeight, "weights %v", ws)
		}
	}
}

// TestSmoothWRR_cycleResumes checks that the lock-free cycle comes back
// after what takes the scan in charge: a retry that failed nothing (a 404
// sent to the next upstream) or a failure that has since healed. Healthy
// peers repeat every W picks but, after such a disturbance, usually on
// another orbit than the one from all-zero current weights; the scan
// records that orbit and serves it. TestSmoothWRR_matchesModel checks that
// the picks stay nginx's all the while.
func TestSmoothWRR_cycleResumes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	disturbed := 0
	for trial := range 200 {
		clk := newFakeClock()
		n := 2 + rng.IntN(6)
		ws := make([]int, n)
		total := 0
		for i := range ws {
			ws[i] = 1 + rng.IntN(9)
			total += ws[i]
		}
		s, err := NewSmoothWRR(weighted(ws...), clk.opt())
		require.NoError(t, err)
		picks(t, s, rng.IntN(total))
		var r Request
		if trial%2 == 0 {
			p := mustPick(t, s, &r)
			require.NoError(t, s.Done(p, Outcome{}))
			p = mustPick(t, s, &r) // the retry
			require.NoError(t, s.Done(p, Outcome{}))
		} else {
			p := mustPick(t, s, &r)
			require.NoError(t, s.Done(p, Outcome{Failed: true}))
			clk.add(11 * time.Second)
		}
		if s.cycle.Load() == nil {
			disturbed++ // else the retry happened to land on the orbit from 0
		}
		// Recovery of effective weights, a probe, and up to two periods.
		picks(t, s, 3*total+12*n)
		assert.NotNil(t, s.cycle.Load(), "trial %d weights %v: cycle not back", trial, ws)
	}
	assert.Greater(t, disturbed, 100, "trials that left the cycle")
}
