package balancer

import (
	"container/heap"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/internal/defaults"
)

// FastestFirst's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("FastestFirst", fuzzTrait{zeroWeight: zwEligible, exploreOne: true, probeFirst: true})

// newTestFF returns a FastestFirst over peers on clk.
func newTestFF(t *testing.T, clk *fakeClock, peers []*Peer, opts ...Option) *FastestFirst {
	t.Helper()
	f, err := NewFastestFirst(peers, append([]Option{clk.opt()}, opts...)...)
	require.NoError(t, err)
	return f
}

// ffReply is what a test backend answers at a given time.
type ffReply struct {
	lat    time.Duration
	failed bool
}

// ffLoop drives a picker on a fake clock as a closed loop that keeps a
// number of attempts in flight: whenever the earliest attempt answers, the
// clock moves to that instant, Done reports it, and a new attempt is
// picked. answer gives the reply of peer i to an attempt picked at a time
// since the loop started.
type ffLoop struct {
	t      *testing.T
	p      Picker
	clk    *fakeClock
	peers  []*Peer
	answer func(i int, at time.Duration) ffReply
	start  time.Time
	out    []ffFlight
	onPick func(*Peer) // called after every pick, if not nil
}

// ffFlight is an attempt in flight in an ffLoop.
type ffFlight struct {
	peer *Peer
	at   time.Time // when the reply arrives
	r    ffReply
}

func newFFLoop(t *testing.T, p Picker, clk *fakeClock, peers []*Peer, answer func(int, time.Duration) ffReply) *ffLoop {
	return &ffLoop{t: t, p: p, clk: clk, peers: peers, answer: answer, start: clk.now()}
}

// elapsed returns the loop's time since it started.
func (l *ffLoop) elapsed() time.Duration { return l.clk.now().Sub(l.start) }

// run keeps outstanding attempts in flight until the loop's clock reaches
// until, and returns the attempts each peer got meanwhile.
func (l *ffLoop) run(outstanding int, until time.Duration) []int {
	l.t.Helper()
	got := make([]int, len(l.peers))
	for {
		for len(l.out) < outstanding {
			p, err := l.p.Pick(nil)
			if err != nil {
				l.t.Fatalf("Pick() at %v: %v", l.elapsed(), err)
			}
			i := slices.Index(l.peers, p)
			got[i]++
			if l.onPick != nil {
				l.onPick(p)
			}
			r := l.answer(i, l.elapsed())
			l.out = append(l.out, ffFlight{p, l.clk.now().Add(r.lat), r})
		}
		k := 0
		for j := range l.out {
			if l.out[j].at.Before(l.out[k].at) {
				k = j
			}
		}
		next := l.out[k]
		if next.at.Sub(l.start) > until {
			return got
		}
		l.clk.set(next.at)
		l.out = slices.Delete(l.out, k, k+1)
		if err := l.p.Done(next.peer, Outcome{Latency: next.r.lat, Failed: next.r.failed}); err != nil {
			l.t.Fatalf("Done(%v) at %v: %v", next.peer, l.elapsed(), err)
		}
	}
}

// fixed answers every attempt on peer i in lat[i].
func ffFixed(lat ...time.Duration) func(int, time.Duration) ffReply {
	return func(i int, _ time.Duration) ffReply { return ffReply{lat: lat[i]} }
}

// weights returns the derived weight of every peer.
func ffWeights(peers []*Peer) []int {
	w := make([]int, len(peers))
	for i, p := range peers {
		w[i] = p.State().DerivedWeight
	}
	return w
}

// ffExpectedWeights derives the weights of law 1 by hand from steady
// latencies: the fastest latency m, s_i = min(1, tol·m/lat_i)², scaled to
// 100 for the largest and rounded, at least 1.
func ffExpectedWeights(tol float64, lat ...time.Duration) []int {
	m := slices.Min(lat)
	w := make([]int, len(lat))
	for i, l := range lat {
		s := math.Min(1, tol*float64(m)/float64(l))
		w[i] = max(1, int(math.Round(100*s*s)))
	}
	return w
}

