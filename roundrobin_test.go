package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// RoundRobin's promises beyond the contract, checked by FuzzPickers.
var _ = declareTraits("RoundRobin", fuzzTrait{cycle: cycleRotation, zeroWeight: zwStatic})

// newTestRR returns a RoundRobin over peers on clock c with both counters at
// 0, where Ribbon's RoundRobinRule starts: its first pick is then slot 1.
func newTestRR(t *testing.T, c *fakeClock, peers ...*Peer) *RoundRobin {
	t.Helper()
	b, err := NewRoundRobin(peers, c.opt())
	require.NoError(t, err)
	b.ctr.Store(0)
	b.bctr.Store(0)
	return b
}

func TestRoundRobin_ribbonVectors(t *testing.T) {
	// Ribbon's RoundRobinRule vectors (dubbo_ribbon.md section 5), with the
	// counter at 0 as Ribbon's starts. Ribbon marks a server dead with
	// isAlive; here that is Down, or a fail window.
	dead := []PeerOption{Down()}
	failing := []PeerOption{MaxFails(1)}
	tests := []struct {
		name  string
		peers [][]PeerOption
		fail  []int // peers that fail once before the picks
		want  string
	}{
		{"all alive", [][]PeerOption{nil, nil, nil}, nil, "b c a b c a"},
		{"middle down", [][]PeerOption{nil, dead, nil}, nil, "c a c a c a"},
		{"middle failing", [][]PeerOption{nil, failing, nil}, []int{1}, "c a c a c a"},
		// Ribbon gives up after 10 tries and returns null first; the scan
		// here visits every peer once, so it finds a at once.
		{"eleven, only the first alive", append([][]PeerOption{nil}, rrRepeat(dead, 10)...), nil, "a a a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			peers := named(tt.peers...)
			b := newTestRR(t, newFakeClock(), peers...)
			for _, i := range tt.fail {
				rrFailOnce(t, b, peers[i])
			}
			b.ctr.Store(0)
			assert.Equal(t, tt.want, picks(t, b, len(strings.Fields(tt.want)), pickGaps))
		})
	}
}

func rrRepeat(o []PeerOption, n int) [][]PeerOption {
	out := make([][]PeerOption, n)
	for i := range out {
		out[i] = o
	}
	return out
}

// rrFailOnce reports one failed attempt on p, picking until Pick returns it.
func rrFailOnce(t *testing.T, b Picker, p *Peer) {
	t.Helper()
	for range 1000 {
		got, err := b.Pick(nil)
		require.NoError(t, err)
		if got == p {
			require.NoError(t, b.Done(got, Outcome{Failed: true}))
			return
		}
		require.NoError(t, b.Done(got, Outcome{}))
	}
	t.Fatalf("Pick never returned %s", p)
}

func TestRoundRobin_firstPick(t *testing.T) {
	// The starting offset is the top 31 bits of the source's first draw and
	// the first pick takes the slot after it.
	peers := weighted(1, 1, 1, 1, 1)
	for seed := range uint64(5) {
		b, err := NewRoundRobin(weighted(1, 1, 1, 1, 1), WithRand(rand.NewPCG(seed, 7)))
		require.NoError(t, err)
		src := rand.NewPCG(seed, 7)
		want := peers[(src.Uint64()>>33+1)%5].Addr()
		got, err := b.Pick(nil)
		require.NoError(t, err)
		assert.Equal(t, want, got.Addr(), "seed %d", seed)
	}

	// Over many clients the first picks spread evenly: 1000 clients on 4
	// peers, 250 expected on each with a standard deviation of
	// sqrt(1000·1/4·3/4) ≈ 13.7; 5 deviations is a wide margin.
	counts := map[string]int{}
	for seed := range uint64(1000) {
		b, err := NewRoundRobin(weighted(1, 1, 1, 1), WithRand(rand.NewPCG(seed, 1)))
		require.NoError(t, err)
		got, err := b.Pick(nil)
		require.NoError(t, err)
		counts[got.Addr()]++
	}
	for _, a := range []string{"a", "b", "c", "d"} {
		assert.InDelta(t, 250, counts[a], 5*13.7, "first picks on %s", a)
	}
}

