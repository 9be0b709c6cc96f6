package balancer

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestContract_noPeers(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		p, err := pc.new(nil)
		require.NoError(t, err)
		peer, err := p.Pick(nil)
		assert.ErrorIs(t, err, ErrNoPeers)
		assert.Nil(t, peer)
	})
}

func TestContract_invalidConfig(t *testing.T) {
	inUse := NewPeer("used")
	tests := []struct {
		name  string
		peers func() []*Peer
		want  error
	}{
		{"empty address", func() []*Peer { return []*Peer{NewPeer("")} }, ErrInvalidConfig},
		{"negative weight", func() []*Peer { return []*Peer{NewPeer("a", Weight(-1))} }, ErrInvalidConfig},
		{"huge weight", func() []*Peer { return []*Peer{NewPeer("a", Weight(MaxWeightSum+1))} }, ErrInvalidConfig},
		{"weight sum overflows", func() []*Peer {
			return []*Peer{NewPeer("a", Weight(MaxWeightSum)), NewPeer("b", Weight(1))}
		}, ErrInvalidConfig},
		{"negative max_fails", func() []*Peer { return []*Peer{NewPeer("a", MaxFails(-1))} }, ErrInvalidConfig},
		{"negative fail_timeout", func() []*Peer { return []*Peer{NewPeer("a", FailTimeout(-time.Second))} }, ErrInvalidConfig},
		{"negative max_conns", func() []*Peer { return []*Peer{NewPeer("a", MaxConns(-1))} }, ErrInvalidConfig},
		{"nil peer", func() []*Peer { return []*Peer{nil} }, ErrInvalidConfig},
		{"one peer twice", func() []*Peer { a := NewPeer("a"); return []*Peer{a, NewPeer("b"), a} }, ErrDuplicatePeer},
		{"in use", func() []*Peer { return []*Peer{inUse} }, ErrPeerInUse},
	}
	_, err := NewSmoothWRR([]*Peer{inUse})
	require.NoError(t, err)
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := pc.new(tt.peers())
				assert.ErrorIs(t, err, tt.want)
			})
		}
		t.Run("nil clock", func(t *testing.T) {
			_, err := pc.new(nil, WithClock(nil))
			assert.ErrorIs(t, err, ErrInvalidConfig)
		})
	})
}

func TestContract_messagesNameTheValue(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, err := pc.new([]*Peer{NewPeer("10.0.0.1:80", Weight(-7))})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "10.0.0.1:80")
		assert.Contains(t, err.Error(), "-7")
		x := NewPeer("x:1")
		_, err = pc.new([]*Peer{x, x})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "x:1")
	})
}

func TestContract_singlePeer(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a := NewPeer("a", Weight(3))
		p, err := pc.new([]*Peer{a})
		require.NoError(t, err)
		for range 10 {
			got := mustPick(t, p, nil)
			assert.Same(t, a, got)
			require.NoError(t, p.Done(got, Outcome{Latency: time.Millisecond}))
		}
	})
}

func TestContract_zeroWeights(t *testing.T) {
	// All weights zero still picks (nothing to prefer); a zero-weight peer
	// next to a weighted one is never picked.
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		p, err := pc.new([]*Peer{NewPeer("a", Weight(0)), NewPeer("b", Weight(0))})
		require.NoError(t, err)
		require.NoError(t, p.Done(mustPick(t, p, nil), Outcome{}))
	})
}

func TestContract_downNeverPicked(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := []*Peer{NewPeer("a", Down()), NewPeer("b"), NewPeer("c", Down()), NewPeer("d")}
		p, err := pc.new(peers)
		require.NoError(t, err)
		for range 50 {
			got := mustPick(t, p, nil)
			assert.False(t, got.IsDown(), "picked down peer %s", got)
			require.NoError(t, p.Done(got, Outcome{}))
		}
		for _, q := range peers {
			require.NoError(t, toSet(p).SetDown(q, true))
		}
		_, err = p.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer)
	})
}

func TestContract_backupOnlyWhenNoPrimary(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a, b := NewPeer("a"), NewPeer("b")
		bk := NewPeer("bk", Backup())
		p, err := pc.new([]*Peer{a, b, bk})
		if pc.alg.NoBackups {
			assert.ErrorIs(t, err, ErrInvalidConfig, "nginx refuses backup with this method")
			assert.ErrorContains(t, err, `"bk"`)
			return
		}
		require.NoError(t, err)
		for range 20 {
			got := mustPick(t, p, nil)
			assert.NotSame(t, bk, got)
			require.NoError(t, p.Done(got, Outcome{}))
		}
		// Both primaries fail once (max_fails 1): they are out, the
		// backup takes over, and within one request the retry order is
		// primary, primary, backup.
		var r Request
		first := mustPick(t, p, &r)
		require.NoError(t, p.Done(first, Outcome{Failed: true}))
		second := mustPick(t, p, &r)
		assert.NotSame(t, first, second)
		assert.False(t, second.IsBackup())
		require.NoError(t, p.Done(second, Outcome{Failed: true}))
		third := mustPick(t, p, &r)
		assert.Same(t, bk, third)
		require.NoError(t, p.Done(third, Outcome{}))
		_, err = p.Pick(&r)
		assert.ErrorIs(t, err, ErrTriesExhausted, "three peers, three tries")
		for range 5 {
			got := mustPick(t, p, nil)
			assert.Same(t, bk, got)
			require.NoError(t, p.Done(got, Outcome{}))
		}
	})
}

func TestContract_retriesTryEachPeerOnce(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range []int{2, 5, 64, 70} {
			t.Run(fmt.Sprint(n), func(t *testing.T) {
				peers := makePeers(n, numbered, func(i int) []PeerOption { return []PeerOption{MaxFails(0), Weight(1 + i%3)} })
				p, err := pc.new(peers)
				require.NoError(t, err)
				var r Request
				seen := map[*Peer]bool{}
				for range n {
					got := mustPick(t, p, &r)
					assert.False(t, seen[got], "peer %s tried twice", got)
					seen[got] = true
					require.NoError(t, p.Done(got, Outcome{Failed: true}))
				}
				_, err = p.Pick(&r)
				assert.ErrorIs(t, err, ErrTriesExhausted)
				assert.Equal(t, n, r.Attempts())
			})
		}
	})
}