func TestFastestFirst_law1_slowerGetsLess(t *testing.T) {
	tests := []struct {
		name string
		lat  []time.Duration
	}{
		// Beyond the tolerance the weight falls as (3·10/lat)²: 100, 56, 14.
		{"beyond the tolerance", []time.Duration{10 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond}},
		// Within it the weights stay equal, and the slower peers get less
		// because their attempts stay in flight longer.
		{"within the tolerance", []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, 25 * time.Millisecond}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(1, 1, 1)
			f := newTestFF(t, clk, peers)
			loop := newFFLoop(t, f, clk, peers, ffFixed(tt.lat...))
			loop.run(16, time.Second)
			got := loop.run(16, 10*time.Second)
			want := ffExpectedWeights(defaults.Tolerance, tt.lat...)
			for i, w := range ffWeights(peers) {
				// ±1: an estimate read between two replies has decayed a
				// little toward the fastest.
				assert.InDelta(t, want[i], w, 1, "weights %v, want %v", ffWeights(peers), want)
			}
			assert.Greater(t, got[0], got[1], "attempts %v", got)
			assert.Greater(t, got[1], got[2], "attempts %v", got)
		})
	}
}

func TestFastestFirst_law2_failingFloorsAndRecovers(t *testing.T) {
	const fail, heal = 10 * time.Second, 60 * time.Second
	tests := []struct {
		name     string
		maxFails int
	}{
		{"nginx defaults: out for fail_timeout, then probed", defaults.MaxFails},
		{"max_fails=0: never out, still probed", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := []*Peer{NewPeer("a", MaxFails(tt.maxFails)), NewPeer("b", MaxFails(tt.maxFails)), NewPeer("c", MaxFails(tt.maxFails))}
			f := newTestFF(t, clk, peers)
			// b fails in 1 ms during [fail, heal); everyone else, and b
			// outside that interval, answers in 20 ms.
			loop := newFFLoop(t, f, clk, peers, func(i int, at time.Duration) ffReply {
				if i == 1 && at >= fail && at < heal {
					return ffReply{lat: time.Millisecond, failed: true}
				}
				return ffReply{lat: 20 * time.Millisecond}
			})
			healthy := loop.run(4, fail)
			require.Equal(t, []int{100, 100, 100}, ffWeights(peers))

			failing := loop.run(4, heal)
			assert.Equal(t, defaults.Floor, peers[1].State().DerivedWeight, "b's weight is at the floor")
			assert.Contains(t, f.Peers(), peers[1], "b is not removed")
			// A failure is answered within one fail_timeout by a probe,
			// and probes come at most once per fail_timeout: from the
			// failures on record it is at least 1, and at most one per
			// window, plus the attempts that saw the first failure.
			windows := int((heal - fail) / defaults.FailTimeout)
			assert.GreaterOrEqual(t, failing[1], windows-1, "b keeps being probed: %v", failing)
			assert.LessOrEqual(t, failing[1], windows+5, "b gets little more than its probes: %v", failing)

			// Recovered: the next probe succeeds within a fail_timeout
			// and b's weight and share come back.
			loop.run(4, heal+defaults.FailTimeout+time.Second)
			assert.Equal(t, 100, peers[1].State().DerivedWeight)
			recovered := loop.run(4, heal+defaults.FailTimeout+11*time.Second)
			assert.InDelta(t, float64(healthy[1])/float64(healthy[0]), float64(recovered[1])/float64(recovered[0]), 0.1,
				"b's share relative to a: healthy %v, recovered %v", healthy, recovered)
		})
	}
}

