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
		{"duplicate", func() []*Peer { return []*Peer{NewPeer("a"), NewPeer("a")} }, ErrDuplicatePeer},
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
		_, err = pc.new([]*Peer{NewPeer("x:1"), NewPeer("x:1")})
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
				peers := make([]*Peer, n)
				for i := range peers {
					peers[i] = NewPeer(fmt.Sprint("p", i), MaxFails(0), Weight(1+i%3))
				}
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
		assert.ErrorIs(t, set.Add(NewPeer("c")), ErrDuplicatePeer)
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
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range []int{2, 10, 64, 1000} {
			peers := make([]*Peer, n)
			for i := range peers {
				// MaxFails(0): failures are accounted but never take a
				// peer out, so every call below finds a peer.
				peers[i] = NewPeer(fmt.Sprint("p", i), Weight(i%10+1), MaxFails(0))
			}
			p, err := pc.new(peers)
			require.NoError(t, err)
			allocs := testing.AllocsPerRun(1000, func() {
				peer, _ := p.Pick(nil)
				_ = p.Done(peer, Outcome{Latency: time.Millisecond})
			})
			assert.Zero(t, allocs, "Pick+Done with %d peers", n)

			// A request with retries, the failure accounting and the
			// exact scan included.
			var r Request
			allocs = testing.AllocsPerRun(1000, func() {
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
		p, err := pc.new([]*Peer{a, NewPeer("b"), NewPeer("bk", Backup(), Down())}, WithClock(clk.now))
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