func TestContract_doneErrors(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a := NewPeer("a")
		p, err := pc.new([]*Peer{a, NewPeer("b")})
		require.NoError(t, err)
		other := NewPeer("other")

		assert.ErrorIs(t, p.Done(other, Outcome{}), ErrUnknownPeer)
		assert.ErrorIs(t, p.Done(nil, Outcome{}), ErrUnknownPeer)
		assert.ErrorIs(t, p.Done(a, Outcome{}), ErrNotInFlight, "never picked")

		got := mustPick(t, p, nil)
		assert.ErrorIs(t, p.Done(got, Outcome{Latency: -time.Second}), ErrInvalidLatency)
		assert.Equal(t, 1, got.InFlight(), "a rejected report changes nothing")
		require.NoError(t, p.Done(got, Outcome{}))
		assert.ErrorIs(t, p.Done(got, Outcome{Failed: true}), ErrNotInFlight, "reported twice")
		assert.Zero(t, got.State().Fails, "the second report was not counted")
		assert.Zero(t, got.InFlight())

		// Removal while in flight is routine (service discovery): the
		// report is accepted and only ends the in-flight count.
		got = mustPick(t, p, nil)
		require.NoError(t, toSet(p).Remove(got))
		assert.NoError(t, p.Done(got, Outcome{Failed: true}), "removed while in flight")
		assert.Zero(t, got.InFlight())
		assert.Zero(t, got.State().Fails)
		assert.ErrorIs(t, p.Done(got, Outcome{}), ErrUnknownPeer, "reported twice after removal")
	})
}

func TestContract_updates(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a, b := NewPeer("a"), NewPeer("b")
		p, err := pc.new([]*Peer{a, b})
		require.NoError(t, err)
		set := toSet(p)
		c := NewPeer("c", Weight(2))
		require.NoError(t, set.Add(c))
		assert.ErrorIs(t, set.Add(c), ErrPeerInUse)
		d := NewPeer("d")
		assert.ErrorIs(t, set.Add(d, d), ErrDuplicatePeer)
		assert.ErrorIs(t, set.SetWeight(a, -1), ErrInvalidConfig)
		assert.ErrorIs(t, set.SetWeight(NewPeer("x"), 1), ErrUnknownPeer)
		assert.ErrorIs(t, set.Remove(NewPeer("x")), ErrUnknownPeer)
		require.NoError(t, set.Remove(a))
		assert.ErrorIs(t, set.Remove(a), ErrUnknownPeer)
		require.NoError(t, set.SetWeight(b, 3))
		assert.Equal(t, 3, b.Weight())
		assert.Equal(t, []*Peer{b, c}, set.Peers())
		for range 20 {
			got := mustPick(t, p, nil)
			assert.NotSame(t, a, got, "removed peer picked")
			require.NoError(t, p.Done(got, Outcome{}))
		}
		// A removed peer can join another picker.
		_, err = pc.new([]*Peer{a})
		assert.NoError(t, err)
	})
}

// TestContract_concurrent picks and reports from many goroutines while
// others change the peer set, then checks the books balance: every pick was
// reported, nothing is left in flight, and no call returned a nil peer with
// a nil error. Run it under -race.
func TestContract_concurrent(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := weighted(5, 1, 2, 3)
		p, err := pc.new(peers)
		require.NoError(t, err)
		set := toSet(p)
		extra := NewPeer("extra", Weight(2))
		var wg sync.WaitGroup
		var mu sync.Mutex
		var errs []error
		stop := make(chan struct{})
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 1))
				var r Request
				for i := 0; i < 2000; i++ {
					r.Reset()
					for {
						peer, err := p.Pick(&r)
						if err != nil {
							if !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
								mu.Lock()
								errs = append(errs, err)
								mu.Unlock()
							}
							break
						}
						if peer == nil {
							mu.Lock()
							errs = append(errs, errors.New("nil peer, nil error"))
							mu.Unlock()
							break
						}
						failed := rng.IntN(20) == 0
						err = p.Done(peer, Outcome{Failed: failed, Latency: time.Duration(rng.IntN(1000)) * time.Microsecond})
						if err != nil && !errors.Is(err, ErrUnknownPeer) {
							mu.Lock()
							errs = append(errs, err)
							mu.Unlock()
						}
						if !failed {
							break
						}
					}
				}
			}()
		}
		var updates sync.WaitGroup
		updates.Add(1)
		go func() {
			defer updates.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				switch i % 4 {
				case 0:
					_ = set.Add(extra)
				case 1:
					_ = set.SetWeight(peers[1], 1+i%5)
				case 2:
					_ = set.SetDown(peers[2], i%8 == 2)
				case 3:
					_ = set.Remove(extra)
				}
				_ = peers[0].State()
			}
		}()
		wg.Wait()
		close(stop)
		updates.Wait()
		assert.Empty(t, errs)
		for _, q := range append(peers, extra) {
			assert.Zero(t, q.InFlight(), "peer %s", q)
		}
	})
}