func TestFastestFirst_law3_stableInsideBand(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1, 1)
	f := newTestFF(t, clk, peers)
	// a and b jitter within the tolerance of each other; c, beyond it,
	// alternates by 10%, inside its band.
	slow := 40 * time.Millisecond
	n := 0
	loop := newFFLoop(t, f, clk, peers, func(i int, _ time.Duration) ffReply {
		n++
		jitter := time.Duration(n%3) * time.Millisecond
		switch i {
		case 0:
			return ffReply{lat: 10*time.Millisecond + jitter}
		case 1:
			return ffReply{lat: 14*time.Millisecond + jitter}
		}
		if n%2 == 0 {
			return ffReply{lat: slow}
		}
		return ffReply{lat: slow * 11 / 10}
	})
	loop.run(16, 5*time.Second)
	before, recomputes := ffWeights(peers), f.recomputes
	got := loop.run(16, 60*time.Second)
	assert.Equal(t, before, ffWeights(peers))
	assert.Equal(t, recomputes, f.recomputes, "no recompute inside the bands")
	assert.Positive(t, got[2], "c keeps traffic")

	// A real change, c twice slower: its weight drops, then holds again.
	slow *= 2
	loop.run(16, 61*time.Second)
	after, recomputes := ffWeights(peers), f.recomputes
	assert.Less(t, after[2], before[2], "c's weight drops")
	loop.run(16, 120*time.Second)
	assert.Equal(t, after, ffWeights(peers))
	assert.Equal(t, recomputes, f.recomputes, "no recompute after the change")
}

func TestFastestFirst_law4_refindsFastest(t *testing.T) {
	tests := []struct {
		name        string
		outstanding int
	}{
		// One attempt at a time: b, at the floor, gets nothing; only the
		// decay of its estimate toward the fastest brings it back.
		{"idle", 1},
		{"loaded", 16},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(1, 1)
			f := newTestFF(t, clk, peers)
			const change = 10 * time.Second
			loop := newFFLoop(t, f, clk, peers, func(i int, at time.Duration) ffReply {
				switch {
				case i == 0:
					return ffReply{lat: 20 * time.Millisecond}
				case at < change:
					return ffReply{lat: 400 * time.Millisecond}
				}
				return ffReply{lat: 5 * time.Millisecond}
			})
			slow := loop.run(tt.outstanding, change)
			require.Greater(t, slow[0], 10*slow[1], "b is slow: attempts %v", slow)

			// b becomes the fastest: it must win its weight back within a
			// few decay times and, once its estimate has followed, take
			// most of the traffic.
			for ffWeights(peers)[1] < 100 {
				loop.run(tt.outstanding, loop.elapsed()+100*time.Millisecond)
				require.Less(t, loop.elapsed()-change, 3*defaults.FastestDecay, "b still at %v", ffWeights(peers))
			}
			loop.run(tt.outstanding, change+5*defaults.FastestDecay)
			got := loop.run(tt.outstanding, change+7*defaults.FastestDecay)
			assert.Greater(t, got[1], 2*got[0], "attempts %v weights %v est %v %v", got, ffWeights(peers), latOf(peers[0]).estimate(), latOf(peers[1]).estimate())
		})
	}
}

// A peer whose weight has grown back through the decay of its estimate is
// probed one attempt at a time until its replies bear the weight out: c,
// measured slow a minute ago and silent since, looks as fast as the others
// now, yet must not get a second attempt before its first slow reply.
func TestFastestFirst_staleEstimateProbedOneAtATime(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1, 1)
	f := newTestFF(t, clk, peers)
	f.mu.Lock()
	latOf(peers[2]).observe(clk.now().UnixNano(), float64(400*time.Millisecond), f.tau)
	clk.add(time.Minute)
	for _, p := range peers[:2] {
		latOf(p).observe(clk.now().UnixNano(), float64(20*time.Millisecond), f.tau)
	}
	f.recomputeLocked(f.load().primary, 0, clk.now().UnixNano())
	f.mu.Unlock()
	require.Equal(t, []int{100, 100, 100}, ffWeights(peers), "c's estimate has decayed to the others'")

	most := 0
	loop := newFFLoop(t, f, clk, peers, ffFixed(20*time.Millisecond, 20*time.Millisecond, 400*time.Millisecond))
	loop.onPick = func(p *Peer) {
		if p == peers[2] {
			most = max(most, p.InFlight())
		}
	}
	got := loop.run(16, 10*time.Second)
	assert.Equal(t, 1, most, "c's attempts in flight at most")
	assert.Positive(t, got[2], "c is probed")
}

