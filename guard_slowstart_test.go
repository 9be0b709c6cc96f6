package balancer

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// slowStartPickers are the pickers that accept WithSlowStart: those whose
// choice a weight drives.
var slowStartPickers = []string{"SmoothWRR", "ClassicWRR", "RandomWeighted", "LeastConn", "P2CPeakEWMA", "FastestFirst", "Random", "RandomTwo", "ReportedWRR"}

// TestSlowStart_declared holds the declarations to the list above: the
// weighted pickers accept WithSlowStart, every other one refuses it with
// ErrInvalidConfig and says why.
func TestSlowStart_declared(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, err := pc.new([]*Peer{NewPeer("a")}, WithSlowStart(time.Second, 1, 10))
		if slices.Contains(slowStartPickers, pc.name) {
			assert.NoError(t, err)
			return
		}
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "WithSlowStart: "+slowStartRefused[pc.name])
		assert.NotEmpty(t, slowStartRefused[pc.name], "a refusal says why")
	})
}

// slowFactor is Envoy's factor, written from its documentation
// independently of the code under test: max(min, (max(t, 1 ms)/window)^(1/a)),
// 1 from the window on.
func slowFactor(t, window time.Duration, aggression, minPct float64) float64 {
	if t >= window {
		return 1
	}
	tf := float64(max(t, time.Millisecond)) / float64(window)
	return math.Max(minPct/100, math.Pow(tf, 1/aggression))
}

// expectedShare is the share of the picks the warming peer x takes, among
// peers of weight 1 with factors fs, picked with nothing in flight (every
// pick reported at once), so that every load ties.
//
//   - The weighted round robins, LeastConn (its ties go to nginx's smooth
//     step), the weighted random draws and the two-choice pickers that keep
//     the first drawn on a tie: the weights, fs[x]/Σfs. At t = 5 s of a
//     10 s window, f = 0.5 and the share is 0.5/3.5 = 0.143.
//   - RandomTwo keeps the second drawn on a tie (nginx's random two): the
//     second of two distinct draws by weight, Σ_{a≠x} fs[a]/S ·
//     fs[x]/(S − fs[a]), S = Σfs.
func expectedShare(name string, fs []float64, x int) float64 {
	var s float64
	for _, f := range fs {
		s += f
	}
	if name != "RandomTwo" {
		return fs[x] / s
	}
	var share float64
	for a, f := range fs {
		if a != x {
			share += f / s * fs[x] / (s - f)
		}
	}
	return share
}

// loadedShare is the warming peer's share under FastestFirst with k
// attempts held in flight, each reported k picks after it was picked
// (first in, first out): in the steady state the picks then split as the
// counts in flight do (each attempt is held for k picks), and
// FastestFirst's least expected delay, (in flight + 1)/weight, evens out
// (c_o + 1)/1 = (c_x + 1)/f over 3·c_o + c_x = k:
// c_o = (k + 1 − f)/(3 + f), c_x = f·(c_o + 1) − 1, share c_x/k.
func loadedShare(f float64, k int) float64 {
	co := (float64(k) + 1 - f) / (3 + f)
	return (f*(co+1) - 1) / float64(k)
}

// slowBase is how many peers slowShares starts with: 3, or 23 to run the
// smooth pickers' scan grouped by weight (from 16 primaries on).
var slowBase = 3

