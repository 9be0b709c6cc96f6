package balancer

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// a58Periods are A58's defaults spelled out, but for a 30 s expiration:
// the tests' phases fit in a minute.
var a58Periods = []Option{WithBlackoutPeriod(10 * time.Second), WithWeightUpdatePeriod(time.Second), WithWeightExpirationPeriod(30 * time.Second)}

// holdOne picks until a pick lands on the peer called addr, which it
// leaves in flight, ending every other attempt at once; at most 2·n
// picks. It returns the held peer.
func holdOne(t *testing.T, s *ReportedWRR, addr string) *Peer {
	t.Helper()
	for range 2 * len(s.Peers()) {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		if p.Addr() == addr {
			return p
		}
		require.NoError(t, s.Done(p, Outcome{Latency: time.Millisecond}))
	}
	t.Fatalf("%s never picked", addr)
	return nil
}

// pickDone makes k picks, each ended at once without a report, and
// returns them spelled out.
func pickDone(t *testing.T, s *ReportedWRR, k int) string {
	t.Helper()
	var got []string
	for range k {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		got = append(got, p.Addr())
		require.NoError(t, s.Done(p, Outcome{Latency: time.Millisecond}))
	}
	return strings.Join(got, " ")
}

// TestReportedWRR_coldStart follows a client through the phases of the
// cold start with one attempt on a held in flight, the client's view of a
// slow server. Derivations:
//
//   - no report: SmoothWRR over weights 1, 1 alternates whatever is in
//     flight: a b a b (nginx's smooth order from b's turn);
//   - reports in blackout: LeastConn's rule, a at 1 in flight per unit of
//     weight against b's 0 (b's attempts ending at once): b every time;
//   - after 10 s of reports, a reports 100 rps and b 50 at utilization
//     0.5: weights 200 and 100, shares 1 and 1/2 of a budget of 200: 133
//     and 67, whose smooth order gives a 133 picks in every 200 whatever
//     is in flight (cold, it would get none while held);
//   - c added then, in its blackout, gets the mean of the weighted,
//     (1 + 1/2)/2 = 3/4: shares 1, 1/2, 3/4 of a budget of 300: 133, 67,
//     100, and the list stays on the derived weights: c 100 picks in 300
//     though held;
//   - every report expired: SmoothWRR over the configured weights 1, 1, 1
//     again, b 2 picks in 6 though held (cold, it would get none).
func TestReportedWRR_coldStart(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, a58Periods...)...)
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}

	a := holdOne(t, s, "a")
	assert.Equal(t, "b a b a", pickDone(t, s, 4), "no report: SmoothWRR")
	require.NoError(t, s.Done(a, Outcome{Latency: time.Millisecond}))

	serve(t, s, loads, 4) // the first reports: blackout, cold at once
	a = holdOne(t, s, "a")
	assert.Equal(t, "b b b b", pickDone(t, s, 4), "in blackout: by the attempts in flight")
	assert.Equal(t, []int{1, 1}, derivedWeights(peers))

	clk.add(9 * time.Second)
	serve(t, s, map[string]ServerLoad{"b": loads["b"]}, 2) // a is held: b reports, a's run goes on
	assert.Equal(t, "b b b b", pickDone(t, s, 4), "9 s into the blackout")

	clk.add(time.Second)
	require.NoError(t, s.Done(a, Outcome{Latency: time.Millisecond, Load: &ServerLoad{Utilization: 0.5, RPS: 100}}))
	serve(t, s, loads, 4) // due: both weighted
	require.Equal(t, []int{133, 67}, derivedWeights(peers), "weights after the blackout")
	holdOne(t, s, "a")
	assert.Equal(t, 133, strings.Count(pickDone(t, s, 200), "a"), "weighted: a's 133 turns in 200 whatever it holds")

	require.NoError(t, s.Add(NewPeer("c")))
	assert.Equal(t, []int{133, 67, 100}, derivedWeights(s.Peers()), "c in blackout: the mean")
	c := holdOne(t, s, "c")
	assert.Equal(t, 100, strings.Count(pickDone(t, s, 300), "c"), "c held: still weighted, 100 turns in 300, not cold")
	require.NoError(t, s.Done(c, Outcome{Latency: time.Millisecond}))

	clk.add(31 * time.Second)  // every report expired
	pickDone(t, s, checkEvery) // a look at the clock
	assert.Equal(t, []int{1, 1, 1}, derivedWeights(s.Peers()))
	holdOne(t, s, "b")
	assert.Equal(t, 2, strings.Count(pickDone(t, s, 6), "b"), "no fresh report: SmoothWRR's turns again, 2 in 6 each")
}

