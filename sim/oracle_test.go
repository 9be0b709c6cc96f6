package sim

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// handBackend is a backend at a constant mean service time of m ms with
// the given workers' free times (ms from now = 0; nil: unlimited), rif
// attempts in flight as the clients see them and late attempts the
// clients gave up on, still served until 1 s.
func handBackend(m float64, free []int64, rif, late int) backendState {
	b := backendState{from: []int64{0}, mean: []float64{m * float64(time.Millisecond)}, rif: int32(rif)}
	if free != nil {
		b.workers = make([]int64, len(free))
		for i, f := range free {
			b.workers[i] = f * ms
		}
	}
	for range late {
		b.srv.late = append(b.srv.late, lateJob{end: int64(time.Second)})
	}
	return b
}

// farBackend puts b across a network of round trip rtt ms, holding queued
// jobs sent and not ended.
func farBackend(b backendState, rtt int64, queued int) backendState {
	b.up, b.down = rtt*ms/2, rtt*ms-rtt*ms/2
	b.queued = int32(queued)
	return b
}

// TestOracleInfoPicks gives the full-information oracle backends set by
// hand and checks its pick against the expected delays worked out here,
// m × (1 + max(0, q − c + 1)/c), and Oracle SED's against the exact wait
// for a worker plus the mean.
func TestOracleInfoPicks(t *testing.T) {
	busy := func(n int) []int64 { // n workers busy for 500 ms
		f := make([]int64, n)
		for i := range f {
			f[i] = 500
		}
		return f
	}
	tests := []struct {
		name      string
		backends  []backendState
		fault     int // index of a backend failing fast, -1 for none
		info, sed int
	}{
		{
			// info: b0 10×(1+2) = 30 ms; b1 40×(1+1/4) = 50 ms; b2 has
			// a free worker, 40 ms; b3 holds 4 + 2 late, 5×(1+6) = 35 ms.
			// SED: b0 500+10, b1 500+40, b2 0+40 (its free worker), b3
			// 500+5 ms.
			name: "queues and speeds",
			backends: []backendState{
				handBackend(10, busy(1), 2, 0),
				handBackend(40, busy(4), 4, 0),
				handBackend(40, append(busy(3), 0), 3, 0),
				handBackend(5, busy(1), 4, 2),
			},
			fault: -1, info: 0, sed: 2,
		},
		{
			// b0 fails: info's next best is b3 (35 ms); SED's stays b2.
			name: "a failing backend is skipped",
			backends: []backendState{
				handBackend(10, busy(1), 2, 0),
				handBackend(40, busy(4), 4, 0),
				handBackend(40, append(busy(3), 0), 3, 0),
				handBackend(5, busy(1), 4, 2),
			},
			fault: 0, info: 3, sed: 2,
		},
		{
			// One attempt on b0, whose worker frees in 1 ms: info expects
			// 20×2 = 40 ms, SED knows 1+20 = 21 ms. b1 is idle at 30 ms.
			name: "no clairvoyance",
			backends: []backendState{
				{from: []int64{0}, mean: []float64{20e6}, workers: []int64{1 * ms}, rif: 1},
				handBackend(30, []int64{0}, 0, 0),
			},
			fault: -1, info: 1, sed: 0,
		},
		{
			// Two idle backends of 10 ms, round trips 2 and 40 ms: both
			// oracles expect 12 against 50 ms.
			name: "network distance",
			backends: []backendState{
				farBackend(handBackend(10, []int64{0}, 0, 0), 40, 0),
				farBackend(handBackend(10, []int64{0}, 0, 0), 2, 0),
			},
			fault: -1, info: 1, sed: 1,
		},
		{
			// The near one (2 ms) holds 3 jobs, one on its way: info
			// expects 10×(1+3)+2 = 42 ms, against 10+20 = 30 ms far;
			// SED knows the near worker frees in 25 ms (26+10+1 = 37
			// against 30 far). The far one is slower, 10 ms, and idle.
			name: "a queue outweighs distance",
			backends: []backendState{
				farBackend(handBackend(10, []int64{25}, 0, 0), 2, 3),
				farBackend(handBackend(10, []int64{0}, 0, 0), 20, 0),
			},
			fault: -1, info: 1, sed: 1,
		},
		{
			// The same with the near worker freeing in 15 ms: SED 16+10+1
			// = 27 ms near, against 30 far; info still 42 against 30.
			name: "clairvoyance across the network",
			backends: []backendState{
				farBackend(handBackend(10, []int64{15}, 0, 0), 2, 3),
				farBackend(handBackend(10, []int64{0}, 0, 0), 20, 0),
			},
			fault: -1, info: 1, sed: 0,
		},
		{
			// Unlimited workers: the mean alone, whatever is in flight.
			name: "unlimited workers",
			backends: []backendState{
				handBackend(10, nil, 50, 0),
				handBackend(11, nil, 0, 0),
			},
			fault: -1, info: 0, sed: 0,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := &world{backends: tt.backends}
			if tt.fault >= 0 {
				w.backends[tt.fault].faults = []fault{{from: 0, to: int64(time.Hour), mode: FastError, prob: 1}}
			}
			peers := make([]*balancer.Peer, len(w.backends))
			for i := range peers {
				peers[i] = balancer.NewPeer("b" + string(rune('0'+i)))
			}
			for name, o := range map[string]struct {
				p    balancer.Picker
				want int
			}{
				OracleInfo: {newInformed(w, peers, rand.NewPCG(1, 2)), tt.info},
				OracleSED:  {newSED(w, peers, rand.NewPCG(1, 2)), tt.sed},
			} {
				got, err := o.p.Pick(nil)
				require.NoError(t, err)
				assert.Equal(t, peers[o.want].Addr(), got.Addr(), name)
			}
		})
	}
}