// slowShares builds pc over slowBase peers of weight 1, adds one more at the
// clock's start with opt, and returns its share of n picks at each time
// of at. With held 0, each pick is reported at once with the same
// latency; otherwise held attempts stay in flight, the oldest reported
// before each pick, and 2·held picks settle the counts at each time before
// the n counted.
func slowShares(t *testing.T, pc pickerCase, clk *fakeClock, opt Option, n, held int, at ...time.Duration) []float64 {
	t.Helper()
	opts := []Option{clk.opt(), opt}
	if pc.alg.Random {
		opts = append(opts, WithRand(rand.NewPCG(7, 11)))
	}
	b, err := pc.new(makePeers(slowBase, letter, nil), opts...)
	require.NoError(t, err)
	start := time.Unix(0, clk.ns.Load())
	for range 10 * slowBase { // the first measured before the new one joins
		p := mustPick(t, b, nil)
		require.NoError(t, b.Done(p, Outcome{Latency: 10 * time.Millisecond}))
	}
	d := NewPeer("new")
	require.NoError(t, toSet(b).Add(d))
	shares := make([]float64, len(at))
	var out []*Peer // held in flight, oldest first
	for k, dt := range at {
		clk.set(start.Add(dt))
		got := 0
		for j := range 2*held + n {
			if held > 0 && len(out) == held {
				require.NoError(t, b.Done(out[0], Outcome{Latency: 10 * time.Millisecond}))
				out = out[1:]
			}
			p := mustPick(t, b, nil)
			if p == d && j >= 2*held {
				got++
			}
			if held > 0 {
				out = append(out, p)
			} else {
				require.NoError(t, b.Done(p, Outcome{Latency: 10 * time.Millisecond}))
			}
		}
		shares[k] = float64(got) / float64(n)
	}
	return shares
}

// shareTolerance is how far a share of n picks may stray from p: four
// binomial standard deviations for the random pickers (a false alarm
// about once in 16,000 checks), and for every picker the rounding of the
// factor, at worst 1/64 of a weight (ClassicWRR's rounds; 1/1024 under
// slowScale), which moves the share by less than that over the three
// others' weight, plus a round's worth of picks out of place, 64/n.
func shareTolerance(p float64, n int) float64 {
	return 4*math.Sqrt(p*(1-p)/float64(n)) + 1.0/64/3 + 64/float64(n)
}

// TestSlowStart_share checks the warming peer's share of the picks of
// every picker that accepts WithSlowStart at 0, 2.5, 5 and 10 s of a 10 s
// window, for Envoy's defaults, aggression 2 and a 30% minimum.
func TestSlowStart_share(t *testing.T) {
	n := 20000
	if underRace {
		// One goroutine on a fake clock: the race detector has nothing to
		// watch, and it made this test 34 s of the root package's -race
		// run. A quarter of the picks there, the tolerance derived for
		// that n (shareTolerance: twice the four deviations, four times
		// the round's 64/n); the plain run keeps 20,000 and its bound.
		n = 5000
	}
	window := 10 * time.Second
	at := []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second}
	cases := []struct {
		aggression, minPct float64
	}{
		{1, 10}, // f: 0.1, 0.25, 0.5, 1
		{2, 10}, // f: 0.1, 0.5, 0.707, 1 (√(t/window))
		{1, 30}, // f: 0.3, 0.3, 0.5, 1
	}
	for _, name := range slowStartPickers {
		a, err := AlgorithmNamed(name)
		require.NoError(t, err)
		pc := pickerCase{a.Name, a.New, a}
		// FastestFirst sends nothing to a peer of lower weight while every
		// peer is idle (its expected delay, 1/weight, is the larger), so
		// its share shows under load: 1000 attempts in flight.
		held := 0
		if name == "FastestFirst" {
			held = 1000
		}
		for _, c := range cases {
			t.Run(fmt.Sprintf("%s/aggression=%v,min=%v", name, c.aggression, c.minPct), func(t *testing.T) {
				got := slowShares(t, pc, newFakeClock(), WithSlowStart(window, c.aggression, c.minPct), n, held, at...)
				for k, dt := range at {
					f := slowFactor(dt, window, c.aggression, c.minPct)
					want := expectedShare(name, []float64{1, 1, 1, f}, 3)
					if held > 0 {
						want = loadedShare(f, held)
					}
					assert.InDelta(t, want, got[k], shareTolerance(want, n), "t=%v f=%.3f", dt, f)
				}
			})
		}
	}
}

// slowCase returns the registry's entry for name.
func slowCase(t *testing.T, name string) pickerCase {
	t.Helper()
	a, err := AlgorithmNamed(name)
	require.NoError(t, err)
	return pickerCase{a.Name, a.New, a}
}

// slowOpts returns opts with a seeded source for a randomized picker.
func slowOpts(pc pickerCase, opts ...Option) []Option {
	if pc.alg.Random {
		opts = append(opts, WithRand(rand.NewPCG(3, 5)))
	}
	return opts
}