func TestContract_pickAllocs(t *testing.T) {
	// AllocsPerRun reports the allocations a run rounded down: the test
	// fails at one allocation a run on average, whether over 100 runs or
	// 1,000. The race detector watches one goroutine here and multiplied
	// the test's time by ten: under it 100 runs, the plain run keeps 1,000
	// (and with them what only a longer run reaches).
	runs := 1000
	if underRace {
		runs = 100
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range []int{2, 10, 64, 1000} {
			// MaxFails(0): failures are accounted but never take a
			// peer out, so every call below finds a peer.
			peers := makePeers(n, numbered, func(i int) []PeerOption { return []PeerOption{Weight(i%10 + 1), MaxFails(0)} })
			p, err := pc.new(peers)
			require.NoError(t, err)
			allocs := testing.AllocsPerRun(runs, func() {
				peer, _ := p.Pick(nil)
				_ = p.Done(peer, Outcome{Latency: time.Millisecond})
			})
			assert.Zero(t, allocs, "Pick+Done with %d peers", n)

			// A request with retries, the failure accounting and the
			// exact scan included.
			var r Request
			allocs = testing.AllocsPerRun(runs, func() {
				r.Reset()
				peer, _ := p.Pick(&r)
				_ = p.Done(peer, Outcome{Failed: true, Latency: time.Millisecond})
				peer, _ = p.Pick(&r)
				_ = p.Done(peer, Outcome{Latency: time.Millisecond})
			})
			assert.Zero(t, allocs, "a retried request with %d peers", n)
		}
	})
}

func TestContract_peersIsACopy(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := weighted(5, 1, 1)
		p, err := pc.new(peers)
		require.NoError(t, err)
		got := toSet(p).Peers()
		got[0], got[1] = got[1], got[0]
		got[2] = nil
		assert.Equal(t, peers, toSet(p).Peers(), "the caller's slice is not the picker's")
		for range 10 {
			require.NoError(t, p.Done(mustPick(t, p, nil), Outcome{}))
		}
	})
}

// A Request whose only Pick found nothing live, not even among the backups,
// has made no attempt: once a primary is back it must be offered, exactly as
// to a request that never picked.
func TestContract_freshRequestStartsOnPrimaries(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a")
		if pc.alg.NoBackups {
			t.Skip("no backups with this method")
		}
		p, err := pc.new([]*Peer{a, NewPeer("b"), NewPeer("bk", Backup(), Down())}, clk.opt())
		require.NoError(t, err)
		for range 2 {
			var r Request
			got := mustPick(t, p, &r)
			require.NoError(t, p.Done(got, Outcome{Failed: true}))
		}
		var r Request
		_, err = p.Pick(&r)
		require.ErrorIs(t, err, ErrNoLivePeer)
		clk.add(11 * time.Second)
		got, err := p.Pick(&r)
		require.NoError(t, err, "primaries due for their probe")
		assert.False(t, got.IsBackup())
		require.NoError(t, p.Done(got, Outcome{}))
	})
}

// Two pickers adding one peer at once: exactly one wins it.
func TestContract_addRace(t *testing.T) {
	for range 200 {
		x := NewPeer("x")
		a, err := NewSmoothWRR(nil)
		require.NoError(t, err)
		b, err := NewRoundRobin(nil)
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() { defer wg.Done(); errs[0] = a.Add(x) }()
		go func() { defer wg.Done(); errs[1] = b.Add(x) }()
		wg.Wait()
		assert.True(t, (errs[0] == nil) != (errs[1] == nil), "errors %v", errs)
		assert.Equal(t, 1, len(a.Peers())+len(b.Peers()))
	}
}

// optsFor returns a fake clock and a seeded source (for the pickers that
// draw) for pc.
func optsFor(pc pickerCase, clk *fakeClock) []Option {
	opts := []Option{clk.opt()}
	if pc.alg.Random {
		opts = append(opts, WithRand(rand.NewPCG(3, 4)))
	}
	return opts
}

// failOnly makes target, a peer of p, fail one attempt: the other peers are
// set down for the pick, so that every picker, keyed or not, picks target,
// then restored.
func failOnly(t *testing.T, p Balancer, target *Peer) {
	t.Helper()
	var restore []*Peer
	for _, q := range p.Peers() {
		if q != target && !q.IsDown() {
			require.NoError(t, p.SetDown(q, true))
			restore = append(restore, q)
		}
	}
	got := mustPick(t, p, nil)
	require.Same(t, target, got)
	require.NoError(t, p.Done(got, Outcome{Failed: true, Latency: 7 * time.Millisecond}))
	for _, q := range restore {
		require.NoError(t, p.SetDown(q, false))
	}
}

// latencyOf is the part of a peer's latency statistics Update must keep.
type latencyOf struct {
	ewma     uint64
	stamp    int64
	measured bool
}

func latencyState(p *Peer) latencyOf {
	return latencyOf{latOf(p).ewma.Load(), latOf(p).stamp.Load(), latOf(p).measured.Load()}
}