func TestRoundRobin_counterWrap(t *testing.T) {
	// Ribbon's semantics: from a counter at c the k-th pick takes slot
	// (c + k) mod n, worked out here without overflow as (c mod n + k) mod n.
	// Starting just below the fold, just below 2^32 (a counter no fold has
	// caught) and just below 2^64, the rotation must go on unbroken.
	for _, n := range []int{3, 5, 8} {
		for _, start := range []uint64{foldAt - 3, 1<<32 - 3, math.MaxUint64 - 3} {
			t.Run(fmt.Sprintf("n=%d/start=%#x", n, start), func(t *testing.T) {
				ws := make([]int, n)
				for i := range ws {
					ws[i] = 1
				}
				peers := weighted(ws...)
				b := newTestRR(t, newFakeClock(), peers...)
				b.ctr.Store(start)
				var want, got []string
				for k := uint64(1); k <= 3*uint64(n); k++ {
					want = append(want, peers[(start%uint64(n)+k)%uint64(n)].Addr())
					p, err := b.Pick(nil)
					require.NoError(t, err)
					require.NoError(t, b.Done(p, Outcome{}))
					got = append(got, p.Addr())
				}
				assert.Equal(t, want, got)
				assert.Less(t, b.ctr.Load(), uint64(foldAt), "the counter was folded")
			})
		}
	}
}

func TestRoundRobin_failWindow(t *testing.T) {
	// a b c with max_fails 1, fail_timeout 10s. Each line of the scenario is
	// worked out from the counter: pick k takes slot k mod 3, a skipped slot
	// uses up its turn.
	clk := newFakeClock()
	peers := weighted(1, 1, 1)
	b := newTestRR(t, clk, peers...)
	bp := peers[1]

	p, err := b.Pick(nil) // counter 1: b
	require.NoError(t, err)
	require.Same(t, bp, p)
	require.NoError(t, b.Done(p, Outcome{Failed: true}))
	assert.Equal(t, 1, bp.State().Fails)

	// Counter 2 c, 3 a, 4 b skipped for c (5 used up), 6 a.
	assert.Equal(t, "c a c a", picks(t, b, 4, pickGaps))

	// At exactly fail_timeout b is still out (nginx compares with <=).
	clk.add(10 * time.Second)
	assert.Equal(t, "c a", picks(t, b, 2, pickGaps)) // 7 b skipped for c, 9 a

	// Past it, b gets one probe. Counter 10: b.
	clk.add(time.Second)
	probe, err := b.Pick(nil)
	require.NoError(t, err)
	require.Same(t, bp, probe)
	// While the probe is out, b is back inside a fresh window: 11 c, 12 a,
	// 13 b skipped for c.
	assert.Equal(t, "c a c", picks(t, b, 3, pickGaps))

	// The probe succeeds: the failures are cleared and b is back (15 a,
	// 16 b).
	require.NoError(t, b.Done(probe, Outcome{}))
	assert.Zero(t, bp.State().Fails)
	assert.Equal(t, "a b c", picks(t, b, 3, pickGaps))
}

func TestRoundRobin_probeFails(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestRR(t, clk, peers...)
	rrFailOnce(t, b, peers[0])
	clk.add(11 * time.Second)
	b.ctr.Store(1) // the next turn is a's
	probe, err := b.Pick(nil)
	require.NoError(t, err)
	require.Same(t, peers[0], probe)
	require.NoError(t, b.Done(probe, Outcome{Failed: true}))
	// Out for another fail_timeout from the failed probe.
	clk.add(10 * time.Second)
	assert.Equal(t, "b b b", picks(t, b, 3, pickGaps))
	clk.add(time.Second)
	b.ctr.Store(1)
	assert.Equal(t, "a", picks(t, b, 1, pickGaps))
}

