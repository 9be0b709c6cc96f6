package balancerhttp_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// slowBackend delays every answer of b by d.
func slowBackend(b *backend, d time.Duration) {
	h := b.srv.Config.Handler
	b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(d)
		h.ServeHTTP(w, r)
	})
}

// peerAt returns u's peer at addr, or nil.
func peerAt(u balancer.Updater, addr string) *balancer.Peer {
	for _, p := range u.Peers() {
		if p.Addr() == addr {
			return p
		}
	}
	return nil
}

// getAll sends n GETs from `clients` goroutines through client and
// returns how many did not end in a 200.
func getAll(client *http.Client, n, clients int) (bad int, errs []error) {
	var mu sync.Mutex
	clientLoop(n, clients, func() error {
		resp, err := client.Get("http://service/")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				err = &balancerhttp.StatusError{StatusCode: resp.StatusCode, Status: resp.Status}
			}
		}
		if err != nil {
			mu.Lock()
			bad++
			errs = append(errs, err)
			mu.Unlock()
		}
		return err
	})
	return bad, errs
}

// TestTransport_endToEnd runs an http.Client with the Transport over five
// loopback backends: two fast, one that answers in 40 ms, one that answers
// 503 for a while, one that is stopped and started again on its address.
// With max_fails 1 and fail_timeout 10 s on the picker's clock, which the
// test moves: no request fails (the failures go on to the next peer);
// while they fail, the failing backends get no more attempts than the
// clients had in flight when they first failed, and the slow one a small
// share; once they recover and the clock has passed their fail windows
// (and the failure penalty's decay), they serve again. Then an Update
// that drops the slow backend and adds a new one keeps the kept peers'
// state: a peer inside its fail window stays out.
func TestTransport_endToEnd(t *testing.T) {
	const clients = 4
	for _, name := range []string{"FastestFirst", "P2CPeakEWMA", "SmoothWRR", "LeastConn"} {
		t.Run(name, func(t *testing.T) {
			a, err := balancer.AlgorithmNamed(name)
			require.NoError(t, err)
			fast1, fast2 := newBackend(t, "fast1"), newBackend(t, "fast2")
			slow, flaky, dying := newBackend(t, "slow"), newBackend(t, "flaky"), newBackend(t, "dying")
			slowBackend(slow, 40*time.Millisecond)
			bs := []*backend{fast1, fast2, slow, flaky, dying}
			opts := []balancer.PeerOption{balancer.MaxFails(1), balancer.FailTimeout(10 * time.Second)}
			clk := newClock()
			bal, err := onClock(a, peersOf(bs, opts...), clk)
			require.NoError(t, err)
			tl := newTally(bal)
			client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: tl}}

			// flaky answers 503 and dying is down: every request still
			// gets a 200.
			flaky.status.Store(503)
			dying.stop()
			bad, errs := getAll(client, 200, clients)
			assert.Zero(t, bad, "requests that failed: %v", errs)
			picks, _, failed := tl.snapshot()
			assert.Positive(t, failed[flaky.addr]+failed[dying.addr], "failures reported")
			// Out from their first reported failure: only attempts picked
			// before it (one per client at most) reach them.
			assert.LessOrEqual(t, picks[flaky.addr], clients, "attempts on flaky")
			assert.LessOrEqual(t, picks[dying.addr], clients, "attempts on dying")
			if a.Latency {
				assert.Less(t, picks[slow.addr], 200/10, "attempts on the 40 ms backend")
			}

			// They recover; the fail windows pass on the picker's clock
			// (long enough, too, for the latency-aware pickers' failure
			// penalty to decay): both serve again.
			flaky.status.Store(0)
			dying.start(t)
			clk.add(10 * time.Minute)
			hits := map[*backend]int64{flaky: flaky.hits.Load(), dying: dying.hits.Load()}
			bad, errs = getAll(client, 400, clients)
			assert.Zero(t, bad, "requests that failed: %v", errs)
			for b, h := range hits {
				assert.Greater(t, b.hits.Load(), h, "%s serves after it recovered", b.name)
			}

			// dying goes down again and fails: out for 10 s. A picker
			// that weighs it low may take a while to try it: rounds of
			// 50 requests until it has (bounded).
			dying.stop()
			kept := peerAt(bal, dying.addr)
			require.NotNil(t, kept)
			for round := 0; round < 40 && kept.State().Fails == 0; round++ {
				bad, errs = getAll(client, 50, clients)
				assert.Zero(t, bad, "requests that failed: %v", errs)
			}
			before := kept.State()
			// Attempts picked before the first failure was reported (one
			// per client at most) fail too.
			require.GreaterOrEqual(t, before.Fails, 1, "dying's failures before the update")
			require.LessOrEqual(t, before.Fails, clients, "dying's failures before the update")

			// Discovery: slow leaves, fresh joins, the others stay.
			fresh := newBackend(t, "fresh")
			require.NoError(t, bal.Update(peersOf([]*backend{fresh, fast1, fast2, flaky, dying}, opts...)))
			assert.Same(t, kept, peerAt(bal, dying.addr), "the kept peer is the picker's own")
			after := kept.State()
			assert.Equal(t, before.Fails, after.Fails, "failures kept")
			assert.Equal(t, before.Checked, after.Checked, "fail window kept")

			slowHits, dyingPicks := slow.hits.Load(), func() int { p, _, _ := tl.snapshot(); return p[dying.addr] }()
			bad, errs = getAll(client, 200, clients)
			assert.Zero(t, bad, "requests that failed: %v", errs)
			picks, dones, _ := tl.snapshot()
			assert.Equal(t, dyingPicks, picks[dying.addr], "dying inside its kept fail window")
			assert.Equal(t, slowHits, slow.hits.Load(), "slow after it left")
			assert.Positive(t, fresh.hits.Load(), "fresh after it joined")
			assert.Equal(t, picks, dones, "every attempt reported")
			for _, p := range bal.Peers() {
				assert.Zero(t, p.InFlight(), "in flight on %s", p)
			}
		})
	}
}
