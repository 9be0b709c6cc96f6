package capacity

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestShiftingSchedule: Fleet16 is what its doc says. Nominal capacity
// 10 × 1 / 80 ms = 125/s, arrivals 0.75 × 125 = 93.75/s. Each server's
// redraws come at gaps in [0.5 s, 3.5 s] of mean 2 s, so about
// End / 2 s − 1/2 = 11 of them a server, its means in [40 ms, 120 ms];
// the servers' schedules differ. Each client's arrivals are Poisson of
// rate 93.75/16: over End = 23 s a count of mean 134.8 and standard
// deviation 11.6, all clients' together 2156 ± 46; the gaps' mean is
// 1/rate and, for an exponential, their standard deviation too. The same
// scenario gives the same schedule and arrivals every time.
func TestShiftingSchedule(t *testing.T) {
	sc := Fleet16
	assert.InDelta(t, 125, sc.NominalRate(), 1e-9)
	assert.InDelta(t, 93.75, sc.Rate(), 1e-9)
	assert.Equal(t, 23*time.Second, sc.End())

	specs := sc.Specs()
	require.Len(t, specs, 10)
	for i, sp := range specs {
		assert.Equal(t, 1, sp.Workers)
		assert.GreaterOrEqual(t, sp.Mean, 40*time.Millisecond, "server %d", i)
		assert.LessOrEqual(t, sp.Mean, 120*time.Millisecond, "server %d", i)
	}
	changes := sc.Changes()
	last := make([]time.Duration, sc.Servers)
	count := make([]int, sc.Servers)
	var prev time.Duration
	for _, ch := range changes {
		assert.GreaterOrEqual(t, ch.At, prev, "time order")
		prev = ch.At
		gap := ch.At - last[ch.Server]
		assert.GreaterOrEqual(t, gap, 500*time.Millisecond, "server %d at %v", ch.Server, ch.At)
		assert.LessOrEqual(t, gap, 3500*time.Millisecond, "server %d at %v", ch.Server, ch.At)
		assert.GreaterOrEqual(t, ch.Mean, 40*time.Millisecond)
		assert.LessOrEqual(t, ch.Mean, 120*time.Millisecond)
		last[ch.Server] = ch.At
		count[ch.Server]++
	}
	assert.InDelta(t, 110, len(changes), 25, "redraws in all")
	assert.NotEqual(t, changes[0].Server, changes[1].Server, "the servers redraw on schedules of their own")
	assert.Equal(t, changes, sc.Changes(), "the same schedule again")
	assert.Equal(t, specs, sc.Specs())

	total := 0
	var gaps, gaps2 float64
	var ngaps int
	for c := range sc.Clients {
		arr := sc.Arrivals(c)
		assert.InDelta(t, 134.8, len(arr), 4*11.6, "client %d's arrivals", c)
		assert.Equal(t, arr, sc.Arrivals(c), "client %d's arrivals again", c)
		total += len(arr)
		prev := time.Duration(0)
		for _, a := range arr {
			require.Greater(t, a, prev)
			require.Less(t, a, sc.End())
			g := (a - prev).Seconds()
			gaps += g
			gaps2 += g * g
			ngaps++
			prev = a
		}
	}
	assert.NotEqual(t, sc.Arrivals(0), sc.Arrivals(1))
	assert.InDelta(t, 2156, total, 4*46, "all arrivals")
	mean := gaps / float64(ngaps)
	sd := math.Sqrt(gaps2/float64(ngaps) - mean*mean)
	assert.InDelta(t, 16/93.75, mean, 0.05*16/93.75, "mean gap")
	assert.InDelta(t, mean, sd, 0.1*mean, "an exponential's standard deviation is its mean")
}

// TestShiftingSlower: Fleet16.Slower(2) has means in [80 ms, 240 ms],
// gaps in [1 s, 7 s], half the arrivals a second (46.875), a 6 s warm-up
// and a 12 s timeout, and the same 20 s measured.
func TestShiftingSlower(t *testing.T) {
	sc := Fleet16.Slower(2)
	assert.Equal(t, 80*time.Millisecond, sc.Lo)
	assert.Equal(t, 240*time.Millisecond, sc.Hi)
	assert.Equal(t, 4*time.Second, sc.Every)
	assert.Equal(t, 3*time.Second, sc.Spread)
	assert.InDelta(t, 46.875, sc.Rate(), 1e-9)
	assert.Equal(t, 6*time.Second, sc.Warm)
	assert.Equal(t, 12*time.Second, sc.Timeout)
	assert.Equal(t, Fleet16.Measure, sc.Measure)
	assert.Equal(t, Fleet16, Fleet16.Slower(1))
}
