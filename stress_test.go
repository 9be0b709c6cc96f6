package balancer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// stressTally counts, per peer, the attempts Pick handed out and the
// reports Done accepted. Its maps are filled before the goroutines start
// and only read afterwards; the counters are atomic.
type stressTally struct {
	picks, reports map[*Peer]*atomic.Int64
}

func newStressTally(peers []*Peer) *stressTally {
	t := &stressTally{picks: map[*Peer]*atomic.Int64{}, reports: map[*Peer]*atomic.Int64{}}
	for _, p := range peers {
		t.picks[p], t.reports[p] = new(atomic.Int64), new(atomic.Int64)
	}
	return t
}

// stressErrs collects what goroutines saw go wrong; assert is not used from
// the goroutines so that a failure reads as one list.
type stressErrs struct {
	mu   sync.Mutex
	errs []string
}

func (e *stressErrs) add(format string, args ...any) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.errs) < 20 {
		e.errs = append(e.errs, fmt.Sprintf(format, args...))
	}
}

// TestStress_totals runs, for every picker, goroutines that pick and report
// (holding several attempts in flight and reporting them out of order,
// retrying failed requests on the next peer) while other goroutines add and
// remove peers, change weights, mark peers down and up, and advance the
// clock past fail windows. Afterwards the books must balance exactly: for
// every peer, the attempts Pick handed out equal the reports Done accepted
// (each of which must be accepted, removed peers included), nothing is in
// flight, no count went negative, and the last update of each kind is the
// one that stuck. During the run, a peer marked down at construction and
// never brought up is never picked and no peer exceeds its max_conns.
// Run it under -race; it takes about a second per picker there.
func TestStress_totals(t *testing.T) {
	const workers, requests = 4, 1500
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClockAt(time.Unix(1_700_000_000, 0))
		fixed := []*Peer{
			NewPeer("a", Weight(5)),
			NewPeer("b", Weight(2), MaxFails(2), FailTimeout(time.Second)),
			NewPeer("c", Weight(3), MaxConns(2)),
			NewPeer("d", Weight(1), MaxFails(0)),
			NewPeer("off", Weight(4), Down()),
			backupOf(pc, "bk", Weight(1)),
		}
		extras := []*Peer{NewPeer("x1", Weight(2)), NewPeer("x2"), backupOf(pc, "xb")}
		tally := newStressTally(append(slices.Clone(fixed), extras...))
		opts := []Option{clk.opt()}
		if _, err := pc.new(nil, WithRand(rand.NewPCG(1, 2))); err == nil {
			opts = append(opts, WithRand(rand.NewPCG(3, 4)))
		}
		p, err := pc.new(fixed, opts...)
		require.NoError(t, err)
		set := toSet(p)
		var errs stressErrs
		var pickCalls atomic.Int64

		var work sync.WaitGroup
		for g := range workers {
			work.Add(1)
			go func() {
				defer work.Done()
				stressWorker(p, tally, &errs, &pickCalls, clk, rand.New(rand.NewPCG(uint64(g), 7)), requests)
			}()
		}

		stop := make(chan struct{})
		var upd sync.WaitGroup
		final := stressUpdaters(set, fixed, extras, &errs, stop, &upd)
		work.Wait()
		close(stop)
		upd.Wait()

		assert.Empty(t, errs.errs)
		var picks, reports int64
		for _, q := range append(slices.Clone(fixed), extras...) {
			pk, rp := tally.picks[q].Load(), tally.reports[q].Load()
			assert.Equal(t, pk, rp, "peer %s: picks = reports", q)
			assert.Zero(t, q.InFlight(), "peer %s in flight", q)
			picks += pk
			reports += rp
		}
		assert.Equal(t, pickCalls.Load(), picks, "successful Pick calls = picks counted per peer")
		assert.Positive(t, picks)
		assert.Zero(t, tally.picks[fixed[4]].Load(), "a down peer was picked")

		// No lost update: the picker holds what the updaters last left.
		assert.ElementsMatch(t, stressAddrs(final.held), stressAddrs(set.Peers()))
		assert.Equal(t, final.weightB, fixed[1].Weight())
		assert.Equal(t, final.downD, fixed[3].IsDown())
		for _, q := range set.Peers() {
			st := q.State()
			assert.GreaterOrEqual(t, st.Fails, 0, "peer %s", q)
			assert.GreaterOrEqual(t, st.EffectiveWeight, 0, "peer %s", q)
			assert.LessOrEqual(t, st.EffectiveWeight, st.Weight, "peer %s", q)
		}
		// The picker still works: a fresh request on a quiet picker gets a
		// peer once the fail windows are over.
		clk.add(time.Minute)
		got, err := p.Pick(nil)
		require.NoError(t, err)
		assert.NoError(t, p.Done(got, Outcome{}))
	})
}

