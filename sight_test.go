package balancer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sightLog records the blind and seen events of a picker.
type sightLog struct {
	mu  sync.Mutex
	evs []Event
}

func (l *sightLog) hook(e Event) {
	if e.Kind != EventPeerBlind && e.Kind != EventPeerSeen {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.evs = append(l.evs, e)
}

func (l *sightLog) events() []Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Event(nil), l.evs...)
}

// reportWatchers are the pickers that watch their servers' load reports,
// each with the report it can use and one it cannot.
var reportWatchers = []struct {
	name             string
	opts             []Option
	usable, unusable ServerLoad
}{
	{"LeastConn", []Option{WithReportedLoad(10*time.Second, 1)}, ServerLoad{InFlight: 2, HasInFlight: true}, ServerLoad{Utilization: .5, RPS: 100}},
	{"RandomTwo", []Option{WithReportedLoad(10*time.Second, 1)}, ServerLoad{InFlight: 2, HasInFlight: true}, ServerLoad{Utilization: .5, RPS: 100}},
	{"P2CPeakEWMA", []Option{WithReportedLoad(10*time.Second, 1)}, ServerLoad{InFlight: 2, HasInFlight: true}, ServerLoad{Utilization: .5, RPS: 100}},
	{"FastestFirst", []Option{WithReportedLoad(10*time.Second, 1)}, ServerLoad{InFlight: 2, HasInFlight: true}, ServerLoad{Utilization: .5, RPS: 100}},
	// loadreport's Middleware reports no utilization until the server
	// sets one: A58 ignores such a report.
	{"ReportedWRR", nil, ServerLoad{Utilization: .5, RPS: 100}, ServerLoad{InFlight: 2, HasInFlight: true}},
}

func newWatcher(t *testing.T, name string, peers []*Peer, opts ...Option) Balancer {
	t.Helper()
	a, err := AlgorithmNamed(name)
	require.NoError(t, err)
	b, err := a.New(peers, opts...)
	require.NoError(t, err)
	return b
}

// TestSight_replyThreshold: one peer whose replies come every gap on the
// picker's clock, none with a usable report. The picker is blind to it at
// the k-th reply, k the first count with k ≥ 8 (blindReplies) and the
// first reply at least 1 s (blindWindow) before the k-th, (k−1)·gap ≥ 1 s:
// k = max(8, ⌈1 s / gap⌉ + 1); with gap 0 the window never passes.
func TestSight_replyThreshold(t *testing.T) {
	tests := []struct {
		gap   time.Duration
		blind int // the reply at which EventPeerBlind comes; 0: none in 200
	}{
		{10 * time.Millisecond, 101}, // ⌈1000/10⌉ + 1 = 101 > 8
		{125 * time.Millisecond, 9},  // 1000/125 + 1 = 9 > 8
		{200 * time.Millisecond, 8},  // 1000/200 + 1 = 6 < 8: the count decides
		{time.Second, 8},             // 2 < 8
		{333 * time.Millisecond, 8},  // ⌈1000/333⌉ + 1 = 5 < 8
		{999 * time.Microsecond, 0},  // whole ms: 199 replies span 198 ms < 1 s
		{0, 0},                       // a burst: the window never passes
		{1001 * time.Millisecond, 8}, // the count decides
		{100 * time.Millisecond, 11}, // 1000/100 + 1 = 11
		// 142.857142 ms: the 8th reply is 999.999994 ms past the
		// first, 999 in the whole ms the window counts, the 9th 1142.
		{1000 * time.Millisecond / 7, 9},
	}
	for _, w := range reportWatchers {
		for _, unusable := range []bool{false, true} {
			for _, tt := range tests {
				t.Run(fmt.Sprintf("%s/unusable=%v/gap=%v", w.name, unusable, tt.gap), func(t *testing.T) {
					clk := newFakeClock()
					var log sightLog
					p := NewPeer("a")
					b := newWatcher(t, w.name, []*Peer{p}, append([]Option{clk.opt(), WithEvents(log.hook)}, w.opts...)...)
					var load *ServerLoad
					wantErr := ErrNoLoadReport
					if unusable {
						l := w.unusable
						load, wantErr = &l, ErrUnusableLoadReport
					}
					start := clk.now()
					got := 0
					for i := 1; i <= 200 && got == 0; i++ {
						q := mustPick(t, b, nil)
						require.NoError(t, b.Done(q, Outcome{Latency: time.Millisecond, Load: load}))
						if evs := log.events(); len(evs) > 0 {
							got = i
							require.Len(t, evs, 1)
							e := evs[0]
							assert.Equal(t, EventPeerBlind, e.Kind)
							assert.Same(t, p, e.Peer)
							assert.Equal(t, i, e.Misses)
							assert.ErrorIs(t, e.Err, wantErr)
							assert.True(t, start.Add(time.Duration(i-1)*tt.gap).Equal(e.Time), "at %v", e.Time)
						}
						clk.add(tt.gap)
					}
					assert.Equal(t, tt.blind, got, "the reply at which the picker is blind")
					assert.Equal(t, tt.blind != 0, p.Stats().Blind)
					assert.Equal(t, uint64(min(tt.blind, 1)), b.(interface{ BlindCount() uint64 }).BlindCount())
					if tt.blind == 0 {
						return
					}
					// More misses: nothing more. Then one usable report:
					// the peer is seen, with the count the blind event had.
					for range 20 {
						require.NoError(t, b.Done(mustPick(t, b, nil), Outcome{Load: load}))
						clk.add(tt.gap + time.Second)
					}
					l := w.usable
					require.NoError(t, b.Done(mustPick(t, b, nil), Outcome{Load: &l}))
					evs := log.events()
					require.Len(t, evs, 2)
					assert.Equal(t, EventPeerSeen, evs[1].Kind)
					assert.Same(t, p, evs[1].Peer)
					assert.Equal(t, tt.blind, evs[1].Misses)
					assert.False(t, p.Stats().Blind)
				})
			}
		}
	}
}

