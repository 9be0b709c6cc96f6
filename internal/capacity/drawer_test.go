package capacity

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCapDrawer checks the draws the tolerance rests on. The capped
// lognormal's mean, from its distribution: with X = exp(σZ − σ²/2) and
// σ = 1, E[X; X < 10] = Φ((ln 10 − σ²/2)/σ) = Φ(1.8026) = 0.96427 and
// P(X ≥ 10) = 1 − Φ((ln 10 + σ²/2)/σ) = 1 − Φ(2.8026) = 0.002534, so
// E[min(X, 10)] = 0.96427 + 10 × 0.002534 = 0.98962. Every block holds
// exactly half its draws below the median exp(−σ²/2). The mean of n
// consecutive draws varies by less than 13%, 9% and 6% of the mean at
// n = 30, 50, 100, where independent draws of the same distribution vary
// by more than 19%, 14%, 10%.
func TestCapDrawer(t *testing.T) {
	const blocks = 2000
	d := NewDrawer(7)
	rng := rand.New(rand.NewPCG(7, 18))
	var strat, iid []float64
	for b := range blocks {
		below := 0
		for range Strata {
			x := d.Draw()
			strat = append(strat, x)
			if x < math.Exp(-Sigma*Sigma/2) {
				below++
			}
			iid = append(iid, min(math.Exp(Sigma*rng.NormFloat64()-Sigma*Sigma/2), 10))
		}
		require.Equal(t, Strata/2, below, "block %d: draws below the median", b)
	}
	mean := 0.0
	for _, x := range strat {
		mean += x / float64(len(strat))
	}
	assert.InDelta(t, 0.98962, mean, 0.01, "mean of the capped lognormal")
	// spread is the standard deviation of the means of n consecutive
	// draws (every 7th start), relative to the distribution's mean.
	spread := func(xs []float64, n int) float64 {
		var ms []float64
		for i := 0; i+n <= len(xs); i += 7 {
			m := 0.0
			for _, x := range xs[i : i+n] {
				m += x / float64(n)
			}
			ms = append(ms, m/0.98962)
		}
		var s, s2 float64
		for _, m := range ms {
			s += m
			s2 += m * m
		}
		k := float64(len(ms))
		return math.Sqrt(s2/k - (s/k)*(s/k))
	}
	for _, tc := range []struct {
		n                int
		stratMax, iidMin float64
	}{{30, 0.13, 0.19}, {50, 0.09, 0.14}, {100, 0.06, 0.10}} {
		st, in := spread(strat, tc.n), spread(iid, tc.n)
		t.Logf("mean of %d draws varies by %.1f%% (independent draws: %.1f%%)", tc.n, 100*st, 100*in)
		assert.Less(t, st, tc.stratMax, "stratified, n = %d", tc.n)
		assert.Greater(t, in, tc.iidMin, "independent, n = %d", tc.n)
	}
}
