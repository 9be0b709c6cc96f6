package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSmoothWRR_groupedScanMatchesModel is TestSmoothWRR_matchesModel on
// lists long enough for the grouped scan (weightGroups): SmoothWRR and the
// literal nginx model go through the same random picks, retries, failures
// and clock moves, and every pick and every peer's state must agree.
func TestSmoothWRR_groupedScanMatchesModel(t *testing.T) {
	for seed := range uint64(40) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 11))
			clk := newFakeClock()
			n := groupedScanMin + rng.IntN(300)
			distinct := 1 + rng.IntN(6)
			var peers []*Peer
			model := &ngxModel{}
			for i := range n {
				w, mf, ft := rng.IntN(distinct+1), rng.IntN(3), time.Duration(1+rng.IntN(5))*time.Second
				if w == 0 && rng.IntN(4) != 0 {
					w = 1
				}
				backup := i > 0 && rng.IntN(40) == 0
				down := rng.IntN(50) == 0
				opts := []PeerOption{Weight(w), MaxFails(mf), FailTimeout(ft)}
				if backup {
					opts = append(opts, Backup())
				}
				if down {
					opts = append(opts, Down())
				}
				addr := fmt.Sprint("p", i)
				peers = append(peers, NewPeer(addr, opts...))
				model.add(addr, w, mf, int64(ft), backup, down)
			}
			s, err := NewSmoothWRR(peers, WithClock(clk.now))
			require.NoError(t, err)
			byAddr := map[string]*Peer{}
			for _, p := range peers {
				byAddr[p.Addr()] = p
			}
			failProb := []float64{0.01, 0.05, 0.3}[rng.IntN(3)]
			grouped := 0
			for step := range 300 {
				if rng.IntN(10) == 0 {
					clk.add(time.Duration(rng.IntN(3)) * time.Second)
				}
				now := clk.t.UnixNano()
				var r Request
				model.begin()
				for {
					want := model.pick(now)
					got, err := s.Pick(&r)
					if s.groups != nil {
						grouped++
					}
					if want == nil {
						require.Error(t, err, "step %d: model found no peer", step)
						break
					}
					require.NoError(t, err, "step %d: model picked %s", step, want.addr)
					require.Equal(t, want.addr, got.Addr(), "step %d", step)
					failed := rng.Float64() < failProb
					model.free(want, failed, now)
					require.NoError(t, s.Done(got, Outcome{Failed: failed}))
					if !failed {
						break
					}
				}
				if step%10 != 0 {
					continue
				}
				for _, m := range model.all() {
					st := byAddr[m.addr].State()
					require.Equal(t, m.fails, int64(st.Fails), "step %d peer %s fails", step, m.addr)
					require.Equal(t, m.ew, int64(st.EffectiveWeight), "step %d peer %s ew", step, m.addr)
					require.Equal(t, m.cw, int64(st.CurrentWeight), "step %d peer %s cw", step, m.addr)
				}
			}
			t.Logf("%d peers, %d distinct weights: %d picks grouped", n, distinct, grouped)
		})
	}
}

// TestSmoothWRR_groupedScanUpdates drives long lists through weight changes,
// peers going down and up, and reports held in flight and given back out of
// order, against the nginx model: a list change restarts every current
// weight (an nginx reload), and the grouped scan must start over from it.
func TestSmoothWRR_groupedScanUpdates(t *testing.T) {
	for seed := range uint64(16) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 13))
			clk := newFakeClock()
			n := groupedScanMin + rng.IntN(200)
			var peers []*Peer
			model := &ngxModel{}
			for i := range n {
				w, mf := 1+rng.IntN(4), rng.IntN(3)
				addr := fmt.Sprint("p", i)
				peers = append(peers, NewPeer(addr, Weight(w), MaxFails(mf), FailTimeout(2*time.Second)))
				model.add(addr, w, mf, int64(2*time.Second), false, false)
			}
			s, err := NewSmoothWRR(peers, WithClock(clk.now))
			require.NoError(t, err)
			type held struct {
				p      *Peer
				m      *ngxPeer
				failed bool
			}
			var pending []held
			restart := func() {
				for _, m := range model.all() {
					m.cw = 0
				}
			}
			for step := range 400 {
				switch x := rng.IntN(100); {
				case x < 3:
					i, w := rng.IntN(n), rng.IntN(5)
					require.NoError(t, s.SetWeight(peers[i], w))
					model.primary[i].w, model.primary[i].ew = int64(w), int64(w)
					restart()
				case x < 5:
					i := rng.IntN(n)
					down := !model.primary[i].down
					require.NoError(t, s.SetDown(peers[i], down))
					model.primary[i].down = down
					restart()
				case x < 15:
					clk.add(time.Second)
				}
				now := clk.t.UnixNano()
				model.begin()
				want := model.pick(now)
				got, err := s.Pick(nil)
				if want == nil {
					require.Error(t, err, "step %d", step)
				} else {
					require.NoError(t, err, "step %d", step)
					require.Equal(t, want.addr, got.Addr(), "step %d", step)
					pending = append(pending, held{got, want, rng.IntN(8) == 0})
				}
				for len(pending) > 0 && rng.IntN(3) != 0 {
					k := rng.IntN(len(pending))
					h := pending[k]
					pending = append(pending[:k], pending[k+1:]...)
					model.free(h.m, h.failed, now)
					require.NoError(t, s.Done(h.p, Outcome{Failed: h.failed}))
				}
				for i, m := range model.primary {
					st := peers[i].State()
					require.Equal(t, m.fails, int64(st.Fails), "step %d peer %s fails", step, m.addr)
					require.Equal(t, m.ew, int64(st.EffectiveWeight), "step %d peer %s ew", step, m.addr)
					require.Equal(t, m.cw, int64(st.CurrentWeight), "step %d peer %s cw", step, m.addr)
				}
			}
		})
	}
}
