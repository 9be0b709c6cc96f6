package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestClaimTrust_hysteresis checks the ratio's path against its
// derivation: from agreement (1), k samples of s give r_k = s − (s − 1)·(7/8)^k,
// so samples clamped at 16 cross 8 at the first k with (7/8)^k < 8/15,
// k = 5; from r_5, samples of 1 give 1 + (r_5 − 1)·(7/8)^j, below 3 at the
// first j with (7/8)^j < 2/(r_5 − 1).
func TestClaimTrust_hysteresis(t *testing.T) {
	var c claimTrust
	assert.False(t, c.observe(float64(time.Second), 1), "no answer yet: nothing to judge")
	c.claim(0, 0, float64(10*time.Microsecond)) // "idle": 0 latency, 10 µs away
	wantK := int(math.Ceil(math.Log(8.0/15) / math.Log(7.0/8)))
	require.Equal(t, 5, wantK)
	k := 0
	for !c.observe(float64(20*time.Millisecond), 1) { // 2000× the implied 10 µs, clamped to 16
		k++
		require.Less(t, k, 100)
	}
	assert.Equal(t, wantK, k+1)
	r5 := 16 - 15*math.Pow(7.0/8, 5)
	c.distrusted.Store(true)
	c.claim(float64(time.Millisecond), 0, 0) // now it answers what it takes
	wantJ := int(math.Ceil(math.Log(2/(r5-1)) / math.Log(7.0/8)))
	j := 0
	for c.observe(float64(time.Millisecond), 1) {
		j++
		require.Less(t, j, 100)
	}
	assert.Equal(t, wantJ, j+1)

	// The implied latency scales with this client's attempts on the peer,
	// as the pool's score does: 2 ms at 1 in flight, 3 attempts → 2·3/2.
	c.claim(float64(2*time.Millisecond), 1, float64(time.Millisecond))
	assert.InDelta(t, float64(4*time.Millisecond), c.implied(3), 1)
	assert.InDelta(t, float64(3*time.Millisecond), c.implied(1), 1, "below the answered count: the answer's own")
}

// TestClampWeights checks the cap at maxWeightRatio × the median, the
// median of an even count being the mean of the middle two, and that
// fewer than three weights are left alone.
func TestClampWeights(t *testing.T) {
	var scratch []float64
	for _, c := range []struct {
		in, want []float64
		cut      int
	}{
		{[]float64{1, 1, 1, 1e9}, []float64{1, 1, 1, 3}, 1},       // median (1+1)/2
		{[]float64{1, 2, 0, 4, 1e9}, []float64{1, 2, 0, 4, 9}, 1}, // median of 1,2,4,1e9 is 3
		{[]float64{1, 2, 5}, []float64{1, 2, 5}, 0},               // 5 < 3×2
		{[]float64{1, 7, 2}, []float64{1, 6, 2}, 1},
		{[]float64{1, 1e9}, []float64{1, 1e9}, 0},
		{nil, nil, 0},
	} {
		w := append([]float64(nil), c.in...)
		assert.Equal(t, c.cut, clampWeights(w, &scratch), "%v", c.in)
		assert.Equal(t, c.want, w, "%v", c.in)
	}
	w := []float64{3, 1, 2, 100}
	assert.Zero(t, testing.AllocsPerRun(100, func() { clampWeights(w, &scratch) }))
}

// liarRun is one run of trustFleet: the picks each peer got, and the
// requests served by the end.
type liarRun struct {
	picks  []int
	served int
	total  int
}

// Lies a trustFleet server may tell.
const (
	honest    = iota
	probeIdle // probe answers: 0 in flight, 1 µs
	reportIdle
	reportNoRIF // reports: 0 in flight
)