// TestContract_updateKeepsState reconciles a discovery snapshot that keeps
// one address with new parameters, keeps one marked down, adds one and
// drops one, with attempts in flight everywhere.
func TestContract_updateKeepsState(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a", MaxFails(3), Value("old a")), NewPeer("b", MaxFails(3), Value("old b")), NewPeer("c", MaxFails(3), Value("old c"))}
		p, err := pc.new(peers, optsFor(pc, clk)...)
		require.NoError(t, err)
		var held []*Peer
		for range 7 {
			held = append(held, mustPick(t, p, nil))
		}
		// x: the first peer picked; one of its attempts fails (one
		// failure, below max_fails 3) after 7 ms, and for the latency
		// pickers that is a sample.
		x := held[0]
		clk.add(time.Second)
		require.NoError(t, p.Done(x, Outcome{Failed: true, Latency: 7 * time.Millisecond}))
		held = held[1:]
		var others []*Peer
		for _, q := range peers {
			if q != x {
				others = append(others, q)
			}
		}
		y, z := others[0], others[1]
		xState, xLat, yLat := x.State(), latencyState(x), latencyState(y)
		require.Equal(t, 1, xState.Fails)
		if pc.alg.Latency {
			require.True(t, xLat.measured, "the failure is a sample")
		}
		inFlight := map[*Peer]int{x: x.InFlight(), y: y.InFlight(), z: z.InFlight()}

		xNew := NewPeer(x.Addr(), Weight(5), MaxFails(1), FailTimeout(3*time.Second), MaxConns(9), Value("new x"))
		yNew := NewPeer(y.Addr(), Down())
		d := NewPeer("d", Value("d"))
		clk.add(time.Second)
		require.NoError(t, p.Update([]*Peer{yNew, d, xNew}))

		assert.Equal(t, []*Peer{y, d, x}, p.Peers(), "kept peers are the picker's own, in the snapshot's order")
		// Parameters and values come from the snapshot.
		assert.Equal(t, 5, x.Weight())
		assert.Equal(t, 1, x.MaxFails())
		assert.Equal(t, 3*time.Second, x.FailTimeout())
		assert.Equal(t, 9, x.MaxConns())
		assert.Equal(t, "new x", x.Value())
		assert.True(t, y.IsDown())
		assert.Nil(t, y.Value(), "a snapshot peer without a value clears it")
		assert.Equal(t, "d", d.Value())
		assert.Equal(t, 5, x.State().EffectiveWeight, "a changed weight resets the effective weight")
		// State stays: failures, in-flight counts, latency statistics.
		got := x.State()
		assert.Equal(t, xState.Fails, got.Fails)
		assert.Equal(t, xState.Accessed, got.Accessed)
		assert.Equal(t, xState.Checked, got.Checked)
		assert.Equal(t, xLat, latencyState(x))
		assert.Equal(t, yLat, latencyState(y))
		for _, q := range []*Peer{x, y, z} {
			assert.Equal(t, inFlight[q], q.InFlight(), "in flight on %s", q)
		}
		// The snapshot's peers for kept addresses stay unowned.
		assert.ErrorIs(t, p.Done(xNew, Outcome{}), ErrUnknownPeer)
		_, err = pc.new([]*Peer{xNew, yNew})
		assert.NoError(t, err, "snapshot peers of kept addresses are free")

		// max_fails 1 and fail_timeout 3s apply to x's one failure at
		// once: x is out until that failure + 3s + 1ns; y is down; every
		// pick goes to d.
		at, ok := p.NextEligible()
		assert.True(t, ok)
		assert.Equal(t, xState.Accessed.Add(3*time.Second+1), at)
		for range 5 {
			q := mustPick(t, p, nil)
			assert.Same(t, d, q)
			require.NoError(t, p.Done(q, Outcome{Latency: time.Millisecond}))
		}

		// Attempts in flight on the dropped peer are still reported; the
		// failures are not counted, and z is free for another picker.
		for _, q := range held {
			require.NoError(t, p.Done(q, Outcome{Failed: q == z}), "attempt on %s", q)
		}
		assert.Zero(t, z.State().Fails)
		assert.ErrorIs(t, p.Done(z, Outcome{}), ErrUnknownPeer)
		_, err = pc.new([]*Peer{z})
		assert.NoError(t, err)
		for _, q := range []*Peer{x, y, z, d} {
			assert.Zero(t, q.InFlight(), "in flight on %s", q)
		}

		// max_conns on a kept peer applies too: d, with one attempt in
		// flight, becomes full and nothing is live.
		q := mustPick(t, p, nil)
		require.Same(t, d, q)
		require.NoError(t, p.Update([]*Peer{NewPeer("d", MaxConns(1)), NewPeer(x.Addr(), Down()), NewPeer(y.Addr(), Down())}))
		_, err = p.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer)
		require.NoError(t, p.Done(d, Outcome{}))
		assert.Same(t, d, mustPick(t, p, nil))

		// The picker's own peers given back change nothing; an empty
		// snapshot removes every peer.
		before := d.State()
		require.NoError(t, p.Update(p.Peers()))
		assert.Equal(t, []*Peer{d, x, y}, p.Peers())
		assert.Equal(t, before.InFlight, d.State().InFlight)
		require.NoError(t, p.Update(nil))
		assert.Empty(t, p.Peers())
		assert.NoError(t, p.Done(d, Outcome{}), "in flight when removed")
		_, err = p.Pick(nil)
		assert.ErrorIs(t, err, ErrNoPeers)
	})
}