// A stalled peer loses weight before its first slow reply: its silence
// raises its estimate.
func TestFastestFirst_stallShowsBeforeItsReply(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1, 1)
	f := newTestFF(t, clk, peers)
	const stall = 5 * time.Second
	loop := newFFLoop(t, f, clk, peers, func(i int, at time.Duration) ffReply {
		if i == 2 && at >= stall {
			return ffReply{lat: time.Minute}
		}
		return ffReply{lat: 10 * time.Millisecond}
	})
	loop.run(6, stall)
	got := loop.run(6, stall+time.Second)
	assert.Equal(t, defaults.Floor, peers[2].State().DerivedWeight, "no ffReply yet, weight at the floor")
	assert.LessOrEqual(t, got[2], 3, "attempts sent into the stall: %v", got)
}

// A fast failure counts as a latency that puts the peer at the floor, and
// at least the penalty.
func TestFastestFirst_failurePenalty(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		want time.Duration
	}{
		// The fastest is 10 ms: the floor estimate is 3·10 ms·√100·1.25.
		{"floor estimate above the default penalty", nil, defaults.FailurePenalty},
		{"floor estimate above a small penalty", []Option{WithFailurePenalty(time.Millisecond)}, 375 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := []*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0))}
			f := newTestFF(t, clk, peers, tt.opts...)
			loop := newFFLoop(t, f, clk, peers, ffFixed(10*time.Millisecond, 10*time.Millisecond))
			loop.run(2, time.Second)
			p := peers[1]
			p.pick() // an attempt on b, as Pick would count it
			require.NoError(t, f.Done(p, Outcome{Failed: true, Latency: time.Millisecond}))
			assert.InDelta(t, float64(tt.want), latOf(p).estimate(), float64(time.Microsecond))
			assert.Equal(t, defaults.Floor, p.State().DerivedWeight)
		})
	}
}

func TestFastestFirst_options(t *testing.T) {
	tests := []struct {
		name string
		opts []Option
		ok   bool
	}{
		{"defaults", nil, true},
		{"all of them", []Option{WithClock(time.Now), WithDecay(time.Second), WithFailurePenalty(time.Second),
			WithBand(1.5), WithExponent(1), WithFloor(5), WithTolerance(2)}, true},
		{"exponent 0 ignores latency", []Option{WithExponent(0)}, true},
		{"rand seeds the sampled mode", []Option{WithRand(rand.NewPCG(1, 2))}, true},
		{"warm-up is not used", []Option{WithWarmup(time.Second)}, false},
		{"zero decay", []Option{WithDecay(0)}, false},
		{"negative penalty", []Option{WithFailurePenalty(-1)}, false},
		{"band 1", []Option{WithBand(1)}, false},
		{"band NaN", []Option{WithBand(math.NaN())}, false},
		{"exponent 9", []Option{WithExponent(9)}, false},
		{"floor 0", []Option{WithFloor(0)}, false},
		{"floor 101", []Option{WithFloor(101)}, false},
		{"tolerance below 1", []Option{WithTolerance(0.5)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewFastestFirst(weighted(1, 1), tt.opts...)
			if tt.ok {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, ErrInvalidConfig)
			}
		})
	}
	t.Run("P2CPeakEWMA rejects FastestFirst's tuning", func(t *testing.T) {
		_, err := NewP2CPeakEWMA(weighted(1, 1), WithBand(2))
		assert.ErrorIs(t, err, ErrInvalidConfig)
	})
	t.Run("SmoothWRR rejects the latency options", func(t *testing.T) {
		_, err := NewSmoothWRR(weighted(1, 1), WithDecay(time.Second))
		assert.ErrorIs(t, err, ErrInvalidConfig)
	})
}