// TestSight_runsReset: a usable report, at any point of a run, starts the
// count again; outcomes that are no reply (abandoned, failed without a
// report) neither count nor clear it. Replies 100 ms apart: a run of 7
// misses, one report, then misses from 0 again: blind at the 8th of the
// new run, which is 700 ms past its first, so the count decides (1.1 s
// would take 12).
func TestSight_runsReset(t *testing.T) {
	clk := newFakeClock()
	var log sightLog
	p := NewPeer("a")
	b := newWatcher(t, "LeastConn", []*Peer{p}, clk.opt(), WithEvents(log.hook), WithReportedLoad(10*time.Second, 1))
	reply := func(o Outcome) {
		t.Helper()
		require.NoError(t, b.Done(mustPick(t, b, nil), o))
		clk.add(100 * time.Millisecond)
	}
	for range 7 {
		reply(Outcome{})
	}
	reply(Outcome{Load: &ServerLoad{InFlight: 1, HasInFlight: true}})
	for range 7 {
		reply(Outcome{})
		reply(Outcome{Abandoned: true, Latency: time.Millisecond})
		reply(Outcome{Failed: true})
	}
	require.Empty(t, log.events(), "7 misses in the new run, over 2 s of clock")
	// The 8th miss of the run: its first was 7 × 300 ms = 2.1 s ago.
	reply(Outcome{})
	evs := log.events()
	require.Len(t, evs, 1)
	assert.Equal(t, 8, evs[0].Misses)
	// A failed reply that carries a report is a reply: it is seen.
	reply(Outcome{Failed: true, Load: &ServerLoad{InFlight: 1, HasInFlight: true}})
	evs = log.events()
	require.Len(t, evs, 2)
	assert.Equal(t, EventPeerSeen, evs[1].Kind)
}