// TestContract_updateRejects: an invalid snapshot changes nothing, names
// the offending address, and leaves its valid new peers free.
func TestContract_updateRejects(t *testing.T) {
	tests := []struct {
		name     string
		snapshot func(held []*Peer, foreign *Peer) []*Peer
		want     error
		names    string // in the message; "" for none
	}{
		{"nil peer", func(held []*Peer, _ *Peer) []*Peer { return []*Peer{NewPeer("a"), NewPeer("fresh"), nil} }, ErrInvalidConfig, ""},
		{"misconfigured new peer", func(held []*Peer, _ *Peer) []*Peer {
			return []*Peer{NewPeer("fresh"), NewPeer("x:9", Weight(-4))}
		}, ErrInvalidConfig, "x:9"},
		{"misconfigured held address", func(held []*Peer, _ *Peer) []*Peer {
			return []*Peer{NewPeer("fresh"), NewPeer("a", MaxFails(-2))}
		}, ErrInvalidConfig, `"a"`},
		{"new peer twice", func(held []*Peer, _ *Peer) []*Peer {
			x := NewPeer("x:9")
			return []*Peer{NewPeer("fresh"), x, x}
		}, ErrDuplicatePeer, "x:9"},
		{"held peer twice", func(held []*Peer, _ *Peer) []*Peer { return []*Peer{held[0], NewPeer("fresh"), held[0]} }, ErrDuplicatePeer, `"a"`},
		{"another picker's peer, new address", func(held []*Peer, foreign *Peer) []*Peer {
			return []*Peer{NewPeer("fresh"), foreign}
		}, ErrPeerInUse, "elsewhere"},
		{"another picker's peer, held address", func(held []*Peer, _ *Peer) []*Peer {
			q := NewPeer("c")
			if _, err := NewLeastConn([]*Peer{q}); err != nil {
				panic(err)
			}
			return []*Peer{NewPeer("fresh"), q}
		}, ErrPeerInUse, `"c"`},
		{"weights past MaxWeightSum", func(held []*Peer, _ *Peer) []*Peer {
			return []*Peer{NewPeer("fresh"), NewPeer("a", Weight(MaxWeightSum)), NewPeer("x:9", Weight(1))}
		}, ErrInvalidConfig, ""},
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				clk := newFakeClock()
				held := []*Peer{NewPeer("a", Weight(3), MaxFails(2), Value(1)), NewPeer("b", Weight(2), MaxFails(2)), NewPeer("c", MaxFails(2))}
				p, err := pc.new(held, optsFor(pc, clk)...)
				require.NoError(t, err)
				foreign := NewPeer("elsewhere")
				_, err = NewSmoothWRR([]*Peer{foreign})
				require.NoError(t, err)
				x := mustPick(t, p, nil)
				require.NoError(t, p.Done(x, Outcome{Failed: true, Latency: time.Millisecond}))
				y := mustPick(t, p, nil)

				type peerView struct {
					state           PeerState
					maxFails, conns int
					timeout         time.Duration
					value           any
					lat             latencyOf
				}
				view := func() (peers []*Peer, vs []peerView) {
					for _, q := range held {
						vs = append(vs, peerView{q.State(), q.MaxFails(), q.MaxConns(), q.FailTimeout(), q.Value(), latencyState(q)})
					}
					return p.Peers(), vs
				}
				peersBefore, before := view()
				snap := tt.snapshot(held, foreign)
				err = p.Update(snap)
				assert.ErrorIs(t, err, tt.want)
				if tt.names != "" {
					assert.ErrorContains(t, err, tt.names)
				}
				peersAfter, after := view()
				assert.Equal(t, peersBefore, peersAfter, "peers changed")
				assert.Equal(t, before, after, "peer state changed")
				// The snapshot's valid new peer was not claimed.
				for _, q := range snap {
					if q != nil && q.Addr() == "fresh" {
						_, err := NewLeastConn([]*Peer{q})
						assert.NoError(t, err, "fresh peer left claimed")
					}
				}
				require.NoError(t, p.Done(y, Outcome{}))
				for range 6 {
					require.NoError(t, p.Done(mustPick(t, p, nil), Outcome{}))
				}
			})
		}
	})
}

// TestContract_nextEligible: the exact instant a peer taken out by its
// failures is back, derived from nginx's test (out while now − checked <=
// fail_timeout, so back at checked + fail_timeout + 1ns), for every picker
// on a fake clock.
func TestContract_nextEligible(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a", FailTimeout(10*time.Second))
		b := NewPeer("b", FailTimeout(5*time.Second))
		c := NewPeer("c", FailTimeout(time.Second), MaxFails(2))
		p, err := pc.new([]*Peer{a, b, c}, optsFor(pc, clk)...)
		require.NoError(t, err)
		_, ok := p.NextEligible()
		assert.False(t, ok, "no failures")

		t0 := clk.now()
		failOnly(t, p, a)
		at, ok := p.NextEligible()
		assert.True(t, ok)
		assert.Equal(t, t0.Add(10*time.Second+1), at, "a out by max_fails 1")

		failOnly(t, p, c) // one failure of two: c is not out
		at, _ = p.NextEligible()
		assert.Equal(t, t0.Add(10*time.Second+1), at, "c below its max_fails")

		clk.add(time.Second)
		failOnly(t, p, b)
		at, ok = p.NextEligible()
		assert.True(t, ok)
		assert.Equal(t, t0.Add(6*time.Second+1), at, "b's window ends first")

		// At that instant minus 1ns b is still out; at it, b is back. c
		// is set down so that b is the only candidate.
		require.NoError(t, p.SetDown(c, true))
		clk.set(t0.Add(6 * time.Second))
		_, err = p.Pick(nil)
		assert.ErrorIs(t, err, ErrNoLivePeer, "b still out through checked+fail_timeout")
		at, _ = p.NextEligible()
		assert.Equal(t, t0.Add(6*time.Second+1), at)
		clk.add(1)
		q := mustPick(t, p, nil)
		assert.Same(t, b, q, "b's probe")
		require.NoError(t, p.Done(q, Outcome{}))
		at, ok = p.NextEligible()
		assert.True(t, ok)
		assert.Equal(t, t0.Add(10*time.Second+1), at, "b recovered: a is next")

		// A down peer waits for SetDown, not for time.
		require.NoError(t, p.SetDown(a, true))
		_, ok = p.NextEligible()
		assert.False(t, ok, "the only failed peer is down")
		require.NoError(t, p.SetDown(a, false))
		clk.set(t0.Add(10*time.Second + 1))
		_, ok = p.NextEligible()
		assert.False(t, ok, "a's window has passed")
	})
}

func TestContract_nextEligibleNever(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		t.Run("single peer", func(t *testing.T) {
			// nginx's single server is never out for its failures.
			clk := newFakeClock()
			a := NewPeer("a")
			p, err := pc.new([]*Peer{a}, optsFor(pc, clk)...)
			require.NoError(t, err)
			for range 3 {
				require.NoError(t, p.Done(mustPick(t, p, nil), Outcome{Failed: true}))
				_, ok := p.NextEligible()
				assert.False(t, ok)
			}
			assert.Same(t, a, mustPick(t, p, nil))
		})
		t.Run("down peers", func(t *testing.T) {
			clk := newFakeClock()
			p, err := pc.new([]*Peer{NewPeer("a", Down()), NewPeer("b", Down())}, optsFor(pc, clk)...)
			require.NoError(t, err)
			_, ok := p.NextEligible()
			assert.False(t, ok)
			_, err = p.Pick(nil)
			assert.ErrorIs(t, err, ErrNoLivePeer)
		})
		t.Run("fail_timeout past the last instant", func(t *testing.T) {
			// checked + fail_timeout + 1ns overflows int64: the answer
			// saturates at the last representable instant.
			clk := newFakeClock()
			a := NewPeer("a", FailTimeout(math.MaxInt64))
			p, err := pc.new([]*Peer{a, NewPeer("b")}, optsFor(pc, clk)...)
			require.NoError(t, err)
			failOnly(t, p, a)
			at, ok := p.NextEligible()
			assert.True(t, ok)
			assert.Equal(t, time.Unix(0, math.MaxInt64), at)
		})
	})
}

