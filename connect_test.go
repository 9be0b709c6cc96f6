package balancer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The expected placements below are derived from nginx 1.22.1's stream
// module, not from the library: ngx_stream_proxy_init_upstream calls the
// balancer's notify with NGX_STREAM_UPSTREAM_NOTIFY_CONNECT once a TCP
// connection to the peer is established, and
// ngx_stream_upstream_notify_round_robin_peer then does
//
//	if (peer->accessed < peer->checked) { peer->fails = 0; }
//
// touching nothing else (not conns, not effective_weight, not the times);
// the session's end calls free as before, with state 0 for TCP. get_peer
// skips a peer with fails >= max_fails while now - checked <= fail_timeout,
// and selecting a peer past its window sets checked = now (the probe). So a
// probe whose connection is established readmits the peer before the probe
// ends, and the sessions that follow may go to it.

// connectedSetup is one arrangement of a failed peer a (max_fails=1,
// fail_timeout=10s) and a second peer b that takes the sessions while a is
// out.
type connectedSetup struct {
	name string
	// b builds the second peer; skip reports whether the picker cannot
	// have it (a backup for a picker that refuses backups).
	b    func(pc pickerCase) *Peer
	skip func(pc pickerCase) bool
	// hold is how many sessions b is given before the probe (kept open).
	hold int
	// without is what the 30 sessions after the probe get when the
	// connection is not reported: b, or ErrNoLivePeer (b is full).
	withoutPeer bool
}

var connectedSetups = []connectedSetup{
	{
		// The arrangement: a backup takes everything while a is
		// out, and without a connect report 29 of the 30 sessions after
		// the probe stay on it.
		name:        "backup",
		b:           func(pc pickerCase) *Peer { return NewPeer("b", Backup()) },
		skip:        func(pc pickerCase) bool { return pc.alg.NoBackups },
		hold:        3,
		withoutPeer: true,
	},
	{
		// Every picker: b is a primary with max_conns=1 and one session
		// open, so a is the only peer that can take more.
		name:        "full primary",
		b:           func(pc pickerCase) *Peer { return NewPeer("b", MaxConns(1)) },
		skip:        func(pickerCase) bool { return false },
		hold:        1,
		withoutPeer: false,
	},
}

// pickAlone picks a while the other peers are down for the pick (SetDown, as
// an nginx reload would mark them, which keeps every failure on record), so
// that every picker must take a, and returns with a's attempt in flight.
func pickAlone(t *testing.T, p Balancer, a *Peer, others ...*Peer) {
	t.Helper()
	for _, q := range others {
		require.NoError(t, p.SetDown(q, true))
	}
	_, addr := pickAddr(t, p)
	require.Equal(t, a.Addr(), addr)
	for _, q := range others {
		require.NoError(t, p.SetDown(q, false))
	}
}

// failOnce picks a (see pickAlone) and reports the attempt failed.
func failOnce(t *testing.T, p Balancer, a *Peer, others ...*Peer) {
	t.Helper()
	pickAlone(t, p, a, others...)
	require.NoError(t, p.Done(a, Outcome{Failed: true}))
}

// pickAddr picks for a fresh request and returns the peer's address.
func pickAddr(t *testing.T, p Picker) (*Peer, string) {
	t.Helper()
	peer := mustPick(t, p, nil)
	return peer, peer.Addr()
}