// TestSlowStart_badValues: every picker that accepts WithSlowStart refuses
// a window that is not positive, an aggression that is not positive and
// finite, and a minimum outside [0, 100], with ErrInvalidConfig naming
// the value; a window of the longest duration is accepted and warms
// without overflow (the factor stays at its minimum).
func TestSlowStart_badValues(t *testing.T) {
	bad := []struct {
		name   string
		opt    Option
		naming string
	}{
		{"zero window", WithSlowStart(0, 1, 10), "window 0s"},
		{"negative window", WithSlowStart(-time.Second, 1, 10), "window -1s"},
		{"zero aggression", WithSlowStart(time.Second, 0, 10), "aggression 0"},
		{"negative aggression", WithSlowStart(time.Second, -1, 10), "aggression -1"},
		{"NaN aggression", WithSlowStart(time.Second, math.NaN(), 10), "aggression NaN"},
		{"infinite aggression", WithSlowStart(time.Second, math.Inf(1), 10), "aggression +Inf"},
		{"negative minimum", WithSlowStart(time.Second, 1, -0.5), "minWeightPercent -0.5"},
		{"minimum past 100", WithSlowStart(time.Second, 1, 100.5), "minWeightPercent 100.5"},
		{"NaN minimum", WithSlowStart(time.Second, 1, math.NaN()), "minWeightPercent NaN"},
	}
	for _, name := range slowStartPickers {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			for _, tt := range bad {
				_, err := pc.new(weighted(1, 1), tt.opt)
				require.ErrorIs(t, err, ErrInvalidConfig, tt.name)
				assert.ErrorContains(t, err, tt.naming, tt.name)
				assert.ErrorContains(t, err, name, tt.name)
			}
			// The longest window, late on the clock: the end of the
			// warm-up saturates instead of wrapping into the past, and the
			// new peer stays at its minimum, 10%.
			const n = 20000
			clk := newFakeClockAt(time.Unix(0, math.MaxInt64-int64(time.Hour)))
			held := 0
			if name == "FastestFirst" {
				held = 1000
			}
			got := slowShares(t, pc, clk, WithSlowStart(math.MaxInt64, 1, 10), n, held, 0, time.Minute)
			want := expectedShare(name, []float64{1, 1, 1, 0.1}, 3)
			if held > 0 {
				want = loadedShare(0.1, held)
			}
			for _, s := range got {
				assert.InDelta(t, want, s, shareTolerance(want, n))
			}
		})
	}
}

// TestSlowStart_warmupExcludesSlowStart: RandomWeighted's WithWarmup is
// Dubbo's ramp and WithSlowStart Envoy's; both at once are refused.
func TestSlowStart_warmupExcludesSlowStart(t *testing.T) {
	_, err := NewRandomWeighted(weighted(1), WithWarmup(time.Second), WithSlowStart(time.Second, 1, 10))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "WithWarmup(1s) and WithSlowStart")
	_, err = NewRandomWeighted(weighted(1), WithWarmup(0), WithSlowStart(time.Second, 1, 10))
	assert.NoError(t, err, "WithWarmup(0) is no warm-up")
}

// idleShare returns peer x's share of n picks of b, each reported at once.
func idleShare(t *testing.T, b Balancer, x *Peer, n int) float64 {
	t.Helper()
	got := 0
	for range n {
		p := mustPick(t, b, nil)
		if p == x {
			got++
		}
		require.NoError(t, b.Done(p, Outcome{Latency: 10 * time.Millisecond}))
	}
	return float64(got) / float64(n)
}