type backendConn struct{ name string }

// TestContract_value: the Value option's value comes back from a picked
// peer, and reading it allocates nothing.
func TestContract_value(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		conns := map[string]*backendConn{"a": {"conn a"}, "b": {"conn b"}}
		p, err := pc.new([]*Peer{
			NewPeer("a", Value(conns["a"]), MaxFails(0)),
			NewPeer("b", Value(conns["b"]), MaxFails(0)),
			NewPeer("c", MaxFails(0), Value(nil)),
		})
		require.NoError(t, err)
		for range 30 {
			q := mustPick(t, p, nil)
			if c := conns[q.Addr()]; c != nil {
				assert.Same(t, c, q.Value().(*backendConn))
			} else {
				assert.Nil(t, q.Value())
			}
			require.NoError(t, p.Done(q, Outcome{Latency: time.Millisecond}))
		}
		var sink *backendConn
		allocs := testing.AllocsPerRun(1000, func() {
			q, _ := p.Pick(nil)
			if c, ok := q.Value().(*backendConn); ok {
				sink = c
			}
			_ = p.Done(q, Outcome{Latency: time.Millisecond})
		})
		assert.Zero(t, allocs, "Pick+Done+Value")
		_ = sink
	})
}

// TestContract_abandoned: an abandoned attempt is not a failure, as nginx
// does not count a client's abort against the peer; its probe ends as a
// success ends one (nginx clears fails when accessed < checked, RR.c 657-659).
func TestContract_abandoned(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a, b := NewPeer("a"), NewPeer("b")
		p, err := pc.new([]*Peer{a, b}, optsFor(pc, clk)...)
		require.NoError(t, err)
		for range 5 {
			q := mustPick(t, p, nil)
			require.NoError(t, p.Done(q, Outcome{Abandoned: true, Latency: time.Second}))
			assert.Zero(t, q.State().Fails, "abandoned on %s", q)
		}
		_, ok := p.NextEligible()
		assert.False(t, ok, "max_fails 1 and nothing out")

		// Failed and Abandoned together: rejected, nothing changes.
		q := mustPick(t, p, nil)
		err = p.Done(q, Outcome{Failed: true, Abandoned: true})
		assert.ErrorIs(t, err, ErrInvalidOutcome)
		assert.ErrorContains(t, err, q.Addr())
		assert.Equal(t, 1, q.InFlight())
		assert.Zero(t, q.State().Fails)
		require.NoError(t, p.Done(q, Outcome{}))

		// a fails and is out; its probe after the window is abandoned:
		// the failure count clears and a is back.
		failOnly(t, p, a)
		clk.add(10*time.Second + 1)
		require.NoError(t, p.SetDown(b, true))
		q = mustPick(t, p, nil)
		require.Same(t, a, q)
		require.NoError(t, p.Done(q, Outcome{Abandoned: true, Latency: time.Millisecond}))
		assert.Zero(t, a.State().Fails)
		_, ok = p.NextEligible()
		assert.False(t, ok)
		require.NoError(t, p.Done(mustPick(t, p, nil), Outcome{}))
	})
}

// TestContract_addRestartsLatency: Remove then Add forgets a peer's latency
// statistics; Update with the same address keeps them. FastestFirst shows
// it in the derived weight: a peer measured 100x slower than the others
// sits at the floor, 1, and an unmeasured one counts as fast as the
// fastest, 100.
func TestContract_addRestartsLatency(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		if !pc.alg.Latency {
			t.Skip("keeps no latency statistics")
		}
		clk := newFakeClock()
		peers := []*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0)), NewPeer("c", MaxFails(0))}
		p, err := pc.new(peers, optsFor(pc, clk)...)
		require.NoError(t, err)
		var slow *Peer
		for range 60 {
			q := mustPick(t, p, nil)
			if slow == nil {
				slow = q
			}
			lat := time.Millisecond
			if q == slow {
				lat = 100 * time.Millisecond
			}
			clk.add(time.Millisecond)
			require.NoError(t, p.Done(q, Outcome{Latency: lat}))
		}
		require.True(t, latOf(slow).measured.Load())
		kept := latencyState(slow)
		if pc.name == "FastestFirst" {
			require.Equal(t, 1, slow.State().DerivedWeight)
		}

		require.NoError(t, p.Update([]*Peer{NewPeer("a", MaxFails(0)), NewPeer("b", MaxFails(0)), NewPeer("c", MaxFails(0))}))
		assert.Equal(t, kept, latencyState(slow), "Update keeps them")
		if pc.name == "FastestFirst" {
			assert.Equal(t, 1, slow.State().DerivedWeight)
		}

		require.NoError(t, p.Remove(slow))
		require.NoError(t, p.Add(slow))
		assert.False(t, latOf(slow).measured.Load(), "Add restarts them")
		if pc.name == "FastestFirst" {
			assert.Equal(t, fastestScale, slow.State().DerivedWeight)
		}
	})
}

// TestContract_stateWhileRemoved reads a peer's state while another
// goroutine removes it and adds it back: State must neither panic (it once
// indexed the new list with the removed peer's old index) nor read under a
// former owner's lock.
func TestContract_stateWhileRemoved(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := weighted(1, 1, 1)
		p, err := pc.new(peers)
		require.NoError(t, err)
		last := peers[2]
		var stop atomic.Bool
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				_ = toSet(p).Remove(last)
				_ = toSet(p).Add(last)
			}
		}()
		for range 5000 {
			assert.Equal(t, 1, last.State().Weight)
		}
		stop.Store(true)
		wg.Wait()
	})
}