func TestConnected_readmitsForLongLivedSessions(t *testing.T) {
	const sessions = 30
	for _, setup := range connectedSetups {
		t.Run(setup.name, func(t *testing.T) {
			forEachPicker(t, func(t *testing.T, pc pickerCase) {
				if setup.skip(pc) {
					t.Skip("picker refuses backup peers")
				}
				for _, report := range []bool{true, false} {
					clk := newFakeClock()
					a := NewPeer("a", MaxFails(1), FailTimeout(10*time.Second))
					b := setup.b(pc)
					p, err := pc.new([]*Peer{a, b}, clk.opt())
					require.NoError(t, err)
					c, ok := p.(Connector)
					require.True(t, ok, "%s is not a Connector", pc.name)

					failOnce(t, p, a, b) // a is out for 10s
					var open []*Peer
					for range setup.hold {
						peer, addr := pickAddr(t, p)
						require.Equal(t, "b", addr, "a is inside its fail window")
						open = append(open, peer)
					}

					clk.add(11 * time.Second)
					probe, addr := pickAddr(t, p)
					require.Equal(t, "a", addr, "past its window a is probed")
					open = append(open, probe)
					if report {
						require.NoError(t, c.Connected(a))
						st := a.State()
						assert.Zero(t, st.Fails, "an established connection to the probe clears a's failures")
						assert.Equal(t, 1, st.InFlight, "the probe stays in flight until Done")
					}

					onA, onB, noLive := 0, 0, 0
					for range sessions {
						peer, err := p.Pick(nil)
						switch {
						case errors.Is(err, ErrNoLivePeer):
							noLive++
							continue
						case err != nil:
							t.Fatalf("pick: %v", err)
						case peer == a:
							onA++
							if report {
								require.NoError(t, c.Connected(a))
							}
						case peer == b:
							onB++
						}
						open = append(open, peer)
					}
					if report {
						// nginx's stream module: every session after the
						// established probe goes to a.
						assert.Equal(t, sessions, onA, "with Connected")
					} else {
						// No connect report, as nginx's http module has
						// none: a stays inside the window its probe
						// opened until the probe ends.
						assert.Zero(t, onA, "without Connected")
						if setup.withoutPeer {
							assert.Equal(t, sessions, onB, "without Connected")
						} else {
							assert.Equal(t, sessions, noLive, "without Connected")
						}
					}
					// Every session ends with a successful Done; nothing is
					// left in flight and a has no failures.
					for _, peer := range open {
						require.NoError(t, p.Done(peer, Outcome{}))
					}
					assert.Zero(t, a.InFlight()+b.InFlight())
					assert.Zero(t, a.State().Fails)
				}
			})
		})
	}
}

// TestConnected_onlyAfterAProbe checks nginx's condition accessed < checked:
// a connection established inside the fail window (no probe since the last
// failure) clears nothing, so the next failure takes the peer out; past the
// window the selection is a check (checked = now) and the connection clears
// the failures even below max_fails.
func TestConnected_onlyAfterAProbe(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a", MaxFails(2), FailTimeout(10*time.Second))
		b := NewPeer("b")
		p, err := pc.new([]*Peer{a, b}, clk.opt())
		require.NoError(t, err)
		c := p.(Connector)

		failOnce(t, p, a, b) // fails 1 of 2: a stays eligible
		clk.add(time.Second)
		pickAlone(t, p, a, b) // inside the window: no probe
		before := a.State()
		require.NoError(t, c.Connected(a))
		assert.Equal(t, before, a.State(), "inside the window Connected changes nothing")
		require.NoError(t, p.Done(a, Outcome{}))
		assert.Equal(t, 1, a.State().Fails, "nor does the success")

		failOnce(t, p, a, b) // the second failure within the window: out
		for range 10 {
			peer, addr := pickAddr(t, p)
			require.Equal(t, "b", addr, "a is out after max_fails")
			require.NoError(t, p.Done(peer, Outcome{}))
		}

		clk.add(11 * time.Second)
		pickAlone(t, p, a, b) // the probe
		require.NoError(t, c.Connected(a))
		assert.Zero(t, a.State().Fails, "past the window the connection readmits a")
		assert.Equal(t, 1, a.InFlight())
		require.NoError(t, p.Done(a, Outcome{}))
	})
}