// Configured weights scale the derived ones, which go to the effective
// weights; the configured weights stay as they are, and SetWeight changes
// them.
func TestFastestFirst_configuredWeights(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(4, 2, 0)
	f := newTestFF(t, clk, peers)
	assert.Equal(t, []int{100, 50, 0}, ffWeights(peers), "100 for the largest, 0 stays 0")
	assert.Equal(t, 2, peers[1].Weight())

	require.NoError(t, f.SetWeight(peers[1], 8))
	assert.Equal(t, 8, peers[1].Weight())
	assert.Equal(t, []int{50, 100, 0}, ffWeights(peers))

	require.NoError(t, f.Remove(peers[1]))
	assert.Equal(t, []int{100, 0}, ffWeights(f.Peers()))
	for range 10 {
		assert.Equal(t, "a", mustPick(t, f, nil).Addr(), "weight 0 is never chosen while another has weight")
	}
}

func TestFastestFirst_failureModel(t *testing.T) {
	t.Run("backup when no primary is eligible", func(t *testing.T) {
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a"), NewPeer("b", Backup())}
		f := newTestFF(t, clk, peers)
		var r Request
		p := mustPick(t, f, &r)
		require.Equal(t, "a", p.Addr())
		require.NoError(t, f.Done(p, Outcome{Failed: true}))
		assert.Equal(t, "b", mustPick(t, f, &r).Addr())
		_, err := f.Pick(&r)
		assert.ErrorIs(t, err, ErrTriesExhausted)
	})
	t.Run("fail window, then one probe", func(t *testing.T) {
		clk := newFakeClock()
		peers := weighted(1, 1)
		f := newTestFF(t, clk, peers)
		require.NoError(t, f.SetDown(peers[0], true))
		p := mustPick(t, f, nil)
		require.NoError(t, f.Done(p, Outcome{Failed: true}))
		clk.add(defaults.FailTimeout)
		_, err := f.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer, "inside the window")
		clk.add(time.Second)
		probe := mustPick(t, f, nil)
		_, err = f.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer, "while the probe is out")
		require.NoError(t, f.Done(probe, Outcome{Latency: time.Millisecond}))
		assert.Equal(t, probe, mustPick(t, f, nil))
	})
	t.Run("single peer ignores max_fails", func(t *testing.T) {
		clk := newFakeClock()
		f := newTestFF(t, clk, []*Peer{NewPeer("a")})
		p := mustPick(t, f, nil)
		require.NoError(t, f.Done(p, Outcome{Failed: true}))
		assert.Equal(t, p, mustPick(t, f, nil))
	})
	t.Run("no peers", func(t *testing.T) {
		f := newTestFF(t, newFakeClock(), nil)
		_, err := f.Pick(nil)
		assert.ErrorIs(t, err, ErrNoPeers)
	})
	t.Run("done errors", func(t *testing.T) {
		f := newTestFF(t, newFakeClock(), weighted(1, 1))
		p := mustPick(t, f, nil)
		assert.ErrorIs(t, f.Done(p, Outcome{Latency: -1}), ErrInvalidLatency)
		require.NoError(t, f.Done(p, Outcome{}))
		assert.ErrorIs(t, f.Done(p, Outcome{}), ErrNotInFlight)
	})
}