func TestRoundRobin_belowMaxFails(t *testing.T) {
	// A peer with failures below max_fails stays in rotation.
	clk := newFakeClock()
	peers := []*Peer{NewPeer("a", MaxFails(3)), NewPeer("b", MaxFails(3))}
	b := newTestRR(t, clk, peers...)
	rrFailOnce(t, b, peers[0])
	rrFailOnce(t, b, peers[0])
	b.ctr.Store(1)
	assert.Equal(t, "a b a b", picks(t, b, 4, pickGaps))
	assert.Equal(t, 2, peers[0].State().Fails, "successes inside the window clear nothing")
	// A success picked after the window has passed answers a check and
	// clears the failures, as nginx does.
	clk.add(11 * time.Second)
	b.ctr.Store(1)
	assert.Equal(t, "a", picks(t, b, 1, pickGaps))
	assert.Zero(t, peers[0].State().Fails)
}

func TestRoundRobin_maxConns(t *testing.T) {
	peers := []*Peer{NewPeer("a", MaxConns(1)), NewPeer("b"), NewPeer("c")}
	b := newTestRR(t, newFakeClock(), peers...)
	b.ctr.Store(2) // next turn: a
	held, err := b.Pick(nil)
	require.NoError(t, err)
	require.Same(t, peers[0], held)
	// a is full: 4 b, 5 c, 6 a skipped for b (7 used up), 8 c.
	assert.Equal(t, "b c b c", picks(t, b, 4, pickGaps))
	require.NoError(t, b.Done(held, Outcome{}))
	assert.Equal(t, "a b c", picks(t, b, 3, pickGaps))
}

func TestRoundRobin_maxConnsConcurrent(t *testing.T) {
	// Concurrent picks never push a peer past max_conns.
	a := NewPeer("a", MaxConns(2))
	b := newTestRR(t, newFakeClock(), a)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 500 {
				p, err := b.Pick(nil)
				if err != nil {
					assert.ErrorIs(t, err, ErrNoLivePeer)
					continue
				}
				assert.LessOrEqual(t, a.InFlight(), 2)
				assert.NoError(t, b.Done(p, Outcome{}))
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, a.InFlight())
}

func TestRoundRobin_request(t *testing.T) {
	tests := []struct {
		name  string
		peers [][]PeerOption
		want  []string // attempts of one request, each failing
		err   error    // after them
	}{
		// Counter 0: the first attempt takes b, the retries c and a.
		{"three", [][]PeerOption{nil, nil, nil}, []string{"b", "c", "a"}, ErrTriesExhausted},
		// A down peer does not count in the bound (nginx's tries).
		{"one down", [][]PeerOption{nil, {Down()}, nil}, []string{"c", "a"}, ErrTriesExhausted},
		// Backups count too; the request moves to them once every
		// primary is tried.
		{"backup", [][]PeerOption{nil, nil, {Backup()}}, []string{"b", "a", "c"}, ErrTriesExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := make([][]PeerOption, len(tt.peers))
			for i, o := range tt.peers {
				opts[i] = append(o, MaxFails(0)) // failures do not take peers out here
			}
			b := newTestRR(t, newFakeClock(), named(opts...)...)
			var r Request
			var got []string
			for range tt.want {
				p, err := b.Pick(&r)
				require.NoError(t, err)
				got = append(got, p.Addr())
				require.NoError(t, b.Done(p, Outcome{Failed: true}))
			}
			assert.Equal(t, tt.want, got)
			_, err := b.Pick(&r)
			assert.ErrorIs(t, err, tt.err)
			assert.Equal(t, len(tt.want), r.Attempts())
		})
	}
}