// TestContract_backupRequestOnAnotherList carries a Request that has moved
// to the backups of one picker to a picker whose list has no backups: the
// retry must pick among its primaries, with nothing left in flight after
// the report.
func TestContract_backupRequestOnAnotherList(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a := NewPeer("a", MaxConns(1))
		b := NewPeer("b", Backup())
		s, err := NewSmoothWRR([]*Peer{a, b})
		require.NoError(t, err)
		require.Same(t, a, mustPick(t, s, nil)) // a is now full
		var r Request
		r.SetKey("k")
		require.Same(t, b, mustPick(t, s, &r), "the request moves to the backups")
		require.NoError(t, s.Done(b, Outcome{Failed: true}))

		peers := weighted(1, 1, 1)
		p, err := pc.new(peers)
		require.NoError(t, err)
		got := mustPick(t, p, &r)
		assert.Contains(t, peers, got)
		require.NoError(t, p.Done(got, Outcome{}))
		for _, q := range peers {
			assert.Zero(t, q.InFlight(), "%s", q)
		}
	})
}

// TestContract_doneOnAnotherPicker reports an attempt to a picker that
// never held its peer, after the picker that did removed it: the report is
// refused with ErrUnknownPeer and changes nothing, neither the peer (its
// in-flight count, its failures) nor the picker it was sent to, and the
// picker that removed the peer still takes the report, for every pair of
// picker types.
func TestContract_doneOnAnotherPicker(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, other := range pickerCases {
			t.Run(other.name, func(t *testing.T) {
				peers := weighted(1, 1)
				a, err := pc.new(peers)
				require.NoError(t, err)
				bPeers := []*Peer{NewPeer("x", MaxFails(1)), NewPeer("y", MaxFails(1))}
				b, err := other.new(bPeers)
				require.NoError(t, err)
				held := mustPick(t, b, nil) // b's own attempt, still in flight

				p := mustPick(t, a, nil)
				require.NoError(t, toSet(a).Remove(p))
				before := p.Stats()
				err = b.Done(p, Outcome{Failed: true, Latency: time.Millisecond})
				assert.ErrorIs(t, err, ErrUnknownPeer, "b never held %s", p)
				assert.ErrorContains(t, err, fmt.Sprintf("%q", p.Addr()))
				assert.Equal(t, before, p.Stats(), "the refused report changed the peer")
				assert.Equal(t, 1, p.InFlight())
				for _, q := range bPeers {
					assert.Zero(t, q.State().Fails, "b's peer %s", q)
				}

				// The picker that held p still ends its attempt, and only
				// once.
				require.NoError(t, a.Done(p, Outcome{Failed: true}), "the removing picker's report")
				assert.Zero(t, p.InFlight())
				assert.ErrorIs(t, a.Done(p, Outcome{}), ErrUnknownPeer, "reported twice")
				assert.ErrorIs(t, b.Done(p, Outcome{}), ErrUnknownPeer)

				// b is untouched: its own attempt ends, and it picks on.
				require.NoError(t, b.Done(held, Outcome{}))
				require.NoError(t, b.Done(mustPick(t, b, nil), Outcome{}))
				for _, q := range bPeers {
					assert.Zero(t, q.InFlight(), "b's peer %s", q)
				}

				// Once p joins b, reports of b's own attempts on it count;
				// the old picker's are refused.
				require.NoError(t, toSet(b).Add(p))
				require.NoError(t, toSet(a).Add(NewPeer("z")))
				assert.ErrorIs(t, a.Done(p, Outcome{}), ErrUnknownPeer)
			})
		}
	})
}

// TestContract_sharedAddress: two peers with one address are two peers, as
// two nginx `server` lines with one address are two servers, each with its
// own failures; one *Peer given twice is refused with ErrDuplicatePeer.
func TestContract_sharedAddress(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		x1, x2 := NewPeer("x"), NewPeer("x")
		p, err := pc.new([]*Peer{x1, x2}, optsFor(pc, clk)...)
		require.NoError(t, err, "nginx accepts two servers with one address")
		assert.Equal(t, []*Peer{x1, x2}, p.Peers())

		// One failure (max_fails 1) takes the peer picked out for 10s;
		// every pick then goes to the other peer of the address.
		failed := mustPick(t, p, nil)
		require.NoError(t, p.Done(failed, Outcome{Failed: true, Latency: time.Millisecond}))
		other := x1
		if failed == x1 {
			other = x2
		}
		assert.Equal(t, 1, failed.State().Fails)
		for range 5 {
			got := mustPick(t, p, nil)
			assert.Same(t, other, got, "the failed peer is out, its twin is not")
			require.NoError(t, p.Done(got, Outcome{Latency: time.Millisecond}))
		}
		assert.Zero(t, other.State().Fails)

		// A third peer of the address joins; one *Peer twice does not.
		x3 := NewPeer("x")
		require.NoError(t, toSet(p).Add(x3))
		assert.Equal(t, []*Peer{x1, x2, x3}, p.Peers())
		y := NewPeer("y")
		err = toSet(p).Add(y, y)
		assert.ErrorIs(t, err, ErrDuplicatePeer)
		assert.ErrorContains(t, err, `"y"`)
		assert.ErrorIs(t, toSet(p).Add(x1), ErrPeerInUse)
		z := NewPeer("z")
		_, err = pc.new([]*Peer{z, NewPeer("w"), z})
		assert.ErrorIs(t, err, ErrDuplicatePeer)
		assert.ErrorContains(t, err, `"z"`)
		assert.Equal(t, []*Peer{x1, x2, x3}, p.Peers(), "a refused Add changes nothing")
		_, err = NewLeastConn([]*Peer{y, z})
		assert.NoError(t, err, "the refused peers were left free")
	})
}