func TestInformedDelay(t *testing.T) {
	tests := []struct {
		q, c    int
		m, want float64
	}{
		{0, 1, 10, 10}, // idle
		{1, 1, 10, 20}, // one ahead
		{3, 1, 10, 40}, // three ahead
		{3, 4, 40, 40}, // a worker free
		{4, 4, 40, 50}, // all busy: one completion of four, 10 ms
		{7, 4, 40, 80}, // four completions ahead
		{9, 0, 10, 10}, // unlimited workers
	}
	for _, tt := range tests {
		assert.InDelta(t, tt.want, informedDelay(tt.q, tt.c, tt.m), 1e-12, "q=%d c=%d m=%v", tt.q, tt.c, tt.m)
	}
}

// TestOracleInfoNearSED: on the fleet with sixteen clients the
// full-information oracle, which does not know service times, stays
// within 1.3× of the clairvoyant one's p99 and far below every picker
// that learns from its own replies only (at least 2× better than
// LeastConn), seed by seed.
func TestOracleInfoNearSED(t *testing.T) {
	sc := mustLookup(t, "fleet16")
	sc.Duration = 30 * time.Second
	for _, seed := range []uint64{1, 2} {
		p99 := map[string]time.Duration{}
		for _, name := range []string{OracleSED, OracleInfo, "LeastConn"} {
			r, err := Run(&sc, policy(t, name), seed)
			require.NoError(t, err)
			p99[name] = r.P99
		}
		t.Logf("seed %d: p99 %v", seed, p99)
		assert.Less(t, float64(p99[OracleInfo]), 1.3*float64(p99[OracleSED]), "seed %d", seed)
		assert.GreaterOrEqual(t, float64(p99[OracleInfo]), 0.95*float64(p99[OracleSED]), "seed %d: better than clairvoyant", seed)
		assert.Less(t, 2*p99[OracleInfo], p99["LeastConn"], "seed %d", seed)
	}
}