func TestRoundRobin_retrySkipsTried(t *testing.T) {
	// Another request's picks between the attempts move the counter back
	// onto the peer this request already tried: it is skipped.
	peers := weighted(1, 1)
	b := newTestRR(t, newFakeClock(), peers...)
	var r Request
	first, err := b.Pick(&r) // counter 1: b
	require.NoError(t, err)
	require.NoError(t, b.Done(first, Outcome{}))
	other, err := b.Pick(nil) // counter 2: a
	require.NoError(t, err)
	require.NoError(t, b.Done(other, Outcome{}))
	second, err := b.Pick(&r) // counter 3: b, tried, so a
	require.NoError(t, err)
	assert.Equal(t, "b a a", first.Addr()+" "+other.Addr()+" "+second.Addr())
}

func TestRoundRobin_backup(t *testing.T) {
	clk := newFakeClock()
	peers := named(nil, nil, []PeerOption{Backup()}, []PeerOption{Backup()})
	b := newTestRR(t, clk, peers...)
	assert.Equal(t, "b a b a", picks(t, b, 4, pickGaps))

	// Both primaries fail: the backups take turns on their own counter,
	// which starts at 0, so d (backup slot 1) first.
	rrFailOnce(t, b, peers[0])
	rrFailOnce(t, b, peers[1])
	assert.Equal(t, "d c d c", picks(t, b, 4, pickGaps))

	// A request that moved to the backups stays there; a new one starts on
	// the primaries again.
	var r Request
	p, err := b.Pick(&r)
	require.NoError(t, err)
	assert.True(t, p.IsBackup())
	require.NoError(t, b.Done(p, Outcome{}))
	clk.add(11 * time.Second)
	p, err = b.Pick(&r)
	require.NoError(t, err)
	assert.True(t, p.IsBackup(), "the request stays on the backups")
	require.NoError(t, b.Done(p, Outcome{}))
	p, err = b.Pick(nil)
	require.NoError(t, err)
	assert.False(t, p.IsBackup(), "a probe of a primary")
	require.NoError(t, b.Done(p, Outcome{}))

	// Backups down as well: nothing is live.
	for _, q := range peers {
		require.NoError(t, b.SetDown(q, true))
	}
	_, err = b.Pick(nil)
	assert.ErrorIs(t, err, ErrNoLivePeer)
	r.Reset()
	_, err = b.Pick(&r)
	assert.ErrorIs(t, err, ErrNoLivePeer, "a fresh request over down peers")
}

func TestRoundRobin_onlyBackups(t *testing.T) {
	b := newTestRR(t, newFakeClock(), named([]PeerOption{Backup()}, []PeerOption{Backup()})...)
	assert.Equal(t, "b a b", picks(t, b, 3, pickGaps))
}

func TestRoundRobin_weights(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		want    string
	}{
		{"ignored", []int{5, 1, 1}, "b c a b c a"},
		{"zero never picked", []int{0, 1, 1}, "c b c b"},
		{"all zero take turns", []int{0, 0, 0}, "b c a b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestRR(t, newFakeClock(), weighted(tt.weights...)...)
			assert.Equal(t, tt.want, picks(t, b, len(strings.Fields(tt.want)), pickGaps))
		})
	}

	// A zero-weight peer stays out even when every weighted one is.
	peers := weighted(0, 1)
	b := newTestRR(t, newFakeClock(), peers...)
	require.NoError(t, b.SetDown(peers[1], true))
	_, err := b.Pick(nil)
	assert.ErrorIs(t, err, ErrNoLivePeer)
	// SetWeight takes effect on the next pick.
	require.NoError(t, b.SetWeight(peers[0], 2))
	assert.Equal(t, "a a", picks(t, b, 2, pickGaps))
}

func TestRoundRobin_singlePeer(t *testing.T) {
	// nginx ignores max_fails with a single server: a peer left alone with
	// failures on record is still picked.
	clk := newFakeClock()
	peers := weighted(1, 1)
	b := newTestRR(t, clk, peers...)
	rrFailOnce(t, b, peers[0])
	require.NoError(t, b.Remove(peers[1]))
	assert.Equal(t, "a a", picks(t, b, 2, pickGaps))
	assert.Zero(t, peers[0].State().Fails, "any report clears a single peer's failures")
}