func TestFastestFirst_leastExpectedDelay(t *testing.T) {
	t.Run("idle: the heaviest, equal weights in smooth order", func(t *testing.T) {
		f := newTestFF(t, newFakeClock(), weighted(5, 1, 1, 1))
		require.Equal(t, []int{100, 20, 20, 20}, ffWeights(f.Peers()))
		// Nothing in flight: a's 1/100 beats 1/20 every time.
		assert.Equal(t, "a a a a", picks(t, f, 4))

		g := newTestFF(t, newFakeClock(), weighted(1, 1, 1))
		// All tied at 1/100: nginx's smooth order over equal weights.
		assert.Equal(t, "a b c a b c", picks(t, g, 6))
	})
	t.Run("in ffFlight: (in ffFlight + 1)/weight", func(t *testing.T) {
		f := newTestFF(t, newFakeClock(), weighted(5, 1))
		require.Equal(t, []int{100, 20}, ffWeights(f.Peers()))
		// Attempts left in flight: a takes the next while (n_a+1)/100 is
		// below (n_b+1)/20, that is n_a+1 < 5(n_b+1); ties go to the
		// smooth step over the tied peers, whose effective weights are
		// 100 and 20.
		var want []string
		var na, nb, cwa, cwb int
		for range 12 {
			switch {
			case (na+1)*20 < (nb+1)*100:
				want, na = append(want, "a"), na+1
			case (na+1)*20 > (nb+1)*100:
				want, nb = append(want, "b"), nb+1
			default:
				cwa, cwb = cwa+100, cwb+20
				if cwa >= cwb {
					want, na, cwa = append(want, "a"), na+1, cwa-120
				} else {
					want, nb, cwb = append(want, "b"), nb+1, cwb-120
				}
			}
		}
		var got []string
		for range 12 {
			got = append(got, mustPick(t, f, nil).Addr())
		}
		assert.Equal(t, want, got)
	})
}

func TestFastestFirst_pickAllocs(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(5, letter, func(i int) []PeerOption { return []PeerOption{Weight(i + 1), MaxFails(0)} })
	f := newTestFF(t, clk, peers)
	var r Request
	k := 0
	allocs := testing.AllocsPerRun(1000, func() {
		k++
		clk.add(time.Millisecond)
		r.Reset()
		p, err := f.Pick(&r)
		if err == nil {
			// Latencies that keep leaving the bands, so that the
			// recomputes are measured too.
			err = f.Done(p, Outcome{Latency: time.Duration(1+k%50) * time.Millisecond, Failed: k%97 == 0})
		}
		if err != nil {
			panic(err)
		}
	})
	assert.Zero(t, allocs)
	assert.Positive(t, f.recomputes)
}

// Run with -race: picks and reports from many goroutines.
func TestFastestFirst_concurrent(t *testing.T) {
	ws := []int{1, 1, 2, 3}
	peers := makePeers(len(ws), letter, func(i int) []PeerOption { return []PeerOption{Weight(ws[i]), MaxFails(0)} })
	f, err := NewFastestFirst(peers)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for k := range 500 {
				p, err := f.Pick(nil)
				if !assert.NoError(t, err) {
					return
				}
				assert.NoError(t, f.Done(p, Outcome{Latency: time.Duration(k%7+g) * time.Millisecond, Failed: k%50 == g}))
			}
		})
		wg.Go(func() {
			for range 50 {
				_ = peers[g].State()
			}
		})
	}
	wg.Wait()
	for _, p := range f.Peers() {
		assert.Zero(t, p.InFlight())
	}
}

// ffToyDone is a reply due at a time, in a toy simulation's event queue.
type ffToyDone struct {
	at   time.Duration
	peer *Peer
	lat  time.Duration
}

type ffToyQueue []ffToyDone

