package balancer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Law 1 in the sampled mode: with 64 peers, 8 of them ten times slower, a
// slow peer's derived weight is (tolerance·f/e)² = (3/10)² = 0.09 of a fast
// one's, so its draws fall to 9% of a fast peer's and it loses most
// comparisons besides. Sent one attempt at a time, uniformly the slow peers
// would get 8/64 = 12.5% of the attempts; the bound below, a third of
// that, fails for any picker that ignores latency.
func TestFastestFirst_sampledSlowerGetsLess(t *testing.T) {
	clk := newFakeClock()
	peers := addrPeers(64, 1<<16)
	f := newTestFF(t, clk, peers)
	require.NotNil(t, f.draw.Load(), "64 peers run the sampled mode")
	slow := map[*Peer]bool{}
	for _, p := range peers[:8] {
		slow[p] = true
	}
	const rounds = 20000
	var toSlow int
	for k := range rounds {
		p := mustPick(t, f, nil)
		lat := 5 * time.Millisecond
		if slow[p] {
			lat = 50 * time.Millisecond
		}
		clk.add(time.Millisecond)
		require.NoError(t, f.Done(p, Outcome{Latency: lat}))
		if k >= rounds/2 && slow[p] {
			toSlow++
		}
	}
	assert.Less(t, float64(toSlow)/(rounds/2), 0.125/3, "share of the slow peers")
}

// Law 2's probe in the sampled mode: a peer out for its failures is the
// first one picked once its fail window has passed.
func TestFastestFirst_sampledProbeFirst(t *testing.T) {
	clk := newFakeClock()
	peers := addrPeers(40, 1<<16, FailTimeout(10*time.Second))
	f := newTestFF(t, clk, peers)
	for range 200 {
		p := mustPick(t, f, nil)
		require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
	}
	bad := peers[7]
	for bad.InFlight() == 0 {
		p := mustPick(t, f, nil)
		if p != bad {
			require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
			continue
		}
		require.NoError(t, f.Done(p, Outcome{Failed: true}))
		break
	}
	require.Equal(t, 1, bad.State().Fails)
	for range 100 {
		p := mustPick(t, f, nil)
		require.NotEqual(t, bad, p, "inside its fail window")
		require.NoError(t, f.Done(p, Outcome{Latency: time.Millisecond}))
	}
	clk.add(10*time.Second + 1)
	assert.Equal(t, bad, mustPick(t, f, nil), "the probe goes first")
	assert.NotEqual(t, bad, mustPick(t, f, nil), "one probe at a time")
}

// The sampled mode under concurrent picks, reports (failures included) and
// updates: no error but the documented ones, nothing left in flight.
func TestFastestFirst_sampledConcurrent(t *testing.T) {
	peers := addrPeers(100, 1<<16, MaxFails(3))
	f, err := NewFastestFirst(peers)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range 3000 {
				p, err := f.Pick(nil)
				if err != nil {
					continue
				}
				o := Outcome{Latency: time.Duration(k%7+1) * time.Millisecond}
				switch {
				case k%97 == g:
					o = Outcome{Failed: true}
				case k%89 == g:
					o = Outcome{Abandoned: true, Latency: time.Millisecond}
				}
				assert.NoError(t, f.Done(p, o))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := range 50 {
			_ = f.SetWeight(peers[k], k%5+1)
			_ = f.SetDown(peers[k+50], k%2 == 0)
		}
	}()
	wg.Wait()
	for _, p := range peers {
		assert.Zero(t, p.InFlight(), "peer %s", p)
	}
}

// TestFastestFirst_sampledSeeded checks that the sampled mode draws from
// WithRand: two pickers over 40 peers with the same seed and clock pick the
// same sequence, and another seed a different one.
func TestFastestFirst_sampledSeeded(t *testing.T) {
	run := func(seed uint64) []string {
		clk := newFakeClock()
		peers := make([]*Peer, 40)
		for i := range peers {
			peers[i] = NewPeer(fmt.Sprintf("p%02d", i), Weight(i%4+1))
		}
		f, err := NewFastestFirst(peers, clk.opt(), WithRand(rand.NewPCG(seed, 1)))
		require.NoError(t, err)
		var seq []string
		for k := range 300 {
			p, err := f.Pick(nil)
			require.NoError(t, err)
			seq = append(seq, p.Addr())
			clk.add(time.Millisecond)
			require.NoError(t, f.Done(p, Outcome{Latency: time.Duration(1+k%7) * time.Millisecond}))
		}
		return seq
	}
	a, b := run(7), run(7)
	assert.Equal(t, a, b, "the same seed, the same picks")
	assert.NotEqual(t, a, run(8), "another seed, other picks")
}

// Law 3 in the sampled mode: estimates that stay inside their bands move
// no weight and cause no recompute, however many reports come in: the
// deferred recompute and its random refresh run only after some estimate
// has left its band. 64 peers answer in 1 ms each, one request at a time.
func TestFastestFirst_sampledStableInsideBand(t *testing.T) {
	clk := newFakeClock()
	peers := addrPeers(64, 1<<16)
	f := newTestFF(t, clk, peers, WithRand(rand.NewPCG(3, 4)))
	require.NotNil(t, f.draw.Load(), "64 peers run the sampled mode")
	loop := newFFLoop(t, f, clk, peers, ffFixed(slices.Repeat([]time.Duration{time.Millisecond}, 64)...))
	loop.run(1, 5*time.Second)
	before, recomputes := ffWeights(peers), f.recomputes
	got := loop.run(1, 60*time.Second)
	assert.Equal(t, before, ffWeights(peers), "weights")
	assert.Equal(t, recomputes, f.recomputes, "no recompute inside the bands")
	for i, k := range got {
		assert.Positive(t, k, "peer %d keeps traffic", i)
	}
}