// TestContract_updateRepeatedAddress: Update matches the k-th snapshot
// peer with an address to the k-th peer the picker holds with that
// address, in list order; a held peer given back is kept as itself, and
// the other snapshot peers of its address match the remaining held ones.
func TestContract_updateRepeatedAddress(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a1, b, a2 := NewPeer("a", MaxFails(3)), NewPeer("b", MaxFails(3)), NewPeer("a", MaxFails(3))
		p, err := pc.new([]*Peer{a1, b, a2}, optsFor(pc, clk)...)
		require.NoError(t, err)
		failOnly(t, p, a1) // a1: one failure; a2: none
		require.Equal(t, 1, a1.State().Fails)

		c := NewPeer("c")
		require.NoError(t, p.Update([]*Peer{NewPeer("a", Weight(2), Value(1)), c, NewPeer("a", Weight(3), Value(2))}))
		assert.Equal(t, []*Peer{a1, c, a2}, p.Peers(), "the first a to the first, the second to the second")
		assert.Equal(t, 2, a1.Weight())
		assert.Equal(t, 1, a1.Value())
		assert.Equal(t, 3, a2.Weight())
		assert.Equal(t, 2, a2.Value())
		assert.Equal(t, 1, a1.State().Fails, "the first a keeps its failure")
		assert.Zero(t, a2.State().Fails)

		// Fewer repeats: the first held a stays, the second goes.
		require.NoError(t, p.Update([]*Peer{NewPeer("a", Value(3)), NewPeer("c")}))
		assert.Equal(t, []*Peer{a1, c}, p.Peers())
		assert.Equal(t, 3, a1.Value())
		assert.Equal(t, 1, a1.State().Fails)
		_, err = NewLeastConn([]*Peer{a2})
		assert.NoError(t, err, "the dropped a is free")

		// More repeats: a new peer for the extra one.
		a3 := NewPeer("a")
		require.NoError(t, p.Update([]*Peer{NewPeer("a"), a3, NewPeer("c")}))
		assert.Equal(t, []*Peer{a1, a3, c}, p.Peers())

		// Held peers given back keep themselves, whatever their order; a
		// new peer of the address matches the held one not given back.
		require.NoError(t, p.Update([]*Peer{a3, NewPeer("a", Value(4)), c}))
		assert.Equal(t, []*Peer{a3, a1, c}, p.Peers())
		assert.Equal(t, 4, a1.Value())
		assert.Equal(t, 1, a1.State().Fails)
		a4 := NewPeer("a")
		require.NoError(t, p.Update([]*Peer{NewPeer("a"), a1, a4}))
		assert.Equal(t, []*Peer{a3, a1, a4}, p.Peers(), "a3 matched the new peer; a4 is new")

		// One peer twice is refused, and changes nothing.
		err = p.Update([]*Peer{a1, c, a1})
		assert.ErrorIs(t, err, ErrDuplicatePeer)
		assert.ErrorContains(t, err, `"a"`)
		fresh := NewPeer("fresh")
		assert.ErrorIs(t, p.Update([]*Peer{fresh, fresh}), ErrDuplicatePeer)
		assert.Equal(t, []*Peer{a3, a1, a4}, p.Peers())
		_, err = NewLeastConn([]*Peer{fresh})
		assert.NoError(t, err, "the refused peer was left free")
	})
}

// TestContract_concurrentRepeatedAddress picks and reports from several
// goroutines while another hands Update snapshots of fresh peers in which
// an address repeats one, two or three times: every report is accepted (a
// peer dropped while in flight is never held again, so its reports go to
// the picker that dropped it), and nothing is left in flight. Run it under
// -race.
func TestContract_concurrentRepeatedAddress(t *testing.T) {
	snapshots := [][]string{{"a", "a", "b"}, {"a", "b"}, {"b", "a", "a", "a"}, {"a", "a"}}
	fresh := func(addrs []string) []*Peer {
		ps := make([]*Peer, len(addrs))
		for i, a := range addrs {
			ps[i] = NewPeer(a, MaxFails(0)) // no peer goes out: no ErrNoLivePeer
		}
		return ps
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		p, err := pc.new(fresh(snapshots[0]))
		require.NoError(t, err)
		var mu sync.Mutex
		var errs []error
		picked := map[*Peer]bool{}
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(g), 2))
				var r Request
				for range 1000 {
					r.Reset()
					peer, err := p.Pick(&r)
					if err == nil {
						err = p.Done(peer, Outcome{Failed: rng.IntN(10) == 0, Latency: time.Duration(rng.IntN(1000)) * time.Microsecond})
					}
					mu.Lock()
					if err != nil {
						errs = append(errs, err)
					} else {
						picked[peer] = true
					}
					mu.Unlock()
				}
			})
		}
		stop := make(chan struct{})
		var updates sync.WaitGroup
		updates.Go(func() {
			for i := 1; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := p.Update(fresh(snapshots[i%len(snapshots)])); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
		wg.Wait()
		close(stop)
		updates.Wait()
		assert.Empty(t, errs)
		for q := range picked {
			assert.Zero(t, q.InFlight(), "peer %s", q)
		}
	})
}

// TestContract_declaredInBalancerGo checks the layout the design card
// names: balancer.go declares the package's contract, the Picker, Updater
// and Balancer interfaces, Outcome and the pickers' errors.
func TestContract_declaredInBalancerGo(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "balancer.go", nil, 0)
	require.NoError(t, err)
	var names []string
	for _, d := range f.Decls {
		if gd, ok := d.(*ast.GenDecl); ok {
			for _, s := range gd.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					names = append(names, s.Name.Name)
				case *ast.ValueSpec:
					for _, n := range s.Names {
						names = append(names, n.Name)
					}
				}
			}
		}
	}
	for _, want := range []string{"Picker", "Updater", "Balancer", "Outcome", "ErrNoPeers", "ErrNoLivePeer",
		"ErrTriesExhausted", "ErrInvalidConfig", "ErrDuplicatePeer", "ErrPeerInUse", "ErrUnknownPeer",
		"ErrNotInFlight", "ErrInvalidLatency", "ErrInvalidOutcome"} {
		assert.Contains(t, names, want)
	}
}
