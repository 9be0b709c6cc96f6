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
			model := &ngxModel{}
			peers, byAddr := clusterOf(rng, model, n, 40, 50, func() int {
				w := rng.IntN(distinct + 1)
				if w == 0 && rng.IntN(4) != 0 {
					w = 1
				}
				return w
			})
			s, err := NewSmoothWRR(peers, clk.opt())
			require.NoError(t, err)
			failProb := []float64{0.01, 0.05, 0.3}[rng.IntN(3)]
			grouped := 0
			for step := range 300 {
				if rng.IntN(10) == 0 {
					clk.add(time.Duration(rng.IntN(3)) * time.Second)
				}
				requestAsModel(t, rng, s, model, model.pick, model.free, failProb, clk.now().UnixNano(), step)
				if s.groups != nil {
					grouped++
				}
				if step%10 != 0 {
					continue
				}
				for _, m := range model.all() {
					requireModelState(t, step, m, byAddr[m.addr].State())
				}
			}
			t.Logf("%d peers, %d distinct weights: %d of 300 requests on the grouped scan", n, distinct, grouped)
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
			s, err := NewSmoothWRR(peers, clk.opt())
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
				now := clk.now().UnixNano()
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
					requireModelState(t, step, m, peers[i].State())
				}
			}
		})
	}
}