// TestConnected_errors: Connected refuses what Done refuses about the peer,
// and a refused report changes nothing.
func TestConnected_errors(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		type setup struct {
			p, other Balancer
			a, b, x  *Peer // a, b in p; x in other
			clk      *fakeClock
		}
		build := func(t *testing.T) *setup {
			s := &setup{clk: newFakeClock()}
			s.a = NewPeer("a", MaxFails(1), FailTimeout(10*time.Second))
			s.b = NewPeer("b")
			s.x = NewPeer("x")
			var err error
			s.p, err = pc.new([]*Peer{s.a, s.b}, s.clk.opt())
			require.NoError(t, err)
			s.other, err = pc.new([]*Peer{s.x}, s.clk.opt())
			require.NoError(t, err)
			return s
		}
		tests := []struct {
			name string
			// arrange returns the peer to report and the picker to
			// report it to.
			arrange func(t *testing.T, s *setup) (Balancer, *Peer)
			want    error
		}{
			{"nil peer", func(t *testing.T, s *setup) (Balancer, *Peer) { return s.p, nil }, ErrUnknownPeer},
			{"never added", func(t *testing.T, s *setup) (Balancer, *Peer) { return s.p, NewPeer("a") }, ErrUnknownPeer},
			{"another picker's peer in flight", func(t *testing.T, s *setup) (Balancer, *Peer) {
				mustPick(t, s.other, nil)
				return s.p, s.x
			}, ErrUnknownPeer},
			{"removed while in flight, after a probe", func(t *testing.T, s *setup) (Balancer, *Peer) {
				failOnce(t, s.p, s.a, s.b)
				s.clk.add(11 * time.Second)
				pickAlone(t, s.p, s.a, s.b)
				require.NoError(t, s.p.Remove(s.a))
				return s.p, s.a
			}, ErrUnknownPeer},
			{"nothing in flight", func(t *testing.T, s *setup) (Balancer, *Peer) { return s.p, s.a }, ErrNotInFlight},
			{"after Done, with failures on record", func(t *testing.T, s *setup) (Balancer, *Peer) {
				failOnce(t, s.p, s.a, s.b)
				return s.p, s.a
			}, ErrNotInFlight},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := build(t)
				to, peer := tt.arrange(t, s)
				states := map[*Peer]PeerState{}
				for _, q := range []*Peer{s.a, s.b, s.x} {
					states[q] = q.State()
				}
				err := to.(Connector).Connected(peer)
				require.ErrorIs(t, err, tt.want)
				if peer != nil {
					assert.Contains(t, err.Error(), peer.Addr(), "the error names the peer")
				}
				for q, st := range states {
					assert.Equal(t, st, q.State(), "peer %s unchanged", q.Addr())
				}
			})
		}
	})
}

// TestConnected_reportsReadmission: a connect report that clears the
// failures of a peer that was out is EventPeerReadmitted, on the picker's
// clock; one inside the window reports nothing.
func TestConnected_reportsReadmission(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		var events []Event
		a := NewPeer("a", MaxFails(1), FailTimeout(10*time.Second))
		b := NewPeer("b")
		p, err := pc.new([]*Peer{a, b}, clk.opt(), WithEvents(func(e Event) {
			if e.Peer == a {
				events = append(events, e)
			}
		}))
		require.NoError(t, err)
		failOnce(t, p, a, b)
		clk.add(11 * time.Second)
		pickAlone(t, p, a, b)
		require.Equal(t, []EventKind{EventPeerOut, EventPeerProbe}, kinds(events))
		require.NoError(t, p.(Connector).Connected(a))
		require.Equal(t, []EventKind{EventPeerOut, EventPeerProbe, EventPeerReadmitted}, kinds(events))
		assert.Equal(t, clk.now(), events[2].Time)
		require.NoError(t, p.Done(a, Outcome{}))
		assert.Len(t, events, 3, "the probe's end readmits nothing more")
	})
}

func kinds(events []Event) []EventKind {
	out := make([]EventKind, len(events))
	for i, e := range events {
		out[i] = e.Kind
	}
	return out
}

// TestConnected_concurrent runs picks, connect reports and outcomes on many
// goroutines, with failures so that the locked path runs, and checks that
// every attempt is released and every report accepted. Run with -race.
func TestConnected_concurrent(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := []*Peer{
			NewPeer("a", MaxFails(1), FailTimeout(time.Millisecond)),
			NewPeer("b", MaxFails(2), FailTimeout(time.Millisecond)),
			NewPeer("c"),
		}
		p, err := pc.new(peers, clk.opt())
		require.NoError(t, err)
		c := p.(Connector)
		var wg sync.WaitGroup
		var bad atomic.Int64
		for g := range 8 {
			wg.Go(func() {
				for i := range 500 {
					clk.add(100 * time.Microsecond)
					peer, err := p.Pick(nil)
					if err != nil {
						continue // every peer out for a moment
					}
					if err := c.Connected(peer); err != nil {
						bad.Add(1)
					}
					failed := (i+g)%5 == 0 && peer.Addr() != "c"
					if err := p.Done(peer, Outcome{Failed: failed, Latency: time.Millisecond}); err != nil {
						bad.Add(1)
					}
				}
			})
		}
		wg.Wait()
		assert.Zero(t, bad.Load(), "reports refused")
		for _, q := range peers {
			assert.Zero(t, q.InFlight(), q.Addr())
		}
	})
}