// TestSight_probeThreshold: Prequal's answers, every gap, all failed: it
// is blind at the k-th, k = max(3, ⌈1 s / gap⌉ + 1) (prequalProbeFails,
// blindWindow); the event carries the prober's cause; the first answer
// after that is EventPeerSeen.
func TestSight_probeThreshold(t *testing.T) {
	tests := []struct {
		gap   time.Duration
		blind int
	}{
		{500 * time.Millisecond, 3}, // 1000/500 + 1 = 3
		{2 * time.Second, 3},        // the count decides
		{10 * time.Millisecond, 101},
		{400 * time.Millisecond, 4}, // ⌈2.5⌉ + 1 = 4
		{0, 0},
	}
	cause := errors.New("probe of a: status 404 Not Found")
	for _, tt := range tests {
		t.Run(tt.gap.String(), func(t *testing.T) {
			clk := newFakeClock()
			var log sightLog
			p, q := NewPeer("a"), NewPeer("b")
			b, err := NewPrequal([]*Peer{p, q}, clk.opt(), WithEvents(log.hook), WithProber(nullProber{}))
			require.NoError(t, err)
			start, got := clk.now(), 0
			for i := 1; i <= 200 && got == 0; i++ {
				require.NoError(t, b.Answer(p, ProbeAnswer{Failed: true, Err: cause}))
				require.NoError(t, b.Answer(q, ProbeAnswer{InFlight: 1, Latency: time.Millisecond}))
				if evs := log.events(); len(evs) > 0 {
					got = i
					require.Len(t, evs, 1, "b answers: only a is blind")
					assert.Equal(t, EventPeerBlind, evs[0].Kind)
					assert.Same(t, p, evs[0].Peer)
					assert.Equal(t, i, evs[0].Misses)
					assert.Same(t, cause, evs[0].Err)
					assert.True(t, evs[0].Time.Equal(start.Add(time.Duration(i-1)*tt.gap)))
				}
				clk.add(tt.gap)
			}
			assert.Equal(t, tt.blind, got)
			assert.Equal(t, uint64(min(got, 1)), b.BlindCount())
			assert.False(t, q.Stats().Blind)
			if got == 0 {
				return
			}
			assert.True(t, p.Stats().Blind)
			require.NoError(t, b.Answer(p, ProbeAnswer{InFlight: 0, Latency: time.Millisecond}))
			evs := log.events()
			require.Len(t, evs, 2)
			assert.Equal(t, EventPeerSeen, evs[1].Kind)
			assert.False(t, p.Stats().Blind)
		})
	}
}

// nullProber sends nothing: the tests answer for it.
type nullProber struct{}

func (nullProber) Probe(*Peer, ProbeReceiver) {}

// TestSight_partial: four peers, replies 10 ms apart for 3 s; c and d's
// servers send no report. Exactly c and d are blind, once each.
func TestSight_partial(t *testing.T) {
	for _, w := range reportWatchers {
		t.Run(w.name, func(t *testing.T) {
			clk := newFakeClock()
			var log sightLog
			peers := []*Peer{NewPeer("a"), NewPeer("b"), NewPeer("c"), NewPeer("d")}
			opts := append([]Option{clk.opt(), WithEvents(log.hook)}, w.opts...)
			if a, _ := AlgorithmNamed(w.name); a.Random {
				opts = append(opts, WithRand(rand.NewPCG(1, 2)))
			}
			b := newWatcher(t, w.name, peers, opts...)
			for range 300 {
				p := mustPick(t, b, nil)
				var load *ServerLoad
				if p.Addr() < "c" {
					l := w.usable
					load = &l
				}
				require.NoError(t, b.Done(p, Outcome{Latency: time.Millisecond, Load: load}))
				clk.add(10 * time.Millisecond)
			}
			var blind []string
			for _, e := range log.events() {
				require.Equal(t, EventPeerBlind, e.Kind)
				blind = append(blind, e.Peer.Addr())
			}
			assert.ElementsMatch(t, []string{"c", "d"}, blind)
			for _, p := range peers {
				assert.Equal(t, p.Addr() >= "c", p.Stats().Blind, p.Addr())
			}
			assert.EqualValues(t, 2, b.(interface{ BlindCount() uint64 }).BlindCount())
		})
	}
}

// TestSight_unwatched: a picker that does not balance by reports
// (LeastConn without WithReportedLoad, SmoothWRR) says nothing of them.
func TestSight_unwatched(t *testing.T) {
	for _, name := range []string{"LeastConn", "SmoothWRR", "P2CPeakEWMA", "Prequal"} {
		t.Run(name, func(t *testing.T) {
			clk := newFakeClock()
			var log sightLog
			p := NewPeer("a")
			b := newWatcher(t, name, []*Peer{p}, clk.opt(), WithEvents(log.hook))
			for range 100 {
				require.NoError(t, b.Done(mustPick(t, b, nil), Outcome{}))
				clk.add(100 * time.Millisecond)
			}
			assert.Empty(t, log.events())
			assert.False(t, p.Stats().Blind)
		})
	}
}