func TestRoundRobin_updates(t *testing.T) {
	peers := weighted(1, 1)
	b := newTestRR(t, newFakeClock(), peers...)
	assert.Equal(t, "b a", picks(t, b, 2, pickGaps))
	// The counter carries on over the new list: 3 mod 3 is a.
	require.NoError(t, b.Add(NewPeer("c")))
	assert.Equal(t, "a b c a", picks(t, b, 4, pickGaps))
	require.NoError(t, b.Remove(peers[0]))
	// Over b c: 7 mod 2 = 1, c.
	assert.Equal(t, "c b c", picks(t, b, 3, pickGaps))
}

func TestRoundRobin_errors(t *testing.T) {
	b, err := NewRoundRobin(nil)
	require.NoError(t, err)
	_, err = b.Pick(nil)
	assert.ErrorIs(t, err, ErrNoPeers)
	_, err = b.Pick(&Request{})
	assert.ErrorIs(t, err, ErrNoPeers)

	_, err = NewRoundRobin(nil, WithWarmup(time.Minute))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewRoundRobin([]*Peer{NewPeer("a", Weight(-1))})
	assert.ErrorIs(t, err, ErrInvalidConfig)

	a := NewPeer("a")
	b, err = NewRoundRobin([]*Peer{a})
	require.NoError(t, err)
	assert.ErrorIs(t, b.Done(a, Outcome{}), ErrNotInFlight)
	assert.ErrorIs(t, b.Done(NewPeer("x"), Outcome{}), ErrUnknownPeer)
	p, err := b.Pick(nil)
	require.NoError(t, err)
	assert.ErrorIs(t, b.Done(p, Outcome{Latency: -1}), ErrInvalidLatency)
	assert.NoError(t, b.Done(p, Outcome{}))
}

func TestRoundRobin_concurrentExact(t *testing.T) {
	// Every pick takes the next value of one counter, so over a multiple of
	// n picks each peer gets exactly its share, however the goroutines
	// interleave.
	peers := weighted(1, 1, 1)
	b := newTestRR(t, newFakeClock(), peers...)
	const goroutines, each = 2, 3000
	counts := make([]map[string]int, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		counts[g] = map[string]int{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				p, err := b.Pick(nil)
				if !assert.NoError(t, err) {
					return
				}
				counts[g][p.Addr()]++
				assert.NoError(t, b.Done(p, Outcome{}))
			}
		}()
	}
	wg.Wait()
	total := map[string]int{}
	for _, c := range counts {
		for a, n := range c {
			total[a] += n
		}
	}
	assert.Equal(t, map[string]int{"a": 2000, "b": 2000, "c": 2000}, total)
}

func TestRoundRobin_pickAllocs(t *testing.T) {
	for _, n := range []int{3, 70} {
		// max_fails 0 keeps failing peers in: with failures on record,
		// every pick and report takes the slow path.
		peers := makePeers(n, numbered, func(int) []PeerOption { return []PeerOption{MaxFails(0)} })
		b := newTestRR(t, newFakeClock(), peers...)
		require.NoError(t, b.SetDown(peers[1], true)) // the scan is exercised too
		allocs := testing.AllocsPerRun(1000, func() {
			p, _ := b.Pick(nil)
			_ = b.Done(p, Outcome{})
		})
		assert.Zero(t, allocs, "Pick(nil) with %d peers", n)
		var r Request
		allocs = testing.AllocsPerRun(1000, func() {
			r.Reset()
			p, _ := b.Pick(&r)
			_ = b.Done(p, Outcome{Failed: true})
			p, _ = b.Pick(&r)
			_ = b.Done(p, Outcome{})
		})
		assert.Zero(t, allocs, "a retried request with %d peers", n)
	}
}
