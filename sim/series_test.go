package sim

import (
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
)

// TestRunRefused: two backends that fail every attempt fast, with nginx's
// max_fails=1 and a fail_timeout longer than the run. The first request
// fails on both and takes them out, so nearly every later request finds no
// peer: it is refused at once, with latency 0, and counts as failed.
func TestRunRefused(t *testing.T) {
	fail := []Fault{{From: 0, To: time.Hour, Mode: FastError, Prob: 1}}
	sc := Scenario{
		Name: "refused",
		Backends: []Backend{
			{Workers: 1, Mean: time.Millisecond, Faults: fail},
			{Workers: 1, Mean: time.Millisecond, Faults: fail},
		},
		Rate:        50,
		Duration:    5 * time.Second,
		PeerOptions: []balancer.PeerOption{balancer.FailTimeout(time.Minute)},
		Watch:       -1,
	}
	r, err := Run(&sc, policy(t, "SmoothWRR"), 1)
	require.NoError(t, err)
	require.Greater(t, r.Requests, 100)
	assert.Equal(t, r.Requests, r.Failed)
	assert.LessOrEqual(t, r.Attempts, 4, "the peers stay out for the whole run")
	assert.GreaterOrEqual(t, r.Refused, r.Requests-2)
	assert.Zero(t, r.P50)
	assert.Zero(t, r.Tail[0])

	// Nothing fails in the uniform scenario: nothing is refused.
	u := mustLookup(t, "uniform")
	u.Duration = 5 * time.Second
	r, err = Run(&u, policy(t, "SmoothWRR"), 1)
	require.NoError(t, err)
	assert.Zero(t, r.Refused)
}

// TestRunTail: the tail holds one quantile per level, ascending, and agrees
// with the percentiles computed apart at the levels they share.
func TestRunTail(t *testing.T) {
	levels := TailLevels()
	require.Len(t, levels, 81)
	assert.Equal(t, 0.0, levels[0])
	assert.InDelta(t, 0.9999, levels[80], 1e-12)
	assert.True(t, slices.IsSorted(levels))

	sc := mustLookup(t, "brownout")
	sc.Duration = 10 * time.Second
	r, err := Run(&sc, policy(t, "SmoothWRR"), 1)
	require.NoError(t, err)
	require.Len(t, r.Tail, len(levels))
	assert.True(t, slices.IsSorted(r.Tail))
	assert.Greater(t, r.Tail[0], time.Duration(0), "no request of a healthy cluster is instant")
	assert.Equal(t, r.P99, r.Tail[40], "level 0.99")
	assert.Equal(t, r.P999, r.Tail[60], "level 0.999")
	assert.LessOrEqual(t, r.Tail[0], r.P50)
	assert.GreaterOrEqual(t, r.Tail[80], r.P999)
}

// TestRunWeights: FastestFirst's derived weights, as the first client's
// peers report them. Backend 3 of the brownout runs 10 times slower from
// 15 s: by FastestFirst's first law its weight falls to about 100·(3/10)²
// = 9 of 100, while the others keep the full 100. Before 15 s every peer
// is within the tolerance and has 100. SmoothWRR never changes weights
// when nothing fails: they stay the configured 1.
func TestRunWeights(t *testing.T) {
	sc := mustLookup(t, "brownout")
	sc.Duration = 25 * time.Second
	r, err := Run(&sc, policy(t, "FastestFirst"), 1)
	require.NoError(t, err)
	n := r.Backends
	require.Len(t, r.Weights, len(r.Picks))
	at := func(k, i int) int32 { return r.Weights[k*n+i] }
	median := func(i, from, to int) int32 {
		var v []int32
		for k := from; k < to; k++ {
			v = append(v, at(k, i))
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	bucketAt := func(d time.Duration) int { return int(d / Bucket) }
	for i := range n {
		assert.Equal(t, int32(100), median(i, bucketAt(5*time.Second), bucketAt(15*time.Second)), "b%d before the brownout", i)
	}
	during := median(3, bucketAt(17*time.Second), bucketAt(25*time.Second))
	assert.Less(t, during, int32(30), "the slow backend's weight")
	assert.GreaterOrEqual(t, during, int32(defaults.Floor))
	for _, i := range []int{0, 1, 2, 4, 9} {
		assert.Equal(t, int32(100), median(i, bucketAt(17*time.Second), bucketAt(25*time.Second)), "b%d during the brownout", i)
	}

	u := mustLookup(t, "uniform")
	u.Duration = 3 * time.Second
	r, err = Run(&u, policy(t, "SmoothWRR"), 1)
	require.NoError(t, err)
	require.Len(t, r.Weights, 30*r.Backends)
	for _, w := range r.Weights {
		assert.Equal(t, int32(1), w)
	}
}
