package sim

import (
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMM1Mean(t *testing.T) {
	tests := []struct {
		name       string
		lambda, mu float64
		want       float64
	}{
		// 1/(μ−λ).
		{"half load", 50, 100, 1.0 / 50},
		{"seventy percent", 70, 100, 1.0 / 30},
		{"saturated", 100, 100, math.Inf(1)},
		{"overloaded", 120, 100, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, MM1Mean(tt.lambda, tt.mu))
		})
	}
}

func TestMMcMean(t *testing.T) {
	tests := []struct {
		name       string
		lambda, mu float64
		c          int
		want       float64
	}{
		// c=1 is M/M/1: 1/(1−0.5).
		{"one worker", 0.5, 1, 1, 2},
		// c=2, a=1, ρ=0.5: Σ_{k<2} a^k/k! = 2, a²/2!/(1−ρ) = 1, so
		// C = 1/3, Wq = C/(cμ−λ) = 1/3 and W = 1/3 + 1.
		{"two workers", 1, 1, 2, 4.0 / 3},
		// c=4, μ=25, λ=70: a=2.8, ρ=0.7. Σ_{k<4} = 1+2.8+3.92+3.658667
		// = 11.378667; a⁴/4! = 2.561067, over 0.3 = 8.536889; C =
		// 8.536889/19.915556 = 0.428654; W = C/30 + 1/25.
		{"four workers", 70, 25, 4, 0.428654/30 + 0.04},
		{"unstable", 100, 25, 4, math.Inf(1)},
		{"no workers", 1, 1, 0, math.Inf(1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.InDelta(t, tt.want, MMcMean(tt.lambda, tt.mu, tt.c), 1e-6)
		})
	}
}

func TestSqrtSplit(t *testing.T) {
	tests := []struct {
		name      string
		mus       []float64
		lambda    float64
		wantSplit []float64
		wantT     float64
	}{
		// Σ√μ = 30, spare 200: λ_1 = 100 − 10·200/30, λ_2 = 400 − 20·200/30;
		// T* = (30²/200 − 2)/300. Check: λ_1/(μ_1−λ_1) = 0.5 and
		// λ_2/(μ_2−λ_2) = 2, so T* = 2.5/300.
		{"two servers", []float64{100, 400}, 300, []float64{100.0 / 3, 800.0 / 3}, 2.5 / 300},
		// Σ√μ = 11, spare 51: λ_1 = 1 − 51/11 < 0, so the slow server is
		// dropped and everything goes to the fast one: T* = 1/(100−50).
		{"slow server dropped", []float64{1, 100}, 50, []float64{0, 50}, 1.0 / 50},
		// Identical servers split evenly: each M/M/1 at 70%.
		{"identical", []float64{100, 100, 100, 100}, 280, []float64{70, 70, 70, 70}, 1.0 / 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			split, tstar, err := SqrtSplit(tt.mus, tt.lambda)
			require.NoError(t, err)
			assert.InDeltaSlice(t, tt.wantSplit, split, 1e-9)
			assert.InDelta(t, tt.wantT, tstar, 1e-12)
		})
	}
}

func TestSqrtSplitErrors(t *testing.T) {
	tests := []struct {
		name   string
		mus    []float64
		lambda float64
	}{
		{"overloaded", []float64{100, 100}, 200},
		{"zero rate", []float64{100}, 0},
		{"zero server", []float64{0, 100}, 10},
		{"NaN server", []float64{math.NaN()}, 10},
		{"infinite server", []float64{math.Inf(1)}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := SqrtSplit(tt.mus, tt.lambda)
			assert.Error(t, err)
		})
	}
}

func TestPooledBound(t *testing.T) {
	// One server of rate 100+400 at 300/s: 1/200.
	assert.Equal(t, 1.0/200, PooledBound([]float64{100, 400}, 300))
}