// TestConnected_thenDoneAsDoneAlone: Connected only moves the readmission
// earlier. When no pick falls between an attempt's Connected and its
// successful Done, every picker picks and ends in the same state as with
// Done alone: the same picks, weights and failures, and, for the
// latency-aware pickers, the same estimates (FastestFirst restarts a
// readmitted peer's estimate from the reply either way).
func TestConnected_thenDoneAsDoneAlone(t *testing.T) {
	// 40 peers put FastestFirst in its sampled mode.
	for _, n := range []int{4, 40} {
		t.Run(fmt.Sprint(n, " peers"), func(t *testing.T) { connectedAsDoneAlone(t, n) })
	}
}

func connectedAsDoneAlone(t *testing.T, n int) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		run := func(connect bool) ([]string, []PeerState) {
			clk := newFakeClock()
			peers := []*Peer{
				NewPeer("a", Weight(3), MaxFails(1), FailTimeout(time.Second)),
				NewPeer("b", Weight(2), MaxFails(2), FailTimeout(2*time.Second)),
				NewPeer("c", FailTimeout(time.Second)),
				NewPeer("d", Weight(2)),
			}
			for i := len(peers); i < n; i++ {
				peers = append(peers, NewPeer(fmt.Sprint("e", i), Weight(1+i%3)))
			}
			opts := []Option{clk.opt()}
			if pc.alg.Random {
				opts = append(opts, WithRand(rand.NewPCG(1, 2)))
			}
			p, err := pc.new(peers, opts...)
			require.NoError(t, err)
			var trace []string
			var r Request
			for i := range 600 {
				r.Reset()
				r.SetKey(fmt.Sprint("k", i%7))
				r.SetClientAddr(netip.AddrFrom4([4]byte{10, 0, byte(i % 5), 1}))
				for {
					peer, err := p.Pick(&r)
					if err != nil {
						trace = append(trace, err.Error())
						break
					}
					trace = append(trace, peer.Addr())
					// a refuses during [100, 300), b during [200, 250);
					// the latencies differ by peer.
					down := peer.Addr() == "a" && i >= 100 && i < 300 ||
						peer.Addr() == "b" && i >= 200 && i < 250
					lat := time.Duration(1+int(peer.Addr()[0]-'a')*3) * time.Millisecond
					clk.add(lat)
					if down {
						require.NoError(t, p.Done(peer, Outcome{Failed: true, Latency: lat}))
						continue
					}
					if connect {
						require.NoError(t, p.(Connector).Connected(peer))
					}
					require.NoError(t, p.Done(peer, Outcome{Latency: lat}))
					break
				}
				clk.add(20 * time.Millisecond)
			}
			states := make([]PeerState, len(peers))
			for i, q := range peers {
				states[i] = q.State()
			}
			return trace, states
		}
		alone, aloneStates := run(false)
		with, withStates := run(true)
		require.Equal(t, alone, with, "picks")
		assert.Equal(t, aloneStates, withStates, "states")
	})
}

// TestConnected_allocs: reporting a connection allocates nothing, on a
// healthy peer (no lock) or on one with failures on record (the lock and
// nginx's test).
func TestConnected_allocs(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range []int{2, 64} {
			peers := makePeers(n, numbered, func(i int) []PeerOption { return []PeerOption{Weight(i%10 + 1), MaxFails(0)} })
			p, err := pc.new(peers)
			require.NoError(t, err)
			c := p.(Connector)
			var r Request
			allocs := testing.AllocsPerRun(1000, func() {
				r.Reset()
				peer, _ := p.Pick(&r)
				_ = p.Done(peer, Outcome{Failed: true, Latency: time.Millisecond})
				peer, _ = p.Pick(&r)
				_ = c.Connected(peer)
				_ = p.Done(peer, Outcome{Latency: time.Millisecond})
			})
			assert.Zero(t, allocs, "a retried session with %d peers", n)
		}
	})
}

// ngxNotify is ngx_stream_upstream_notify_round_robin_peer of nginx 1.22.1
// on NGX_STREAM_UPSTREAM_NOTIFY_CONNECT, on the literal model of
// nginx_model_test.go.
func ngxNotify(p *ngxPeer) {
	if p.accessed < p.checked {
		p.fails = 0
	}
}

// streamDriver is what TestConnected_matchesStreamModel needs of a model:
// ngxModel's or lcModel's selection and accounting.
type streamDriver struct {
	model *ngxModel
	pick  func(now int64) *ngxPeer
	end   func(p *ngxPeer, failed bool, now int64)
}