// TestSlowStart_shareGrouped is TestSlowStart_share's first case for the
// smooth pickers with 23 peers before the new one, so that their scan runs
// grouped by weight (weightGroups) while it warms: its share is
// f/(23 + f).
func TestSlowStart_shareGrouped(t *testing.T) {
	const n = 20000
	window := 10 * time.Second
	at := []time.Duration{0, 2500 * time.Millisecond, 5 * time.Second, 10 * time.Second, 20 * time.Second}
	slowBase = 23
	defer func() { slowBase = 3 }()
	for _, name := range []string{"SmoothWRR", "ReportedWRR"} {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			got := slowShares(t, pc, newFakeClock(), WithSlowStart(window, 1, 10), n, 0, at...)
			for k, dt := range at {
				f := slowFactor(dt, window, 1, 10)
				fs := slices.Repeat([]float64{1}, 24)
				fs[23] = f
				want := expectedShare(name, fs, 23)
				assert.InDelta(t, want, got[k], shareTolerance(want, n), "t=%v f=%.3f", dt, f)
			}
		})
	}
}

// TestSlowStart_entries checks when a peer enters slow start, on every
// picker that accepts it but FastestFirst (whose idle share is 0 while a
// peer warms; TestSlowStart_share measures it loaded): not at
// construction (the four share alike); after its readmission (a probe's
// success clearing its failures: factor 0.1 at once, 0.5 five seconds
// on); after SetDown brings it back up; and when Update adds it, but not
// when Update keeps it.
func TestSlowStart_entries(t *testing.T) {
	n := 20000
	if underRace {
		// As in TestSlowStart_share: one goroutine on a fake clock, a
		// quarter of the picks under -race with the tolerance derived for
		// that n; the plain run keeps 20,000.
		n = 5000
	}
	window := 10 * time.Second
	for _, name := range slowStartPickers {
		if name == "FastestFirst" {
			continue
		}
		pc := slowCase(t, name)
		want := func(f float64) float64 { return expectedShare(name, []float64{1, 1, 1, f}, 3) }
		tol := func(p float64) float64 { return shareTolerance(p, n) }
		t.Run(name+"/construction", func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(1, 1, 1, 1)
			b, err := pc.new(peers, slowOpts(pc, clk.opt(), WithSlowStart(window, 1, 10))...)
			require.NoError(t, err)
			assert.InDelta(t, 0.25, idleShare(t, b, peers[3], n), tol(0.25))
		})
		t.Run(name+"/readmitted", func(t *testing.T) {
			clk := newFakeClock()
			// A long fail_timeout, so that the failure's latency penalty
			// has decayed from the latency pickers' estimates by the
			// probe.
			peers := makePeers(4, letter, func(int) []PeerOption { return []PeerOption{FailTimeout(time.Hour)} })
			d := peers[3]
			var kinds []EventKind
			b, err := pc.new(peers, slowOpts(pc, clk.opt(), WithSlowStart(window, 1, 10),
				WithEvents(func(e Event) {
					if e.Peer == d {
						kinds = append(kinds, e.Kind)
					}
				}))...)
			require.NoError(t, err)
			failUntil := func(failed bool) {
				for range 1000 {
					p := mustPick(t, b, nil)
					require.NoError(t, b.Done(p, Outcome{Failed: failed && p == d, Latency: 10 * time.Millisecond}))
					if p == d {
						return
					}
				}
				t.Fatal("d never picked")
			}
			failUntil(true) // d out for an hour
			clk.add(time.Hour + time.Second)
			failUntil(false) // the probe's success readmits it
			require.Equal(t, []EventKind{EventPeerOut, EventPeerProbe, EventPeerReadmitted}, kinds)
			assert.InDelta(t, want(0.1), idleShare(t, b, d, n), tol(want(0.1)), "at readmission")
			clk.add(5 * time.Second)
			assert.InDelta(t, want(0.5), idleShare(t, b, d, n), tol(want(0.5)), "5 s on")
			clk.add(5 * time.Second)
			assert.InDelta(t, want(1), idleShare(t, b, d, n), tol(want(1)), "warm")
		})
		t.Run(name+"/up", func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(1, 1, 1, 1)
			d := peers[3]
			b, err := pc.new(peers, slowOpts(pc, clk.opt(), WithSlowStart(window, 1, 10))...)
			require.NoError(t, err)
			require.NoError(t, toSet(b).SetDown(d, false)) // up already: nothing warms
			assert.InDelta(t, 0.25, idleShare(t, b, d, n), tol(0.25))
			require.NoError(t, toSet(b).SetDown(d, true))
			clk.add(time.Minute)
			require.NoError(t, toSet(b).SetDown(d, false))
			assert.InDelta(t, want(0.1), idleShare(t, b, d, n), tol(want(0.1)))
			// Down and up again through Update, which keeps d.
			clk.add(time.Minute)
			snapshot := func(down bool) []*Peer {
				s := weighted(1, 1, 1)
				opts := []PeerOption{}
				if down {
					opts = append(opts, Down())
				}
				return append(s, NewPeer("d", opts...))
			}
			require.NoError(t, toSet(b).Update(snapshot(true)))
			require.NoError(t, toSet(b).Update(snapshot(false)))
			assert.InDelta(t, want(0.1), idleShare(t, b, d, n), tol(want(0.1)), "up through Update")
		})
		t.Run(name+"/update", func(t *testing.T) {
			clk := newFakeClock()
			b, err := pc.new(weighted(1, 1, 1), slowOpts(pc, clk.opt(), WithSlowStart(window, 1, 10))...)
			require.NoError(t, err)
			d := NewPeer("d")
			require.NoError(t, toSet(b).Update(append(weighted(1, 1, 1), d)))
			assert.InDelta(t, want(0.1), idleShare(t, b, d, n), tol(want(0.1)), "added by Update")
			clk.add(window)
			require.NoError(t, toSet(b).Update(append(weighted(1, 1, 1), NewPeer("d"))))
			assert.InDelta(t, 0.25, idleShare(t, b, d, n), tol(0.25), "kept by Update")
		})
	}
}