// trustFleet runs n single-server FIFO queues of service time svc (the
// liar, peer 0, slow times slower) on the fake clock, an arrival every
// gap, each picked by b and ended at its completion (Done with the latency
// and, if reports, a report), Prequal's probes answered inline. An honest
// server answers its queue length and svc × (queue + 1); it reports its
// queue and, over the last second, its requests a second and its busy
// fraction. The liar does the same but for its lie.
func trustFleet(t *testing.T, clk *fakeClock, peers []*Peer, b Picker, slow float64, lie int, reports bool, picks int, gap time.Duration) liarRun {
	t.Helper()
	n := len(peers)
	svc := time.Millisecond
	type job struct{ sent, end int64 }
	queue := make([][]job, n)
	free := make([]int64, n)
	done := make([][]int64, n) // completion times in the last second
	index := map[*Peer]int{}
	for i, p := range peers {
		index[p] = i
	}
	service := func(i int) int64 {
		if i == 0 {
			return int64(float64(svc) * slow)
		}
		return int64(svc)
	}
	answer := func(i int) ProbeAnswer {
		if i == 0 && lie == probeIdle {
			return ProbeAnswer{InFlight: 0, Latency: time.Microsecond}
		}
		q := len(queue[i])
		return ProbeAnswer{InFlight: float64(q), Latency: time.Duration(service(i) * int64(q+1))}
	}
	if pq, ok := b.(*Prequal); ok {
		pq.prober = proberFunc(func(p *Peer, to ProbeReceiver) {
			i, ok := index[p]
			require.True(t, ok)
			require.NoError(t, to.Answer(p, answer(i)))
		})
	}
	run := liarRun{picks: make([]int, n)}
	settle := func(now int64) {
		for i := range queue {
			for len(queue[i]) > 0 && queue[i][0].end <= now {
				j := queue[i][0]
				queue[i] = queue[i][1:]
				run.served++
				w := done[i][:0]
				for _, at := range done[i] {
					if at > j.end-int64(time.Second) {
						w = append(w, at)
					}
				}
				done[i] = append(w, j.end)
				o := Outcome{Latency: time.Duration(j.end - j.sent)}
				if reports {
					rps := float64(len(done[i]))
					l := &ServerLoad{RPS: rps, Utilization: min(1, rps*float64(service(i))/float64(time.Second)), InFlight: float64(len(queue[i]) + 1), HasInFlight: true}
					switch {
					case i == 0 && lie == reportIdle:
						l.Utilization = 1e-9
					case i == 0 && lie == reportNoRIF:
						l.InFlight = 0
					}
					o.Load = l
				}
				require.NoError(t, b.Done(peers[i], o))
			}
		}
	}
	for range picks {
		clk.add(gap)
		now := clk.now().UnixNano()
		settle(now)
		p, err := b.Pick(nil)
		require.NoError(t, err)
		i := index[p]
		run.picks[i]++
		run.total++
		end := max(now, free[i]) + service(i)
		free[i] = end
		queue[i] = append(queue[i], job{now, end})
	}
	return run
}

// TestTrust_liar runs each lie against the pickers it could fool, over
// three seeds: ten servers of 1 ms, the liar 10× slower where it lies
// about its latency (a slow server behind a probe handler that sees none
// of its traffic) and as fast as the others where it lies in its reports,
// at 70% of the fleet's capacity. The liar's share must stay within 3×
// its fair share (a tenth) and the requests served by the end within 0.8×
// those of the run where it tells the truth.
func TestTrust_liar(t *testing.T) {
	if underRace {
		t.Skip("one goroutine on a fake clock: the plain run covers it, in a seventh of the time")
	}
	const n, picks = 10, 40000
	type ctor func(peers []*Peer, opts ...Option) (Picker, error)
	prequal := func(p []*Peer, o ...Option) (Picker, error) {
		return NewPrequal(p, append(o, WithProber(proberFunc(func(*Peer, ProbeReceiver) {})))...)
	}
	rwrr := func(p []*Peer, o ...Option) (Picker, error) {
		return NewReportedWRR(p, append(o, WithBlackoutPeriod(0), WithWeightUpdatePeriod(100*time.Millisecond), WithWeightExpirationPeriod(3*time.Second))...)
	}
	reported := func(name string) ctor {
		return func(p []*Peer, o ...Option) (Picker, error) {
			a, err := AlgorithmNamed(name)
			if err != nil {
				return nil, err
			}
			if !a.Random {
				o = o[:1] // the clock only
			}
			return a.New(p, append(o, WithReportedLoad(10*time.Second, 1))...)
		}
	}
	for _, c := range []struct {
		picker string
		new    ctor
		lie    int
		slow   float64
	}{
		{"Prequal", prequal, probeIdle, 10},
		{"Prequal", prequal, probeIdle, 1e4}, // it replies after the run: only the count can tell
		{"ReportedWRR", rwrr, reportIdle, 1},
		{"LeastConn", reported("LeastConn"), reportNoRIF, 1},
		{"RandomTwo", reported("RandomTwo"), reportNoRIF, 1},
		{"P2CPeakEWMA", reported("P2CPeakEWMA"), reportNoRIF, 1},
		{"FastestFirst", reported("FastestFirst"), reportNoRIF, 1},
	} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("%s/%gx/seed%d", c.picker, c.slow, seed), func(t *testing.T) {
				capacity := float64(n-1) + 1/c.slow // requests a ms
				gap := time.Duration(float64(time.Millisecond) / (0.7 * capacity))
				var runs [2]liarRun
				for k, lie := range []int{honest, c.lie} {
					clk := newFakeClock()
					peers := makePeers(n, letter, nil)
					b, err := c.new(peers, clk.opt(), WithRand(rand.NewPCG(seed, 7)))
					require.NoError(t, err)
					runs[k] = trustFleet(t, clk, peers, b, c.slow, lie, true, picks, gap)
				}
				share := float64(runs[1].picks[0]) / picks
				tput := float64(runs[1].served) / float64(runs[0].served)
				t.Logf("liar's share %.3f (honest %.3f), served %.3f× the honest run's", share, float64(runs[0].picks[0])/picks, tput)
				assert.LessOrEqual(t, share, 3.0/n, "liar's share")
				assert.GreaterOrEqual(t, tput, 0.8, "served, against the honest run")
			})
		}
	}
}