// TestConnected_matchesStreamModel drives SmoothWRR (short lists and lists
// long enough for its grouped scan) and LeastConn beside the literal nginx
// models with long-lived sessions as nginx's stream module runs them: a
// session's attempts fail while their server refuses connections (free
// with NGX_PEER_FAILED, then the next peer), the established one is
// notified (Connected) and stays in flight until the session ends at a
// random later step (free, a success); servers start and stop refusing,
// the clock moves. Every pick and every peer's failures and weights must
// agree.
func TestConnected_matchesStreamModel(t *testing.T) {
	tests := []struct {
		name  string
		seeds uint64
		build func(rng *rand.Rand, clk *fakeClock) (Picker, *streamDriver, map[string]*Peer)
	}{
		{"SmoothWRR", 150, func(rng *rand.Rand, clk *fakeClock) (Picker, *streamDriver, map[string]*Peer) {
			m := &ngxModel{}
			peers, byAddr := randomCluster(rng, m, func() int { return 1 + rng.IntN(6) })
			s, err := NewSmoothWRR(peers, clk.opt())
			require.NoError(t, err)
			return s, &streamDriver{m, m.pick, m.free}, byAddr
		}},
		{"SmoothWRR grouped", 20, func(rng *rand.Rand, clk *fakeClock) (Picker, *streamDriver, map[string]*Peer) {
			m := &ngxModel{}
			peers, byAddr := clusterOf(rng, m, groupedScanMin+rng.IntN(40), 40, 50, func() int { return 1 + rng.IntN(3) })
			s, err := NewSmoothWRR(peers, clk.opt())
			require.NoError(t, err)
			return s, &streamDriver{m, m.pick, m.free}, byAddr
		}},
		{"LeastConn", 150, func(rng *rand.Rand, clk *fakeClock) (Picker, *streamDriver, map[string]*Peer) {
			m := &lcModel{conns: map[*ngxPeer]int64{}}
			peers, byAddr := randomCluster(rng, &m.ngxModel, func() int { return 1 + rng.IntN(4) })
			b, err := NewLeastConn(peers, clk.opt())
			require.NoError(t, err)
			return b, &streamDriver{&m.ngxModel, m.pick, m.done}, byAddr
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for seed := range tt.seeds {
				rng := rand.New(rand.NewPCG(seed, 17))
				clk := newFakeClock()
				p, d, byAddr := tt.build(rng, clk)
				if len(d.model.primary) == 0 {
					continue // nginx refuses a block without a primary
				}
				refusing := map[*ngxPeer]bool{}
				for _, m := range d.model.all() {
					refusing[m] = rng.IntN(4) == 0
				}
				type session struct {
					peer  *Peer
					model *ngxPeer
				}
				var open []session
				for step := range 300 {
					now := clk.now().UnixNano()
					switch k := rng.IntN(20); {
					case k < 2:
						clk.add(time.Duration(rng.IntN(4)) * time.Second)
					case k < 3:
						all := d.model.all()
						m := all[rng.IntN(len(all))]
						refusing[m] = !refusing[m]
					case k < 9 && len(open) > 0:
						i := rng.IntN(len(open))
						s := open[i]
						open = append(open[:i], open[i+1:]...)
						d.end(s.model, false, now)
						require.NoError(t, p.Done(s.peer, Outcome{}))
					default:
						var r Request
						d.model.begin()
						for {
							want := d.pick(now)
							got := pickAsModel(t, p, &r, want, d.model.exhausted(), step)
							if got == nil {
								break
							}
							if refusing[want] {
								d.end(want, true, now)
								require.NoError(t, p.Done(got, Outcome{Failed: true}))
								continue
							}
							ngxNotify(want)
							require.NoError(t, p.(Connector).Connected(got))
							open = append(open, session{got, want})
							break
						}
					}
					for _, m := range d.model.all() {
						st := byAddr[m.addr].State()
						require.Equal(t, m.fails, int64(st.Fails), "seed %d step %d peer %s fails", seed, step, m.addr)
						require.Equal(t, m.ew, int64(st.EffectiveWeight), "seed %d step %d peer %s ew", seed, step, m.addr)
						if !d.model.single {
							require.Equal(t, m.cw, int64(st.CurrentWeight), "seed %d step %d peer %s cw", seed, step, m.addr)
						}
					}
				}
			}
		})
	}
}