// TestSight_concurrent: 8 goroutines reply without reports on one peer,
// each reply moving the clock 1 ms: one EventPeerBlind and one count,
// however the replies interleave.
func TestSight_concurrent(t *testing.T) {
	for _, w := range reportWatchers {
		t.Run(w.name, func(t *testing.T) {
			clk := newFakeClock()
			var log sightLog
			p := NewPeer("a")
			b := newWatcher(t, w.name, []*Peer{p}, append([]Option{clk.opt(), WithEvents(log.hook)}, w.opts...)...)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 500 {
						q, err := b.Pick(nil)
						if err != nil {
							t.Error(err)
							return
						}
						clk.add(time.Millisecond)
						if err := b.Done(q, Outcome{}); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			evs := log.events()
			require.Len(t, evs, 1)
			assert.Equal(t, EventPeerBlind, evs[0].Kind)
			assert.GreaterOrEqual(t, evs[0].Misses, blindReplies)
			assert.EqualValues(t, 1, b.(interface{ BlindCount() uint64 }).BlindCount())
		})
	}
}

// TestSight_movedPeer: a peer one picker is blind to starts unseen in the
// next picker that claims it.
func TestSight_movedPeer(t *testing.T) {
	clk := newFakeClock()
	p, q := NewPeer("a"), NewPeer("b")
	one := newWatcher(t, "LeastConn", []*Peer{p, q}, clk.opt(), WithReportedLoad(time.Second, 1))
	for range 50 {
		require.NoError(t, one.Done(mustPick(t, one, nil), Outcome{}))
		clk.add(100 * time.Millisecond)
	}
	require.True(t, p.Stats().Blind)
	require.NoError(t, one.Remove(p))
	two := newWatcher(t, "ReportedWRR", []*Peer{NewPeer("c")}, clk.opt())
	require.NoError(t, two.Add(p))
	assert.False(t, p.Stats().Blind)
}

// TestSight_allocs: the watch allocates nothing, on a reply with a
// report, one without (the run counting), and one from a blind peer.
func TestSight_allocs(t *testing.T) {
	for _, w := range reportWatchers {
		t.Run(w.name, func(t *testing.T) {
			clk := newFakeClock()
			var n int
			b := newWatcher(t, w.name, []*Peer{NewPeer("a"), NewPeer("b")}, append([]Option{clk.opt(), WithEvents(func(e Event) {
				if e.Kind == EventPeerBlind {
					n++
				}
			})}, w.opts...)...)
			l := w.usable
			for _, load := range []*ServerLoad{&l, nil} {
				allocs := testing.AllocsPerRun(3000, func() {
					p, err := b.Pick(nil)
					if err != nil {
						panic(err)
					}
					clk.add(time.Millisecond)
					if err := b.Done(p, Outcome{Latency: time.Millisecond, Load: load}); err != nil {
						panic(err)
					}
				})
				assert.Zero(t, allocs, "load %v", load)
			}
			assert.Positive(t, n, "a peer went blind during the runs")
		})
	}
}

// TestSight_subset: a Subset counts the peers its inner picker went blind
// to, as the metrics Collector reads it. LeastConn with WithReportedLoad
// over a subset of 6 peers (3 of them: RingSubsetter's subset of 3),
// replies 200 ms apart without a report, in turn: each peer's 8th reply
// comes 7 × 600 ms = 4.2 s after its first, so all 3 are blind after 24
// replies, and none is at 21 (7 each).
func TestSight_subset(t *testing.T) {
	clk := newFakeClock()
	inner, err := NewLeastConn(nil, clk.opt(), WithReportedLoad(time.Second, 1))
	require.NoError(t, err)
	by, err := RingSubsetter(0, 2, 3)
	require.NoError(t, err)
	s, err := NewSubset(inner, addrPeers(6, 0), by)
	require.NoError(t, err)
	require.Len(t, s.Peers(), 3)
	for i := 1; i <= 24; i++ {
		require.NoError(t, s.Done(mustPick(t, s, nil), Outcome{}))
		clk.add(200 * time.Millisecond)
		if i == 21 {
			require.Zero(t, s.BlindCount())
		}
	}
	assert.EqualValues(t, 3, s.BlindCount())
}
