package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected picks below are worked out from the rule of
// reported_load.go, written out in each test: a peer's load is
// L = n·own in flight + x·max(0, 1 − age/window), x = max(0, R − (own in
// flight after the report's attempt ended + 1)), R the count reported, n
// the option's clients (1 unless a test says otherwise). LeastConn and
// RandomTwo take the least L/weight, P2CPeakEWMA and FastestFirst the
// least (L+1)/weight when the peers' latencies are equal (every report
// below carries the same latency, at one instant).

// reportedLatency is the latency of every report of these tests, and
// reportedWindow the option's window: short beside the latency, so that
// the ages the tests give the reports say nothing to the latency
// estimates (FastestFirst's silence of an attempt in flight, the decay of
// P2CPeakEWMA's estimate).
const (
	reportedLatency = 100 * time.Millisecond
	reportedWindow  = 2 * time.Millisecond
)

// reportedCase is one picker that takes WithReportedLoad: extra peers put
// FastestFirst in its sampled mode (more than ffExactMax peers). Its picks
// are the least loaded of three draws, which may all land on one peer, so
// the tests that derive each pick skip it (sampled).
type reportedCase struct {
	name  string
	algo  string
	extra int
	plus1 bool // compares (L+1)/weight, not L/weight
}

func (rc reportedCase) sampled() bool { return rc.extra != 0 }

var reportedCases = []reportedCase{
	{"LeastConn", "LeastConn", 0, false},
	{"RandomTwo", "RandomTwo", 0, false},
	{"P2CPeakEWMA", "P2CPeakEWMA", 0, true},
	{"FastestFirst", "FastestFirst", 0, true},
	{"FastestFirst/sampled", "FastestFirst", ffExactMax, true},
}

func algorithmNamed(t *testing.T, name string) Algorithm {
	t.Helper()
	for _, a := range Algorithms() {
		if a.Name == name {
			return a
		}
	}
	t.Fatalf("no algorithm %s", name)
	return Algorithm{}
}

// reportedSet is a picker over a and b (and rc.extra peers kept down),
// with WithReportedLoad(reportedWindow, clients) unless clients is 0.
type reportedSet struct {
	p    Balancer
	clk  *fakeClock
	a, b *Peer
}

func newReportedSet(t *testing.T, rc reportedCase, wa, wb, clients int) *reportedSet {
	t.Helper()
	s := &reportedSet{clk: newFakeClock(), a: NewPeer("a", Weight(wa)), b: NewPeer("b", Weight(wb))}
	peers := []*Peer{s.a, s.b}
	for i := range rc.extra {
		peers = append(peers, NewPeer(numbered(i), Down()))
	}
	alg := algorithmNamed(t, rc.algo)
	opts := []Option{s.clk.opt()}
	if alg.Random {
		opts = append(opts, WithRand(rand.NewPCG(9, 10)))
	}
	if clients != 0 {
		opts = append(opts, WithReportedLoad(reportedWindow, clients))
	}
	var err error
	s.p, err = alg.New(peers, opts...)
	require.NoError(t, err)
	return s
}

// only makes the next pick go to q: the other of a and b is down for it.
func (s *reportedSet) only(t *testing.T, q *Peer) *Peer {
	t.Helper()
	other := s.a
	if q == s.a {
		other = s.b
	}
	require.NoError(t, s.p.SetDown(other, true))
	got := mustPick(t, s.p, nil)
	require.NoError(t, s.p.SetDown(other, false))
	require.Same(t, q, got)
	return got
}

// report picks q and reports the attempt with the server's count r.
func (s *reportedSet) report(t *testing.T, q *Peer, r float64) {
	t.Helper()
	s.only(t, q)
	require.NoError(t, s.p.Done(q, Outcome{Latency: reportedLatency, Load: &ServerLoad{InFlight: r, HasInFlight: true}}))
}

// holdOn picks q n times and reports none of them.
func (s *reportedSet) holdOn(t *testing.T, q *Peer, n int) {
	t.Helper()
	for range n {
		s.only(t, q)
	}
}

func forEachReported(t *testing.T, f func(t *testing.T, rc reportedCase)) {
	for _, rc := range reportedCases {
		t.Run(rc.name, func(t *testing.T) { f(t, rc) })
	}
}

// forEachDerived is forEachReported without the sampled mode, whose picks
// no derivation fixes.
func forEachDerived(t *testing.T, f func(t *testing.T, rc reportedCase)) {
	forEachReported(t, func(t *testing.T, rc reportedCase) {
		if !rc.sampled() {
			f(t, rc)
		}
	})
}