// stressWorker runs requests of one caller, moving clk on by 10 ms each. Each request retries, on the
// same Request, after a failed attempt; one attempt in three is held in
// flight across the next requests, up to three at a time, and the held ones
// are reported in random order.
func stressWorker(p Picker, tally *stressTally, errs *stressErrs, pickCalls *atomic.Int64, clk *fakeClock, rng *rand.Rand, requests int) {
	var r Request
	var held []*Peer
	report := func(q *Peer, failed bool) {
		lat := time.Duration(rng.IntN(5000)) * time.Microsecond
		if err := p.Done(q, Outcome{Failed: failed, Latency: lat}); err != nil {
			errs.add("Done(%s) of an attempt in flight = %v", q, err)
			return
		}
		tally.reports[q].Add(1)
	}
	for range requests {
		// Every request moves the virtual clock on: the run spans
		// minutes, so fail windows open, pass and get probed.
		clk.add(10 * time.Millisecond)
		r.Reset()
		for {
			q, err := p.Pick(&r)
			if err != nil {
				if q != nil || !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
					errs.add("Pick = %v, %v", q, err)
				}
				break
			}
			if q == nil {
				errs.add("Pick = nil, nil")
				break
			}
			pickCalls.Add(1)
			c, ok := tally.picks[q]
			if !ok {
				errs.add("Pick = %s, a peer never given to the picker", q)
				break
			}
			c.Add(1)
			if mc := q.MaxConns(); mc != 0 && q.InFlight() > mc {
				errs.add("peer %s: %d in flight, max_conns %d", q, q.InFlight(), mc)
			}
			failed := rng.IntN(8) == 0
			if !failed && len(held) < 3 && rng.IntN(3) == 0 {
				held = append(held, q)
				break
			}
			report(q, failed)
			if !failed {
				break
			}
		}
		if len(held) > 0 && rng.IntN(2) == 0 {
			i := rng.IntN(len(held))
			report(held[i], false)
			held = slices.Delete(held, i, i+1)
		}
	}
	for _, q := range held {
		report(q, false)
	}
}

func stressAddrs(peers []*Peer) []string {
	s := make([]string, len(peers))
	for i, p := range peers {
		s[i] = p.Addr()
	}
	return s
}

// stressFinal is what the updaters left.
type stressFinal struct {
	held    []*Peer
	weightB int
	downD   bool
}

// stressUpdaters starts the goroutines that change the picker until stop
// closes: one adds and removes the extra peers, one changes b's weight and
// d's down flag. Each knows what its changes must
// return, since it is the only one making them. The returned value is
// filled in by the time upd is done.
func stressUpdaters(set updater, fixed, extras []*Peer, errs *stressErrs, stop chan struct{}, upd *sync.WaitGroup) *stressFinal {
	final := &stressFinal{weightB: fixed[1].Weight()}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	upd.Add(2)
	go func() {
		defer upd.Done()
		in := make([]bool, len(extras))
		for i := 0; !stopped(); i++ {
			k := i % len(extras)
			var err error
			if in[k] {
				err = set.Remove(extras[k])
			} else {
				err = set.Add(extras[k])
			}
			if err != nil {
				errs.add("add/remove %s (held %v): %v", extras[k], in[k], err)
				return
			}
			in[k] = !in[k]
			if in[k] {
				if err := set.Add(extras[k]); !errors.Is(err, ErrPeerInUse) {
					errs.add("Add(%s) again = %v, want ErrPeerInUse", extras[k], err)
				}
			}
		}
		final.held = slices.Clone(fixed)
		for k, q := range extras {
			if in[k] {
				final.held = append(final.held, q)
			}
		}
	}()
	go func() {
		defer upd.Done()
		for i := 0; !stopped(); i++ {
			w, down := 1+i%6, i%3 == 0
			if err := set.SetWeight(fixed[1], w); err != nil {
				errs.add("SetWeight(b, %d): %v", w, err)
				return
			}
			if err := set.SetDown(fixed[3], down); err != nil {
				errs.add("SetDown(d, %v): %v", down, err)
				return
			}
			final.weightB, final.downD = w, down
			_ = fixed[0].State()
		}
	}()
	return final
}

// TestStress_roundRobinWrap runs concurrent picks on RoundRobin through the
// places its counter folds: from just below foldAt, where the fast path
// hands over to rrFold, and from just below 2^32, which no fold has caught
// (the fast path's 32-bit reduction would go wrong there). Every pick takes
// the next value of the one counter, so over a multiple of n picks each of
// the n peers gets exactly its share whatever the interleaving, and the
// counter ends folded. (A counter near 2^64 is out of reach: it starts
// below 2^31 and folds there; the sequential test in roundrobin_test.go
// covers it.)
func TestStress_roundRobinWrap(t *testing.T) {
	const goroutines, each = 4, 1500 // 6000 picks: a multiple of 3 and 5
	for _, n := range []int{3, 5} {
		for _, start := range []uint64{foldAt - 100, 1<<32 - 100} {
			t.Run(fmt.Sprintf("n=%d/start=%#x", n, start), func(t *testing.T) {
				ws := make([]int, n)
				for i := range ws {
					ws[i] = 1
				}
				peers := weighted(ws...)
				b, err := NewRoundRobin(peers, newFakeClockAt(time.Unix(1_700_000_000, 0)).opt())
				require.NoError(t, err)
				b.ctr.Store(start)
				tally := newStressTally(peers)
				var errs stressErrs
				var wg sync.WaitGroup
				for range goroutines {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range each {
							p, err := b.Pick(nil)
							if err != nil {
								errs.add("Pick: %v", err)
								return
							}
							tally.picks[p].Add(1)
							if err := b.Done(p, Outcome{}); err != nil {
								errs.add("Done: %v", err)
							}
						}
					}()
				}
				wg.Wait()
				require.Empty(t, errs.errs)
				for _, p := range peers {
					assert.Equal(t, int64(goroutines*each/n), tally.picks[p].Load(), "peer %s", p)
					assert.Zero(t, p.InFlight())
				}
				assert.Less(t, b.ctr.Load(), uint64(foldAt), "the counter was folded")
			})
		}
	}
}