// TestReportedWRR_coldStartIsLeastConn: in the cold start, ReportedWRR
// picks as LeastConn over the same peers, pick for pick, under a random
// mix of picks, successes and failures out of order, with weights 3, 1,
// 2, 1 and 0 (LeastConn's picks are nginx's, checked against its traces
// in least_conn_test.go).
func TestReportedWRR_coldStartIsLeastConn(t *testing.T) {
	for seed := range uint64(20) {
		clk := newFakeClock()
		mine, theirs := weighted(3, 1, 2, 1, 0), weighted(3, 1, 2, 1, 0)
		s, err := NewReportedWRR(mine, append([]Option{clk.opt()}, a58Periods...)...)
		require.NoError(t, err)
		lc, err := NewLeastConn(theirs, clk.opt())
		require.NoError(t, err)
		rng := rand.New(rand.NewPCG(seed, 1))
		type pair struct{ mine, theirs *Peer }
		var out []pair
		report := load(0.5, 100, 0)
		for i := range 400 {
			if len(out) > 0 && rng.IntN(3) == 0 {
				k := rng.IntN(len(out))
				q := out[k]
				out = append(out[:k], out[k+1:]...)
				failed := rng.IntN(10) == 0
				o := Outcome{Failed: failed, Latency: time.Millisecond}
				require.NoError(t, lc.Done(q.theirs, o))
				o.Load = &report // ReportedWRR's servers report
				require.NoError(t, s.Done(q.mine, o))
				continue
			}
			p, err1 := s.Pick(nil)
			q, err2 := lc.Pick(nil)
			require.Equal(t, err2, err1, "seed %d pick %d", seed, i)
			if err1 != nil {
				continue
			}
			require.Equal(t, q.Addr(), p.Addr(), "seed %d pick %d", seed, i)
			out = append(out, pair{p, q})
			if i == 0 {
				// The first reply ends the first attempt: the cold start
				// begins.
				require.NoError(t, lc.Done(q, Outcome{Latency: time.Millisecond}))
				require.NoError(t, s.Done(p, Outcome{Latency: time.Millisecond, Load: &report}))
				out = out[:0]
			}
		}
		s.mu.Lock()
		cold := s.cold
		s.mu.Unlock()
		assert.True(t, cold, "seed %d: still in the blackout", seed)
	}
}

// TestReportedWRR_coldStartAllocs: a pick and its report in the cold
// start allocate nothing.
func TestReportedWRR_coldStartAllocs(t *testing.T) {
	for _, n := range []int{2, 10, 1000} {
		clk := newFakeClock()
		s, err := NewReportedWRR(benchPeers(n), append([]Option{clk.opt()}, a58Periods...)...)
		require.NoError(t, err)
		l := load(0.5, 100, 1)
		withLoad := Outcome{Latency: time.Millisecond, Load: &l}
		p, _ := s.Pick(nil)
		require.NoError(t, s.Done(p, withLoad))
		run := func() {
			clk.add(time.Millisecond) // a due recompute every 1000 runs: in the blackout throughout
			p, err := s.Pick(nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Done(p, withLoad); err != nil {
				t.Fatal(err)
			}
		}
		var before, after runtime.MemStats
		procs := runtime.GOMAXPROCS(1)
		runtime.ReadMemStats(&before)
		for range 2000 {
			run()
		}
		runtime.ReadMemStats(&after)
		runtime.GOMAXPROCS(procs)
		assert.Zero(t, after.Mallocs-before.Mallocs, "%d peers, 2000 Pick and Done in the cold start", n)
		s.mu.Lock()
		assert.True(t, s.cold, "%d peers: cold", n)
		s.mu.Unlock()
	}
}

// TestReportedWRR_coldStartConcurrent runs picks and reports from many
// goroutines through the cold start, its handover and list changes; run
// with -race. Every attempt is reported, so nothing stays in flight.
func TestReportedWRR_coldStartConcurrent(t *testing.T) {
	clk := newFakeClock()
	s, err := NewReportedWRR(benchPeers(12), append([]Option{clk.opt()}, a58Periods...)...)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Go(func() {
			var r Request
			for i := range 3000 {
				r.Reset()
				p, err := s.Pick(&r)
				if err != nil {
					continue
				}
				l := load(0.5, float64(50+(i+g)%100), 0)
				if err := s.Done(p, Outcome{Failed: i%101 == 0, Latency: time.Millisecond, Load: &l}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 400 {
			clk.add(50 * time.Millisecond) // 20 s: the blackout and beyond
		}
	})
	wg.Go(func() {
		for i := range 30 {
			if err := s.Update(benchPeers(12 - i%3)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	wg.Wait()
	for _, p := range s.Peers() {
		assert.Zero(t, p.InFlight(), "%s", p)
	}
}

// BenchmarkReportedWRR_cold measures a pick and its report in the cold
// start (LeastConn's scan under the lock) against the same once the
// weights count (the precomputed cycle), serially.
func BenchmarkReportedWRR_cold(b *testing.B) {
	for _, n := range []int{8, 100, 1000} {
		for _, phase := range []string{"cold", "weighted"} {
			b.Run(fmt.Sprintf("%s/%d", phase, n), func(b *testing.B) {
				clk := newFakeClock()
				opts := append([]Option{clk.opt()}, a58Periods...)
				if phase == "weighted" {
					opts = append(opts, WithBlackoutPeriod(0))
				}
				s, err := NewReportedWRR(benchPeers(n), opts...)
				require.NoError(b, err)
				l := load(0.5, 100, 0)
				o := Outcome{Latency: time.Millisecond, Load: &l}
				for range 2 * n {
					p, _ := s.Pick(nil)
					_ = s.Done(p, o)
				}
				clk.add(time.Second)
				p, _ := s.Pick(nil)
				_ = s.Done(p, o)
				s.mu.Lock()
				require.Equal(b, phase == "cold", s.cold)
				s.mu.Unlock()
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					p, _ := s.Pick(nil)
					_ = s.Done(p, Outcome{Latency: time.Millisecond})
				}
			})
		}
	}
}
