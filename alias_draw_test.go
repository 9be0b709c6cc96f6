package balancer

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestRWTable_drawBoundaries holds draw, which selects without a branch,
// to the rule the table is built for, written here in big integers: x·n
// splits into column hi = ⌊x·n/2^64⌋ and coin lo = x·n mod 2^64, and the
// column keeps its own peer if lo < thr, else hands over to its alias.
// It checks every column at its first and last x and on both sides of its
// threshold (the last x below it and the first x at or past it), over
// Dubbo's vectors, zero weights, one peer holding nearly MaxWeightSum, and
// random weight vectors; a peer of weight 0 is never drawn while the sum is
// positive.
func TestRWTable_drawBoundaries(t *testing.T) {
	tests := []struct {
		name    string
		weights []uint64
	}{
		{"dubbo 1-9-6", []uint64{1, 9, 6}},
		{"dubbo 1-0-0-9-6", []uint64{1, 0, 0, 9, 6}},
		{"equal", []uint64{5, 5, 5}},
		{"all zero", []uint64{0, 0, 0}},
		{"one", []uint64{3}},
		{"near MaxWeightSum", []uint64{MaxWeightSum - 2, 1, 0, 1}},
		{"MaxWeightSum and zeros", []uint64{0, MaxWeightSum, 0}},
		{"halves of MaxWeightSum", []uint64{MaxWeightSum / 2, MaxWeightSum / 2}},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for i := range 20 {
		ws := make([]uint64, 1+rng.IntN(300))
		for j := range ws {
			switch rng.IntN(4) {
			case 0: // zero weights, a quarter of them
			case 1:
				ws[j] = uint64(rng.IntN(MaxWeightSum / len(ws)))
			default:
				ws[j] = uint64(1 + rng.IntN(10))
			}
		}
		tests = append(tests, struct {
			name    string
			weights []uint64
		}{fmt.Sprint("random ", i), ws})
	}
	two64 := new(big.Int).Lsh(big.NewInt(1), 64)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var total uint64
			for _, w := range tt.weights {
				total += w
			}
			n := len(tt.weights)
			tab := newRWTable(make([]*Peer, n), append([]uint64(nil), tt.weights...))
			bn := big.NewInt(int64(n))
			// ceilX is the first x with x·n ≥ v.
			ceilX := func(v *big.Int) *big.Int {
				q, r := new(big.Int).QuoRem(v, bn, new(big.Int))
				if r.Sign() > 0 {
					q.Add(q, big.NewInt(1))
				}
				return q
			}
			checked := 0
			check := func(x *big.Int) {
				if x.Sign() < 0 || x.Cmp(two64) >= 0 {
					return
				}
				hi, lo := new(big.Int).QuoRem(new(big.Int).Mul(x, bn), two64, new(big.Int))
				col := tab.cols[hi.Int64()]
				want := int(hi.Int64())
				if lo.Cmp(new(big.Int).SetUint64(col.thr)) >= 0 {
					want = col.alias
				}
				got := tab.draw(x.Uint64())
				checked++
				if !assert.Equal(t, want, got, "x=%#x: column %d, coin %#x, threshold %#x", x, hi, lo, col.thr) {
					t.FailNow()
				}
				if total > 0 {
					assert.NotZero(t, tt.weights[got], "x=%#x drew peer %d of weight 0", x, got)
				}
			}
			one := big.NewInt(1)
			for c, col := range tab.cols {
				start := new(big.Int).Mul(big.NewInt(int64(c)), two64)
				first := ceilX(start)
				check(first)
				check(new(big.Int).Sub(ceilX(new(big.Int).Add(start, two64)), one)) // the column's last x
				at := ceilX(new(big.Int).Add(start, new(big.Int).SetUint64(col.thr)))
				check(at)
				check(new(big.Int).Sub(at, one))
			}
			check(big.NewInt(0))
			check(new(big.Int).SetUint64(math.MaxUint64))
			assert.GreaterOrEqual(t, checked, 4*n)
		})
	}
}

var drawSink int

// BenchmarkRWTableDraw times draw against the same rule written with a
// branch on the coin, over the benchmarks' weights (i%10+1: most columns
// hand over to an alias with some probability), from fastRand64.
func BenchmarkRWTableDraw(b *testing.B) {
	for _, n := range []int{10, 10000} {
		w := make([]uint64, n)
		for i := range w {
			w[i] = uint64(i%10 + 1)
		}
		tab := newRWTable(make([]*Peer, n), w)
		b.Run(fmt.Sprintf("branchless/peers=%d", n), func(b *testing.B) {
			s := 0
			for b.Loop() {
				s += tab.draw(fastRand64())
			}
			drawSink = s
		})
		b.Run(fmt.Sprintf("branch/peers=%d", n), func(b *testing.B) {
			s := 0
			for b.Loop() {
				hi, lo := bits.Mul64(fastRand64(), tab.n)
				i := int(hi)
				if c := &tab.cols[hi]; lo >= c.thr {
					i = c.alias
				}
				s += i
			}
			drawSink = s
		})
	}
}