// TestSlowStart_idleChangesNothing: with the option on and no peer
// warming (the constructor's peers never do), every picker that accepts it
// picks exactly as without it, through failures, probes, retries and
// readmissions (a readmitted peer warms, so the run stops before the
// first readmission), on the same seed.
func TestSlowStart_idleChangesNothing(t *testing.T) {
	for _, name := range slowStartPickers {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			run := func(opts ...Option) []string {
				clk := newFakeClock()
				peers := makePeers(40, numbered, func(i int) []PeerOption {
					return []PeerOption{Weight(i%5 + 1), MaxFails(2), FailTimeout(time.Second)}
				})
				var events []Event
				b, err := pc.new(peers, slowOpts(pc, append(opts, clk.opt(), WithEvents(func(e Event) { events = append(events, e) }))...)...)
				require.NoError(t, err)
				lat := benchLognormal(64, 2)
				var out []string
				var r Request
				for i := range 3000 {
					for _, e := range events {
						if e.Kind == EventPeerReadmitted {
							return out
						}
					}
					clk.add(time.Millisecond)
					req := (*Request)(nil)
					if i%7 == 0 {
						r.Reset()
						req = &r
					}
					p, err := b.Pick(req)
					if err != nil {
						out = append(out, err.Error())
						continue
					}
					out = append(out, p.Addr())
					failed := slices.Index(peers, p)%9 == 0 && i%3 == 0
					require.NoError(t, b.Done(p, Outcome{Failed: failed, Latency: lat[i%64]}))
				}
				return out
			}
			off := run()
			require.Greater(t, len(off), 100)
			assert.Equal(t, off, run(WithSlowStart(time.Minute, 1, 10)))
		})
	}
}

// TestSlowStart_noAllocs: Pick+Done allocates nothing with the option on,
// whether no peer warms or one in ten does.
func TestSlowStart_noAllocs(t *testing.T) {
	for _, name := range slowStartPickers {
		a := slowCase(t, name).alg
		for _, n := range []int{10, 100} {
			for _, warming := range []bool{false, true} {
				peers := benchPeers(n)
				initial := peers
				if warming {
					initial = peers[:n-n/10]
				}
				b, err := a.New(initial, WithSlowStart(time.Hour, 1, 10))
				require.NoError(t, err)
				if warming {
					require.NoError(t, toSet(b).Add(peers[n-n/10:]...))
				}
				pickDone := func() {
					p, _ := b.Pick(nil)
					_ = b.Done(p, Outcome{Latency: time.Millisecond})
				}
				pickDone() // the first warm pick regroups in scaled units
				assert.Zero(t, testing.AllocsPerRun(1000, pickDone), "%s, %d peers, warming %v", name, n, warming)
			}
		}
	}
}