// Another client's attempts, seen in a report, count until the own
// attempts catch up with them. a reports 4.5 with nothing else of ours on
// it: x_a = 4.5 − 1 = 3.5; b reports 1, its own attempt alone: x_b = 0.
// Then picks held in flight: b's L goes 0, 1, 2, 3 < 3.5, so b four times;
// at b 4 > a 3.5, a (L_a 4.5); b 4 < 4.5, b; b 5 > 4.5, a.
func TestReportedLoad_othersCountUntilOwnCatchUp(t *testing.T) {
	forEachDerived(t, func(t *testing.T, rc reportedCase) {
		s := newReportedSet(t, rc, 1, 1, 1)
		s.report(t, s.a, 4.5)
		s.report(t, s.b, 1)
		assert.Equal(t, "b b b b a b a", picks(t, s.p, 7, pickHold))
	})
}

// Weights divide the whole load, the reported part included. a (weight 2)
// reports 4.5: x_a = 3.5; b (weight 1) reports 1. LeastConn and RandomTwo
// compare L/w: a 1.75 against b 0, 1 (b, b); b 2 > 1.75, a (a 2.25); b 2,
// b (b 3); a 2.25, a (2.75); a 2.75 < 3, a (3.25); b 3, b. P2CPeakEWMA
// and FastestFirst compare (L+1)/w: a 2.25 against b 1, 2 (b, b); b 3, a
// (a 2.75); a (3.25); b 3, b (b 4); a 3.25, a (3.75); a (4.25); b 4, b.
func TestReportedLoad_weightDividesTheReportedCount(t *testing.T) {
	forEachDerived(t, func(t *testing.T, rc reportedCase) {
		s := newReportedSet(t, rc, 2, 1, 1)
		s.report(t, s.a, 4.5)
		s.report(t, s.b, 1)
		want := "b b a b a a b"
		if rc.plus1 {
			want = "b b a a b a a b"
		}
		assert.Equal(t, want, picks(t, s.p, len(strings.Fields(want)), pickHold))
	})
}

// The own attempts a report already counts are not counted twice. With 2
// attempts of ours held on a, a third on a is reported with 3, all ours:
// x_a = 3 − (2 + 1) = 0, L_a = 2. b reports 3.5 with nothing else of ours:
// x_b = 2.5. So a (2 < 2.5), then b (a 3 > 2.5). Counting the report on
// top of the own attempts (L_a = 2 + 3) would pick b first; the report in
// place of the own count (3 against 3.5, the own picks since not counted)
// would pick a twice.
func TestReportedLoad_ownAttemptsNotCountedTwice(t *testing.T) {
	forEachDerived(t, func(t *testing.T, rc reportedCase) {
		s := newReportedSet(t, rc, 1, 1, 1)
		s.holdOn(t, s.a, 2)
		s.report(t, s.a, 3)
		s.report(t, s.b, 3.5)
		assert.Equal(t, "a b", picks(t, s.p, 2, pickHold))
	})
}

// Each own attempt counts as n = 3 (C3's herd factor). a reports 4.5
// (x_a = 3.5), b 1 (x_b = 0); then held picks. LeastConn and RandomTwo:
// L_b = 0, 3 < 3.5: b b; b 6 > 3.5: a (L_a 3 + 3.5 = 6.5); b 6: b (9);
// a 6.5: a (9.5); b 9: b. P2CPeakEWMA and FastestFirst, L+1: b 1, 4 < 4.5:
// b b; b 7 > 4.5: a (7.5); b 7: b (10); a 7.5: a (10.5); b 10: b. With
// n = 1 (the first test) b takes four picks before a's first.
func TestReportedLoad_clientsWeighOwnAttempts(t *testing.T) {
	forEachDerived(t, func(t *testing.T, rc reportedCase) {
		s := newReportedSet(t, rc, 1, 1, 3)
		s.report(t, s.a, 4.5)
		s.report(t, s.b, 1)
		assert.Equal(t, "b b a b a b", picks(t, s.p, 6, pickHold))
	})
}