// TestOracleProbedPicks drives Oracle probed by hand: a pick chooses from
// what the previous pick saw, never from the state at the pick.
func TestOracleProbedPicks(t *testing.T) {
	// Three backends, so each snapshot holds all of them (OracleProbes
	// is 3): b0 idle at 10 ms, b1 idle at 30 ms, b2 holding 2 at 10 ms
	// (10×3 = 30 ms).
	w := &world{backends: []backendState{
		handBackend(10, []int64{0}, 0, 0),
		handBackend(30, []int64{0}, 0, 0),
		handBackend(10, []int64{500}, 2, 0),
	}}
	require.Equal(t, 3, OracleProbes)
	peers := []*balancer.Peer{balancer.NewPeer("b0"), balancer.NewPeer("b1"), balancer.NewPeer("b2")}
	o := newProbed(w, peers, rand.NewPCG(1, 2))

	// The first pick knows nothing: a random backend, then its snapshot.
	first, err := o.Pick(nil)
	require.NoError(t, err)
	f := map[string]int{"b0": 0, "b1": 1, "b2": 2}[first.Addr()]

	// b0 fills up now (3 in flight: 10×4 = 40 ms), but the snapshot was
	// taken before: the pick still takes b0 (10 ms then), unless the
	// first pick went to b0, whose snapshot then counted that job (10×2
	// = 20 ms, still the least).
	w.backends[0].workers[0] = 500 * ms
	w.backends[0].rif = 3
	got, err := o.Pick(nil)
	require.NoError(t, err)
	assert.Equal(t, "b0", got.Addr(), "first pick went to b%d", f)

	// From fresh oracles on the new state: a first pick's snapshot holds
	// b0 at 10×4 = 40 ms, b1 at 30, b2 at 30, the one it chose with its
	// job counted (b0 50, b1 60, b2 40 ms). The second pick then takes b1
	// or b2 (a tie broken at random, or the one the first did not load),
	// never b0.
	seen := map[string]bool{}
	for i := range 20 {
		o := newProbed(w, peers, rand.NewPCG(uint64(i), 7))
		_, err := o.Pick(nil) // snapshot
		require.NoError(t, err)
		got, err := o.Pick(nil)
		require.NoError(t, err)
		seen[got.Addr()] = true
	}
	assert.Equal(t, map[string]bool{"b1": true, "b2": true}, seen)
}

// TestOracleProbedFaults: a backend inside a fault at the snapshot is
// left out, as a failed probe answer would be; with every one failing
// the oracle refuses.
func TestOracleProbedFaults(t *testing.T) {
	w := &world{backends: []backendState{
		handBackend(10, []int64{0}, 0, 0),
		handBackend(30, []int64{0}, 0, 0),
	}}
	w.backends[0].faults = []fault{{from: 0, to: int64(time.Hour), mode: FastError, prob: 1}}
	peers := []*balancer.Peer{balancer.NewPeer("b0"), balancer.NewPeer("b1")}
	o := newProbed(w, peers, rand.NewPCG(3, 4))
	for range 5 {
		got, err := o.Pick(nil)
		require.NoError(t, err)
		assert.Equal(t, "b1", got.Addr())
	}
	w.backends[1].faults = w.backends[0].faults
	_, err := newProbed(w, peers, rand.NewPCG(3, 4)).Pick(nil)
	assert.ErrorIs(t, err, balancer.ErrNoLivePeer)
}

// TestOracleProbedLimit backs what the README and Prequal's doc say of
// the targets: with exact answers, but as old as a probe sent
// with the previous pick, the full-information choice misses 1.5× Oracle
// SED's p99 with 16 clients and 2× with 64, seed by seed, whether it
// knows 2, 3 (Oracle probed), 4 or all 10 backends a pick; fresh, the
// same knowledge stays within 1.3×. The age alone, not the rule nor the
// servers' estimates, puts the targets out of reach of probes that go
// out with the picks.
func TestOracleProbedLimit(t *testing.T) {
	for _, tt := range []struct {
		scenario string
		target   float64
	}{{"fleet16", 1.5}, {"fleet64", 2}} {
		sc := mustLookup(t, tt.scenario)
		for _, seed := range []uint64{1, 2, 3} {
			p99 := map[string]time.Duration{}
			for _, name := range []string{OracleSED, OracleInfo} {
				r, err := Run(&sc, policy(t, name), seed)
				require.NoError(t, err)
				p99[name] = r.P99
			}
			assert.Less(t, float64(p99[OracleInfo]), 1.3*float64(p99[OracleSED]), "%s seed %d", tt.scenario, seed)
			for _, k := range []int{2, OracleProbes, 4, 10} {
				pol := Policy{Name: fmt.Sprintf("probed-%d", k), oracle: func(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker {
					return newProbedK(w, peers, src, k)
				}}
				r, err := Run(&sc, pol, seed)
				require.NoError(t, err)
				ratio := float64(r.P99) / float64(p99[OracleSED])
				t.Logf("%s seed %d, %d backends a pick: p99 %v, %.2fx Oracle SED's %v", tt.scenario, seed, k, r.P99, ratio, p99[OracleSED])
				assert.Greater(t, ratio, tt.target, "%s seed %d, %d backends", tt.scenario, seed, k)
			}
		}
	}
}