// TestSlowStart_noLockWhenIdle: a pick that takes no lock without the
// option takes none with it while no peer warms: it completes while the
// test holds the picker's lock. Pickers whose pick locks anyway are
// skipped.
func TestSlowStart_noLockWhenIdle(t *testing.T) {
	completes := func(b Balancer, s *peerSet) bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				if p, err := b.Pick(nil); err == nil {
					_ = b.Done(p, Outcome{Latency: time.Millisecond})
				}
			}
		}()
		select {
		case <-done:
			return true
		case <-time.After(200 * time.Millisecond):
			return false // the goroutine ends once the lock is let go
		}
	}
	for _, name := range slowStartPickers {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			build := func(opts ...Option) (Balancer, *peerSet) {
				peers := benchPeers(100)
				b, err := pc.new(peers, opts...)
				require.NoError(t, err)
				return b, peers[0].owner.Load()
			}
			if !completes(build()) {
				t.Skip("the pick takes the lock without the option")
			}
			assert.True(t, completes(build(WithSlowStart(time.Minute, 1, 10))))
		})
	}
}

// TestSlowStart_concurrent picks and reports from several goroutines on
// every picker that accepts the option while peers join, leave, go down and
// come up, fail and are readmitted, on a clock that moves through their
// warm-ups, for -race; every pick is a peer of the picker or an error of
// the contract, and every attempt ends.
func TestSlowStart_concurrent(t *testing.T) {
	for _, name := range slowStartPickers {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			peers := makePeers(30, numbered, func(i int) []PeerOption {
				return []PeerOption{Weight(i%3 + 1), FailTimeout(50 * time.Millisecond)}
			})
			b, err := pc.new(peers[:20], clk.opt(), WithSlowStart(time.Second, 2, 5))
			require.NoError(t, err)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						default:
						}
						p, err := b.Pick(nil)
						if err != nil {
							assert.True(t, errors.Is(err, ErrNoLivePeer) || errors.Is(err, ErrNoPeers), "%v", err)
							continue
						}
						o := Outcome{Failed: (i+g)%13 == 0, Latency: time.Duration(i%7+1) * time.Millisecond}
						if err := b.Done(p, o); err != nil {
							assert.ErrorIs(t, err, ErrUnknownPeer) // removed meanwhile and added back
						}
					}
				}()
			}
			u := toSet(b)
			for i := range 300 {
				clk.add(10 * time.Millisecond)
				q := peers[20+i%10]
				switch i % 4 {
				case 0:
					_ = u.Add(q)
				case 1:
					_ = u.SetDown(peers[i%20], true)
					_ = u.SetDown(peers[i%20], false)
				case 2:
					_ = u.Remove(q)
				case 3:
					_ = u.Update(append(slices.Clone(peers[:20]), NewPeer(q.Addr())))
				}
			}
			close(stop)
			wg.Wait()
			for _, p := range u.Peers() {
				assert.Zero(t, p.InFlight(), p.Addr())
			}
		})
	}
}

// TestSlowStart_stateInNginxUnits: while a peer warms, Peer.State reports
// the current weights in nginx's units, not the scaled ones the scan
// keeps: within [-W, W], W the sum of the weights (4 here), as any smooth
// current weight is.
func TestSlowStart_stateInNginxUnits(t *testing.T) {
	for _, name := range []string{"SmoothWRR", "ClassicWRR", "LeastConn"} {
		pc := slowCase(t, name)
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			b, err := pc.new(weighted(1, 1, 1), clk.opt(), WithSlowStart(10*time.Second, 1, 10))
			require.NoError(t, err)
			require.NoError(t, toSet(b).Add(NewPeer("d")))
			clk.add(3 * time.Second)
			for i := range 50 {
				p := mustPick(t, b, nil)
				require.NoError(t, b.Done(p, Outcome{}))
				for _, q := range toSet(b).Peers() {
					cw := q.State().CurrentWeight
					assert.True(t, cw >= -4 && cw <= 4, "pick %d: %s at %d", i, q.Addr(), cw)
				}
			}
		})
	}
}