// A report fades linearly over the window and is gone past it. a reports
// 4.5 (x_a = 3.5), b 1 (x_b = 0), and one attempt of ours is held on b.
// Then, age after the reports, held picks:
//   - 0: L_a 3.5 against b 1, 2, 3: b b b, then a;
//   - window/2: L_a 1.75 against b 1: b; b 2 > 1.75: a;
//   - 3/4 of the window: L_a 0.875 < b 1: a;
//   - the window, or ten: L_a 0 < 1: a, as without a report.
func TestReportedLoad_staleReportExpires(t *testing.T) {
	for _, tt := range []struct {
		age  time.Duration
		want string
	}{
		{0, "b b b a"},
		{reportedWindow / 2, "b a"},
		{reportedWindow * 3 / 4, "a"},
		{reportedWindow, "a"},
		{10 * reportedWindow, "a"},
	} {
		t.Run(tt.age.String(), func(t *testing.T) {
			forEachDerived(t, func(t *testing.T, rc reportedCase) {
				s := newReportedSet(t, rc, 1, 1, 1)
				s.report(t, s.a, 4.5)
				s.report(t, s.b, 1)
				s.holdOn(t, s.b, 1)
				s.clk.add(tt.age)
				assert.Equal(t, tt.want, picks(t, s.p, len(strings.Fields(tt.want)), pickHold))
			})
		})
	}
}

// Reports that say nothing usable leave a peer as if it had never
// reported: a value Done rejects (it ends nothing, the attempt is then
// reported plainly), a count past 2^24−1, a load without HasInFlight, a
// count below the own attempts. After each, on a, with one attempt held
// on b: L_a 0 < 1, so a. The control, a count of 4.5 (x_a 3.5), picks b.
func TestReportedLoad_badReportsIgnored(t *testing.T) {
	for _, tt := range []struct {
		name   string
		load   ServerLoad
		reject bool
		want   string
	}{
		{"control", ServerLoad{InFlight: 4.5, HasInFlight: true}, false, "b"},
		{"NaN", ServerLoad{InFlight: math.NaN(), HasInFlight: true}, true, "a"},
		{"+Inf", ServerLoad{InFlight: math.Inf(1), HasInFlight: true}, true, "a"},
		{"negative", ServerLoad{InFlight: -3, HasInFlight: true}, true, "a"},
		{"bad utilization beside", ServerLoad{Utilization: math.NaN(), InFlight: 4.5, HasInFlight: true}, true, "a"},
		{"huge", ServerLoad{InFlight: 1e300, HasInFlight: true}, false, "a"},
		{"past the cap", ServerLoad{InFlight: maxReportedInFlight + 1, HasInFlight: true}, false, "a"},
		{"no HasInFlight", ServerLoad{InFlight: 4.5}, false, "a"},
		{"below own", ServerLoad{InFlight: 0.5, HasInFlight: true}, false, "a"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			forEachDerived(t, func(t *testing.T, rc reportedCase) {
				s := newReportedSet(t, rc, 1, 1, 1)
				s.only(t, s.a)
				l := tt.load
				err := s.p.Done(s.a, Outcome{Latency: reportedLatency, Load: &l})
				if tt.reject {
					require.ErrorIs(t, err, ErrInvalidOutcome)
					require.Equal(t, 1, s.a.InFlight(), "a rejected report ends nothing")
					require.NoError(t, s.p.Done(s.a, Outcome{Latency: reportedLatency}))
				} else {
					require.NoError(t, err)
				}
				s.report(t, s.b, 1)
				s.holdOn(t, s.b, 1)
				assert.Equal(t, tt.want, picks(t, s.p, 1, pickHold))
			})
		})
	}
}

// With the option on, a picker that no report shows another client to
// picks what it picks with the option off: its own server's counts (R =
// the own attempts in flight, the reported one included), loads without
// an in-flight count, and no load at all, over a seeded mix of held and
// reported attempts, failures and abandoned ones, on unequal weights.
// The option-off sequences are the ones the nginx vectors and the live
// differential tests hold.
//
// LeastConn and RandomTwo compare L/weight, which n·own ranks as own
// does: with clients 16 too.
func TestReportedLoad_aloneSameAsOff(t *testing.T) {
	for _, kind := range []string{"own counts", "no in-flight count", "no load"} {
		t.Run(kind, func(t *testing.T) {
			forEachReported(t, func(t *testing.T, rc reportedCase) {
				clients := []int{1}
				if !rc.plus1 {
					clients = append(clients, 16)
				}
				seq := func(n int) string {
					clk := newFakeClock()
					peers := makePeers(5+rc.extra, letter, func(i int) []PeerOption { return []PeerOption{Weight(i%5 + 1), MaxFails(0)} })
					alg := algorithmNamed(t, rc.algo)
					opts := []Option{clk.opt()}
					if alg.Random {
						opts = append(opts, WithRand(rand.NewPCG(3, 4)))
					}
					if n != 0 {
						opts = append(opts, WithReportedLoad(time.Second, n))
					}
					p, err := alg.New(peers, opts...)
					require.NoError(t, err)
					src := rand.New(rand.NewPCG(7, 8))
					var held []*Peer
					var out []string
					for range 400 {
						q := mustPick(t, p, nil)
						out = append(out, q.Addr())
						held = append(held, q)
						for len(held) > 0 && src.IntN(3) != 0 {
							k := src.IntN(len(held))
							d := held[k]
							held = slices.Delete(held, k, k+1)
							o := Outcome{Latency: time.Duration(src.IntN(50)+1) * time.Millisecond}
							switch src.IntN(20) {
							case 0:
								o.Failed = true
							case 1:
								o.Abandoned = true
							}
							switch kind {
							case "own counts":
								o.Load = &ServerLoad{InFlight: float64(d.InFlight()), HasInFlight: true}
							case "no in-flight count":
								o.Load = &ServerLoad{Utilization: 0.5, RPS: 100, InFlight: 40}
							}
							require.NoError(t, p.Done(d, o))
						}
						clk.add(time.Duration(src.IntN(3)) * time.Millisecond)
					}
					return strings.Join(out, " ")
				}
				off := seq(0)
				for _, n := range clients {
					assert.Equal(t, off, seq(n), "clients %d", n)
				}
			})
		})
	}
}

