package balancer

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStress_guards runs, for every picker with both guards set, callers
// that retry through an outage (nine attempts in ten fail for the first
// third of their requests, one in fifty after) while another goroutine
// marks a peer down and up, removes and adds one, and sends the same
// peers through Update. Afterwards: every pick was reported and accepted,
// nothing is in flight, the events match the counters (one EventPanic per
// engagement, PanicOver at most one behind), panic engaged during the
// outage, and on the quiet picker InPanic agrees with a count of the peers
// made from their State. Run it under -race.
func TestStress_guards(t *testing.T) {
	const workers, requests = 4, 1200
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClockAt(time.Unix(1_700_000_000, 0))
		peers := makePeers(8, numbered, func(int) []PeerOption { return []PeerOption{FailTimeout(time.Second)} })
		extra := NewPeer("x", FailTimeout(time.Second))
		var panics, overs, capped atomic.Int64
		b, err := pc.new(peers, clk.opt(), WithPanicThreshold(50), WithMaxEjectionPercent(75), WithEvents(func(e Event) {
			switch e.Kind {
			case EventPanic:
				panics.Add(1)
			case EventPanicOver:
				overs.Add(1)
			case EventEjectionCapped:
				capped.Add(1)
			}
		}))
		require.NoError(t, err)
		var errs stressErrs
		var picked, reported atomic.Int64
		var work sync.WaitGroup
		for g := range workers {
			work.Add(1)
			go func() {
				defer work.Done()
				rng := rand.New(rand.NewPCG(uint64(g), 9))
				var r Request
				for k := range requests {
					clk.add(time.Millisecond)
					pFail := 0.02
					if k < requests/3 {
						pFail = 0.9
					}
					r.Reset()
					r.SetKey(guardKeys[rng.IntN(len(guardKeys))])
					tryRequest(b, &r, func(p *Peer) Outcome {
						failed := rng.Float64() < pFail
						return Outcome{Failed: failed, Latency: time.Duration(rng.IntN(3000)) * time.Microsecond}
					}, &picked, &reported, errs.add)
				}
			}()
		}
		stop := make(chan struct{})
		var upd sync.WaitGroup
		upd.Go(func() {
			snapshot := func() []*Peer {
				snap := make([]*Peer, len(peers))
				for j, p := range peers {
					snap[j] = NewPeer(p.Addr(), FailTimeout(time.Second))
				}
				return snap
			}
			if err := churnList(toSet(b), peers[7], extra, nil, snapshot, stop); err != nil {
				errs.add("%v", err)
			}
		})
		work.Wait()
		close(stop)
		upd.Wait()

		require.Empty(t, errs.errs)
		assert.Equal(t, picked.Load(), reported.Load())
		held := toSet(b).Peers()
		for _, p := range append(held, extra) {
			assert.Zero(t, p.InFlight(), "peer %s", p)
		}
		g := b.(interface {
			PanicCount() uint64
			EjectionCappedCount() uint64
			InPanic() bool
		})
		assert.Equal(t, uint64(panics.Load()), g.PanicCount())
		assert.Equal(t, uint64(capped.Load()), g.EjectionCappedCount())
		assert.Positive(t, panics.Load(), "panic engaged in the outage")
		inPanic := g.InPanic()
		d := panics.Load() - overs.Load()
		assert.True(t, d == 0 && !inPanic || d == 1 && inPanic, "%d panics, %d overs, in panic %v", panics.Load(), overs.Load(), inPanic)
		live, out := 0, 0
		for _, p := range held {
			if !p.IsDown() {
				live++
			}
		}
		out = outCount(held, clk.now())
		assert.Equal(t, (live-out)*100 < 50*live, inPanic, "%d of %d out", out, live)
	})
}