// TestClaimTrust_floor checks the latency floor: the fastest reply of the
// current floor period and, while it is young, of the previous one, less
// the round trip; nothing once two periods pass without a reply.
func TestClaimTrust_floor(t *testing.T) {
	var c claimTrust
	ms := func(x float64) float64 { return x * float64(time.Millisecond) }
	t0 := int64(time.Hour)
	p := floorPeriod
	lat, up := c.raiseLatency(0, ms(1), t0)
	assert.Equal(t, 0.0, lat, "no reply yet: the answer stands")
	assert.False(t, up)
	c.fastestReply(ms(30), t0) // opens a period at t0
	c.fastestReply(ms(20), t0+ms2ns(1))
	c.fastestReply(ms(25), t0+ms2ns(2))
	for _, s := range []struct {
		at        int64
		lat, want float64
		up        bool
	}{
		{t0 + ms2ns(3), 0, ms(19), true}, // 20 ms less the 1 ms round trip
		{t0 + ms2ns(3), ms(25), ms(25), false},
		{t0 + p + ms2ns(3), 0, ms(19), true}, // the period has ended: its fastest still counts
		{t0 + 2*p, 0, 0, false},              // two periods without a reply: none
	} {
		lat, up := c.raiseLatency(s.lat, ms(1), s.at)
		assert.InDelta(t, s.want, lat, 1, "at %v", time.Duration(s.at-t0))
		assert.Equal(t, s.up, up, "at %v", time.Duration(s.at-t0))
	}
	// A reply in a new period: the previous period's fastest counts while
	// the new one is under a period old, then only the new one's.
	c.fastestReply(ms(40), t0+p+ms2ns(500))
	lat, _ = c.raiseLatency(0, 0, t0+p+ms2ns(600))
	assert.InDelta(t, ms(20), lat, 1)
	lat, _ = c.raiseLatency(0, 0, t0+2*p+ms2ns(600))
	assert.InDelta(t, ms(40), lat, 1)
}

func ms2ns(x int64) int64 { return x * int64(time.Millisecond) }

// TestReportedWRR_trustLocked checks the two cuts on one list: the cap at
// 3× the median weight, then the median weight for a peer weighted above
// it whose replies are more than four times the median latency.
func TestReportedWRR_trustLocked(t *testing.T) {
	peers := makePeers(5, letter, nil)
	s, err := NewReportedWRR(peers)
	require.NoError(t, err)
	// Weights 100 (×3), 250 and 1e9 (median 100: cap 300); latencies
	// 10, 10, 10, 50, 10 ms (median 10: slow above 40).
	for i, l := range []float64{10, 10, 10, 50, 10} {
		rwrrOf(peers[i]).replies.observe(l * 1e6)
	}
	s.mu.Lock()
	s.share = []float64{100, 100, 100, 250, 1e9}
	cut := s.trustLocked(peers)
	got := append([]float64(nil), s.share...)
	s.mu.Unlock()
	assert.Equal(t, 2, cut)
	assert.Equal(t, []float64{100, 100, 100, 100, 300}, got, "e capped at 300, d slow: the median")
	// A slow peer below the median weight is left alone: it reports its
	// load, and its weight already says so.
	s.mu.Lock()
	s.share = []float64{100, 100, 100, 50, 120}
	cut = s.trustLocked(peers)
	got = append([]float64(nil), s.share...)
	s.mu.Unlock()
	assert.Zero(t, cut)
	assert.Equal(t, []float64{100, 100, 100, 50, 120}, got)
	s.mu.Lock()
	allocs := testing.AllocsPerRun(100, func() { s.share = append(s.share[:0], 100, 100, 100, 250, 1e9); s.trustLocked(peers) })
	s.mu.Unlock()
	assert.Zero(t, allocs)
}
