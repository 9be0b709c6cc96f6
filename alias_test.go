package balancer

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRandomWeighted_aliasTable(t *testing.T) {
	// Each peer's share of the table, worked out exactly from the columns:
	// column c keeps its own peer with probability thr/2^64 and hands over
	// to its alias otherwise, and the n columns are equally likely. It must
	// equal w/W to within the 2^-64 the thresholds are rounded by.
	tests := []struct {
		name    string
		weights []int
	}{
		// The vectors of Dubbo's RandomLoadBalance (dubbo_ribbon.md
		// section 2), whose probabilities are w/W.
		{"dubbo 1-9-6", []int{1, 9, 6}},
		{"dubbo 1-0-0-9-6", []int{1, 0, 0, 9, 6}},
		{"equal", []int{5, 5, 5}},
		{"all zero", []int{0, 0}},
		{"one", []int{3}},
		{"skewed", []int{1, 1 << 29, 3, 0, 7}},
	}
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5 {
		ws := make([]int, 1+rng.IntN(100))
		for j := range ws {
			ws[j] = rng.IntN(1000)
		}
		tests = append(tests, struct {
			name    string
			weights []int
		}{fmt.Sprint("random ", i), ws})
	}
	two64 := new(big.Rat).SetInt(new(big.Int).Lsh(big.NewInt(1), 64))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := NewRandomWeighted(weighted(tt.weights...))
			require.NoError(t, err)
			tab := b.state.Load().primary
			n := len(tt.weights)
			share := make([]*big.Rat, n)
			for i := range share {
				share[i] = new(big.Rat)
			}
			for c, col := range tab.cols {
				keep := new(big.Rat).Quo(new(big.Rat).SetUint64(col.thr), two64)
				share[c].Add(share[c], keep)
				share[col.alias].Add(share[col.alias], new(big.Rat).Sub(big.NewRat(1, 1), keep))
			}
			total := 0
			for _, w := range tt.weights {
				total += w
			}
			for i, w := range tt.weights {
				got := new(big.Rat).Quo(share[i], big.NewRat(int64(n), 1))
				want := big.NewRat(1, int64(n))
				if total > 0 {
					want = big.NewRat(int64(w), int64(total))
				}
				if w == 0 && total > 0 {
					assert.Zero(t, got.Sign(), "peer %d of weight 0 has a share", i)
					continue
				}
				diff, _ := new(big.Rat).Sub(got, want).Float64()
				assert.LessOrEqual(t, math.Abs(diff), 0x1p-63, "peer %d: share %s, want %s", i, got.FloatString(20), want.FloatString(20))
			}
		})
	}
}