// The option's values: a positive window and clients in [1, 2^20], or
// refused naming them.
func TestReportedLoad_optionRange(t *testing.T) {
	forEachReported(t, func(t *testing.T, rc reportedCase) {
		alg := algorithmNamed(t, rc.algo)
		for _, tt := range []struct {
			window  time.Duration
			clients int
			want    string
		}{
			{0, 1, "WithReportedLoad(0s, 1): window not positive"},
			{-time.Second, 1, "WithReportedLoad(-1s, 1): window not positive"},
			{time.Second, 0, "WithReportedLoad(1s, 0): clients out of [1, 1048576]"},
			{time.Second, -2, "WithReportedLoad(1s, -2): clients out of [1, 1048576]"},
			{time.Second, 1<<20 + 1, "WithReportedLoad(1s, 1048577): clients out of [1, 1048576]"},
		} {
			_, err := alg.New([]*Peer{NewPeer("a")}, WithReportedLoad(tt.window, tt.clients))
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.want)
			assert.ErrorContains(t, err, rc.algo)
		}
		for _, c := range []int{1, 1 << 20} {
			_, err := alg.New([]*Peer{NewPeer("a")}, WithReportedLoad(time.Nanosecond, c))
			assert.NoError(t, err)
		}
	})
}

// Pick+Done allocates nothing with the option on, with a report and
// without, in FastestFirst's exact and sampled modes alike.
func TestReportedLoad_pickDoneAllocs(t *testing.T) {
	for _, n := range []int{10, 2 * ffExactMax} {
		forEachReported(t, func(t *testing.T, rc reportedCase) {
			if rc.sampled() {
				return // the sizes cover both modes
			}
			p, err := algorithmNamed(t, rc.algo).New(benchPeers(n), WithReportedLoad(time.Second, 1))
			require.NoError(t, err)
			l := &ServerLoad{InFlight: 7, HasInFlight: true}
			for _, load := range []*ServerLoad{nil, l} {
				allocs := testing.AllocsPerRun(1000, func() {
					peer, _ := p.Pick(nil)
					_ = p.Done(peer, Outcome{Latency: time.Millisecond, Load: load})
				})
				assert.Zero(t, allocs, "%d peers, Load %v", n, load)
			}
		})
	}
}

// Concurrent picks and reports (with counts drawn per report), with a
// weight changed and a peer taken down and up meanwhile: -race stays
// quiet, every pick succeeds, and every attempt ends.
func TestReportedLoad_concurrent(t *testing.T) {
	forEachReported(t, func(t *testing.T, rc reportedCase) {
		if rc.sampled() {
			return // the sizes cover both modes
		}
		for _, n := range []int{4, 2 * ffExactMax} {
			peers := makePeers(n, numbered, nil)
			p, err := algorithmNamed(t, rc.algo).New(peers, WithReportedLoad(time.Millisecond, 16))
			require.NoError(t, err)
			var wg sync.WaitGroup
			errs := make(chan error, 8)
			for g := range 4 {
				wg.Go(func() {
					src := rand.New(rand.NewPCG(uint64(g), 1))
					for range 2000 {
						q, err := p.Pick(nil)
						if err != nil {
							errs <- err
							return
						}
						l := &ServerLoad{InFlight: float64(src.IntN(20)), HasInFlight: true}
						if err := p.Done(q, Outcome{Latency: time.Duration(src.IntN(1000)) * time.Microsecond, Load: l}); err != nil {
							errs <- err
							return
						}
					}
				})
			}
			wg.Go(func() {
				for i := range 200 {
					_ = p.SetWeight(peers[1], i%5+1)
					_ = p.SetDown(peers[2], i%2 == 0)
				}
				_ = p.SetDown(peers[2], false)
			})
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			for _, q := range peers {
				assert.Zero(t, q.InFlight(), "%s", q.Addr())
			}
		}
	})
}