func (q ffToyQueue) Len() int           { return len(q) }
func (q ffToyQueue) Less(i, j int) bool { return q[i].at < q[j].at }
func (q ffToyQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *ffToyQueue) Push(x any)        { *q = append(*q, x.(ffToyDone)) }
func (q *ffToyQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// toyBrownout runs a small open-loop brownout: five single-server FIFO
// backends of 10 ms mean exponential service at 70% load, backend 2 ten
// times slower during [10 s, 20 s) of 30 s. Arrivals and request sizes come
// from a fixed seed, so every picker sees the same workload. It returns the
// 99th percentile of the request latencies.
func ffToyBrownout(t *testing.T, newPicker func(now func() time.Time) Picker) time.Duration {
	t.Helper()
	const (
		backends = 5
		mean     = 10 * time.Millisecond
		rate     = 0.7 * backends / 0.010 // requests per second
		length   = 30 * time.Second
	)
	clk := newFakeClock()
	start := clk.now()
	p := newPicker(clk.now)
	peers := p.(interface{ Peers() []*Peer }).Peers()
	rng := rand.New(rand.NewPCG(7, 8))
	free := make([]time.Duration, backends) // when each server is next idle
	var q ffToyQueue
	var lats []time.Duration
	settle := func(until time.Duration) {
		for q.Len() > 0 && q[0].at <= until {
			d := heap.Pop(&q).(ffToyDone)
			clk.set(start.Add(d.at))
			require.NoError(t, p.Done(d.peer, Outcome{Latency: d.lat}))
		}
	}
	for now := time.Duration(0); now < length; {
		now += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		size := rng.ExpFloat64()
		settle(now)
		clk.set(start.Add(now))
		peer := mustPick(t, p, nil)
		i := slices.Index(peers, peer)
		service := time.Duration(size * float64(mean))
		if i == 2 && now >= 10*time.Second && now < 20*time.Second {
			service *= 10
		}
		begin := max(now, free[i])
		free[i] = begin + service
		lat := free[i] - now
		lats = append(lats, lat)
		heap.Push(&q, ffToyDone{at: free[i], peer: peer, lat: lat})
	}
	settle(math.MaxInt64)
	slices.Sort(lats)
	return lats[len(lats)*99/100]
}

// FastestFirst's in-flight and silence terms must beat the power of two
// choices on a brownout's tail, as the issue requires; this is the small
// deterministic version of the simulator's brownout scenario.
func TestFastestFirst_beatsP2CInToyBrownout(t *testing.T) {
	peers := func() []*Peer { return weighted(1, 1, 1, 1, 1) }
	ff := ffToyBrownout(t, func(now func() time.Time) Picker {
		f, err := NewFastestFirst(peers(), WithClock(now))
		require.NoError(t, err)
		return f
	})
	p2c := ffToyBrownout(t, func(now func() time.Time) Picker {
		b, err := NewP2CPeakEWMA(peers(), WithClock(now), WithRand(rand.NewPCG(9, 10)))
		require.NoError(t, err)
		return b
	})
	t.Logf("p99: FastestFirst %v, P2CPeakEWMA %v", ff, p2c)
	assert.Less(t, ff, p2c)
}

// Exploring peers are probed one attempt at a time, but that is a
// preference: when every peer is exploring with its attempt out, a pick
// still gets a peer rather than ErrNoLivePeer.
func TestFastestFirst_allExploringStillPicks(t *testing.T) {
	clk := newFakeClock()
	a, b := NewPeer("a"), NewPeer("b")
	f, err := NewFastestFirst([]*Peer{a, b}, clk.opt())
	require.NoError(t, err)
	for range 4 {
		p := mustPick(t, f, nil)
		require.NoError(t, f.Done(p, Outcome{Latency: 10 * time.Millisecond}))
	}
	var r Request
	for range 2 {
		p := mustPick(t, f, &r)
		require.NoError(t, f.Done(p, Outcome{Failed: true, Latency: time.Millisecond}))
	}
	clk.add(11 * time.Second)
	for range 2 {
		p := mustPick(t, f, nil) // the probes, which succeed
		require.NoError(t, f.Done(p, Outcome{Latency: 10 * time.Millisecond}))
	}
	require.True(t, ffOf(a).exploring.Load() && ffOf(b).exploring.Load(), "setup: both peers exploring")
	for range 3 {
		mustPick(t, f, nil) // held in flight
	}
}
