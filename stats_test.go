package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStats_attemptsEveryPath counts, on every picker, the peers Pick
// returns, through the fast paths (fresh requests, static weights) and the
// slow ones (retried requests, failures, a peer with max_conns): each
// peer's Attempts must equal the times it was returned, and Failures the
// failures reported on it.
func TestStats_attemptsEveryPath(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		peers := benchPeers(10)
		peers[3] = NewPeer("capped", MaxConns(2), Weight(4))
		peers[4] = NewPeer("failing", MaxFails(0), Weight(5)) // never out
		p, err := pc.new(peers)
		require.NoError(t, err)
		picked := map[*Peer]uint64{}
		failed := map[*Peer]uint64{}
		var r Request
		for i := range 400 {
			req := &r
			switch i % 3 {
			case 0:
				req = nil
			case 1:
				r.Reset()
			}
			got, err := p.Pick(req)
			if err != nil {
				require.ErrorIs(t, err, ErrTriesExhausted, "pick %d", i)
				continue
			}
			picked[got]++
			fail := got.Addr() == "failing"
			if fail {
				failed[got]++
			}
			require.NoError(t, p.Done(got, Outcome{Failed: fail, Latency: time.Millisecond}))
		}
		for _, q := range peers {
			st := q.Stats()
			assert.Equal(t, picked[q], st.Attempts, "%s attempts", q)
			assert.Equal(t, failed[q], st.Failures, "%s failures", q)
			assert.Zero(t, st.InFlight, "%s", q)
		}
	})
}

// TestStats_health checks each Health on every picker, on a fake clock:
// the classification follows nginx's eligibility test (RR.c 550-563) and
// probe (591-593), with fail_timeout 10s and max_fails 1.
func TestStats_health(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		a := NewPeer("a", FailTimeout(10*time.Second))
		b := NewPeer("b", MaxConns(1))
		c := NewPeer("c", Down())
		p, err := pc.new([]*Peer{a, b, c}, clk.opt())
		require.NoError(t, err)
		health := func() [3]Health { return [3]Health{a.Stats().Health, b.Stats().Health, c.Stats().Health} }
		assert.Equal(t, [3]Health{HealthOK, HealthOK, HealthDown}, health())

		// Pick until b is held (max_conns 1: full) and a has failed.
		var held *Peer
		for range 20 {
			if held != nil && a.Stats().Fails > 0 {
				break
			}
			got, err := p.Pick(nil)
			require.NoError(t, err)
			if got == b && held == nil {
				held = got
				continue
			}
			require.NoError(t, p.Done(got, Outcome{Failed: got == a}))
		}
		require.NotNil(t, held, "b never picked")
		require.Equal(t, 1, a.Stats().Fails, "a never picked")
		assert.Equal(t, [3]Health{HealthFailed, HealthFull, HealthDown}, health())

		clk.add(10 * time.Second) // through the window: still out (<=)
		assert.Equal(t, HealthFailed, a.Stats().Health)
		clk.add(time.Nanosecond) // past it: the next pick of a is the probe
		assert.Equal(t, HealthProbing, a.Stats().Health)

		require.NoError(t, p.Done(b, Outcome{}))
		assert.Equal(t, HealthOK, b.Stats().Health)
		require.NoError(t, toSet(p).SetDown(c, false))
		assert.Equal(t, HealthOK, c.Stats().Health)
	})
}

// TestStats_latency checks that the latency-aware pickers expose their
// estimate: a peer's first reply is its estimate (latencyStats.observe);
// the other pickers keep none.
func TestStats_latency(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		a := NewPeer("a")
		p, err := pc.new([]*Peer{a})
		require.NoError(t, err)
		fresh := a.Stats()
		fresh.DerivedWeight = 0 // the picker's own start (FastestFirst's 100, ReportedWRR's weight), its tests'
		assert.Equal(t, PeerStats{Health: HealthOK, Weight: 1}, fresh)
		got, err := p.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, p.Done(got, Outcome{Latency: 7 * time.Millisecond}))
		st := a.Stats()
		assert.Equal(t, uint64(1), st.Attempts, "the single-peer path counts too")
		if pc.alg.Latency {
			assert.True(t, st.Measured)
			assert.Equal(t, 7*time.Millisecond, st.Latency)
		} else {
			assert.False(t, st.Measured)
			assert.Zero(t, st.Latency)
		}
	})
}

func TestStats_healthNames(t *testing.T) {
	var names []string
	for _, h := range Healths() {
		names = append(names, h.String())
	}
	assert.Equal(t, []string{"healthy", "down", "failed", "probing", "full"}, names)
	assert.Equal(t, "Health(9)", Health(9).String())
	assert.Equal(t, "EventKind(14)", EventKind(14).String())
	assert.Equal(t, "HedgeSent HedgeWon HedgeRefused", EventHedgeSent.String()+" "+EventHedgeWon.String()+" "+EventHedgeRefused.String())
	assert.Equal(t, "PeerBlind", EventPeerBlind.String())
	assert.Equal(t, "PeerSeen", EventPeerSeen.String())
	assert.Equal(t, "PeerProbe", EventPeerProbe.String())
}