// FastestFirst's sampled mode takes the least loaded of three peers drawn
// by weight, so a peer whose report shows 1000 other attempts is chosen
// only when all three draws land on it: among 40 equal peers, (1/40)³ of
// the picks, about none in 400. Without the option its picks are ties at
// nothing in flight, which the first draw wins: 1/40 of them, about 10.
func TestReportedLoad_sampledAvoidsReportedPeer(t *testing.T) {
	count := func(off bool) int {
		clk := newFakeClock()
		peers := makePeers(40, numbered, nil)
		opts := []Option{clk.opt(), WithRand(rand.NewPCG(5, 6))}
		if !off {
			opts = append(opts, WithReportedLoad(time.Second, 1))
		}
		p, err := NewFastestFirst(peers, opts...)
		require.NoError(t, err)
		require.NotNil(t, p.draw.Load(), "sampled mode")
		n := 0
		for range 400 {
			q := mustPick(t, p, nil)
			o := Outcome{Latency: reportedLatency}
			if q == peers[0] {
				n++
				o.Load = &ServerLoad{InFlight: 1001, HasInFlight: true}
			}
			require.NoError(t, p.Done(q, o))
		}
		return n
	}
	off, on := count(true), count(false)
	t.Logf("off %d on %d", off, on)
	assert.GreaterOrEqual(t, off, 4, "off")
	assert.LessOrEqual(t, on, 1, "on")
}

// BenchmarkReportedLoad times Pick+Done of the four pickers that take
// WithReportedLoad, serially, at 10 and 1000 peers (benchPeers): off, on
// with reports that carry no in-flight count, and on with a count on every
// report. The latencies are the lognormal of BenchmarkFastestFirstLatency
// (median 1 ms, σ 1.2) in every mode, and the counts, in turn, 4096 drawn
// from a lognormal of median 4 (heavy-tailed, as a loaded fleet's are),
// so every peer holds a live report of others that moves with each reply.
// BenchmarkReportedLoad/LeastConn/peers=10/off and so on.
func BenchmarkReportedLoad(b *testing.B) {
	lat := benchLognormal(4096, 1)
	r := rand.New(rand.NewPCG(3, 0))
	counts := make([]ServerLoad, len(lat))
	for i := range counts {
		counts[i] = ServerLoad{InFlight: math.Round(4 * math.Exp(r.NormFloat64())), HasInFlight: true}
	}
	for _, name := range []string{"LeastConn", "RandomTwo", "P2CPeakEWMA", "FastestFirst"} {
		var alg Algorithm
		for _, a := range Algorithms() {
			if a.Name == name {
				alg = a
			}
		}
		for _, n := range []int{10, 1000} {
			for _, mode := range []string{"off", "on-no-count", "on-count"} {
				b.Run(fmt.Sprintf("%s/peers=%d/%s", name, n, mode), func(b *testing.B) {
					var opts []Option
					if mode != "off" {
						opts = append(opts, WithReportedLoad(time.Minute, 16))
					}
					p, err := alg.New(benchPeers(n), opts...)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						o := Outcome{Latency: lat[i%len(lat)]}
						if mode == "on-count" {
							o.Load = &counts[i%len(counts)]
						}
						peer, _ := p.Pick(nil)
						_ = p.Done(peer, o)
						i++
					}
				})
			}
		}
	}
}

// A pick reads the clock at most once, however many peers with live
// reports it compares (reportedLoad.load reads the pick's lazyClock): with
// a and b both holding reports, each comparison ages two of them, on one
// read shared with everything else the pick reads the time for.
func TestReportedLoad_pickReadsClockOnce(t *testing.T) {
	forEachReported(t, func(t *testing.T, rc reportedCase) {
		for _, reports := range []bool{false, true} {
			s := newReportedSet(t, rc, 1, 1, 16)
			if reports {
				s.report(t, s.a, 3)
				s.report(t, s.b, 3)
			}
			for range 20 {
				before := s.clk.reads.Load()
				q := mustPick(t, s.p, nil)
				assert.LessOrEqual(t, s.clk.reads.Load()-before, int64(1), "reports %v: reads of one pick", reports)
				require.NoError(t, s.p.Done(q, Outcome{Latency: reportedLatency}))
			}
		}
	})
}
