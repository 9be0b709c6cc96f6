package sim

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestPercentile(t *testing.T) {
	v := make([]int64, 100)
	for i := range v {
		v[i] = int64(i + 1)
	}
	tests := []struct {
		name string
		q    float64
		want int64
	}{
		// Nearest rank: the ⌈q·n⌉-th smallest.
		{"median", 0.5, 50},
		{"p99", 0.99, 99},
		{"p99.9", 0.999, 100},
		{"min", 0, 1},
		{"max", 1, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, percentile(v, tt.q))
		})
	}
	assert.Zero(t, percentile(nil, 0.5))
}

// TestQuantiles: selection gives what a full sort gives, on random values
// with many ties and on sorted, reversed and constant input.
func TestQuantiles(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := make([]int64, 10007)
	for i := range random {
		random[i] = rng.Int64N(500)
	}
	sorted := make([]int64, 1000)
	for i := range sorted {
		sorted[i] = int64(i)
	}
	reversed := slices.Clone(sorted)
	slices.Reverse(reversed)
	tests := []struct {
		name string
		v    []int64
	}{
		{"random with ties", random},
		{"sorted", sorted},
		{"reversed", reversed},
		{"constant", make([]int64, 333)},
		{"one", []int64{7}},
	}
	qs := []float64{0, 0.5, 0.9, 0.99, 0.999, 1}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := slices.Sorted(slices.Values(tt.v))
			got := quantiles(slices.Clone(tt.v), qs...)
			for i, q := range qs {
				assert.Equal(t, percentile(want, q), got[i], "q=%v", q)
			}
		})
	}
	assert.Equal(t, []int64{0, 0}, quantiles(nil, 0.5, 0.99))
}

// picks builds a two-backend Result of n buckets of 10 attempts each, where
// backend 1 gets mine(k) of bucket k's attempts.
func picks(n int, mine func(k int) int32) *Result {
	r := &Result{Backends: 2, Picks: make([]int32, 2*n),
		Divert: math.NaN(), Readmit: math.NaN(), PeakShare: math.NaN(), ProbeRate: math.NaN()}
	for k := range n {
		r.Picks[2*k+1] = mine(k)
		r.Picks[2*k] = 10 - mine(k)
	}
	return r
}

func TestWatch(t *testing.T) {
	inf := math.Inf(1)
	tests := []struct {
		name        string
		mine        func(k int) int32
		wantDivert  float64
		wantReadmit float64
		wantPeak    float64
		wantSink    bool
		wantProbe   float64
	}{
		{
			// Degraded over buckets 20..59, fair share 0.5, threshold 0.25.
			// Backend 1 drops to 0 from bucket 25. Its smoothed share (five
			// buckets from 20 on) is 0.4 at 25, 0.3 at 26 and 0.2 at 27:
			// diverted from the end of bucket 27, 2.8 s, 0.8 s after 2 s.
			// Back to 5 of 10 from bucket 70: smoothed from bucket 60, 0.1
			// at 70, 0.2 at 71, 0.3 at 72: readmitted at 7.3 s, 1.3 s after
			// 6 s. The only nonzero span, 20..24, is exactly fair.
			name: "divert and readmit",
			mine: func(k int) int32 {
				if k >= 25 && k < 70 {
					return 0
				}
				return 5
			},
			wantDivert: 0.8, wantReadmit: 1.3, wantPeak: 1, wantProbe: 0,
		},
		{
			// Never leaves its fair share: never diverted, readmitted in the
			// first bucket after recovery. A probe floor of 5 per 100 ms.
			name:       "static",
			mine:       func(int) int32 { return 5 },
			wantDivert: inf, wantReadmit: 0.1, wantPeak: 1, wantProbe: 50,
		},
		{
			// Gets 8 of 10 in span 30..34: a share of 0.8 is past
			// 0.5 + 3·sqrt(0.25/50) ≈ 0.71, a sinkhole. The smoothed share
			// then falls to 0.64, 0.48, 0.32 and 0.16 at bucket 38:
			// diverted from 3.9 s, 1.9 s after 2 s. Never comes back.
			name: "sinkhole, never readmitted",
			mine: func(k int) int32 {
				switch {
				case k >= 30 && k < 35:
					return 8
				case k >= 20:
					return 0
				}
				return 5
			},
			wantDivert: 1.9, wantReadmit: inf, wantPeak: 1.6, wantSink: true, wantProbe: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := picks(100, tt.mine)
			watch(r, 1, 0.5, 2*time.Second, 6*time.Second)
			assert.InDelta(t, tt.wantDivert, r.Divert, 1e-9, "Divert")
			assert.InDelta(t, tt.wantReadmit, r.Readmit, 1e-9, "Readmit")
			assert.InDelta(t, tt.wantPeak, r.PeakShare, 1e-9, "PeakShare")
			assert.Equal(t, tt.wantSink, r.Sinkhole, "Sinkhole")
			assert.InDelta(t, tt.wantProbe, r.ProbeRate, 1e-9, "ProbeRate")
		})
	}
}

func TestChurn(t *testing.T) {
	// Constant split: nothing moves.
	assert.Zero(t, churn(picks(20, func(int) int32 { return 3 })))
	// Every 500 ms span flips all traffic between the two backends: a
	// total-variation distance of 1 each time.
	flip := picks(20, func(k int) int32 { return int32(10 * (k / SpanBuckets % 2)) })
	assert.InDelta(t, 1, churn(flip), 1e-12)
}

func TestStat(t *testing.T) {
	// {1,2,3}: mean 2, sd 1, 95% half-width t(2)·1/√3.
	s := stat([]float64{1, 2, 3})
	assert.Equal(t, 2.0, s.Mean)
	assert.InDelta(t, 4.303/math.Sqrt(3), s.CI, 1e-12)
	assert.Equal(t, Stat{Mean: 5}, stat([]float64{5}))
	assert.True(t, math.IsNaN(stat([]float64{1, math.NaN()}).Mean))
	assert.True(t, math.IsInf(stat([]float64{1, math.Inf(1)}).Mean, 1))
	assert.True(t, math.IsNaN(stat(nil).Mean))
}
