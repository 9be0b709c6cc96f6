package balancerhttp_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// TestTransport_hedgeClientGivesUp: the client cancels its request while
// its servers hold every attempt (every arrival stalls): the first attempt
// and its hedge, or the first alone before the hedge's delay. Every server
// sees its request's context end, the error is a *RoundTripError whose Err
// is context.Canceled (as without hedging), no peer is left in flight, and
// no peer is counted failed: the caller gave up, not the peers.
func TestTransport_hedgeClientGivesUp(t *testing.T) {
	for _, tt := range []struct {
		name     string
		attempts int
	}{
		{"both in flight", 2},
		{"before the hedge", 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newStallFleet(t, 2, func(int) bool { return true }, nil)
			lb, err := balancer.NewRoundRobin(f.peers, balancer.WithRand(rand.NewPCG(5, 6)))
			require.NoError(t, err)
			h := f.hedging(t) // the hedge's delay ends at the first stall
			if tt.attempts == 1 {
				bud, err := retrybudget.New(1, 0, time.Minute)
				require.NoError(t, err)
				h, err = balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: bud})
				require.NoError(t, err)
			}
			tr := &balancerhttp.Transport{Picker: lb, Hedging: h}
			defer tr.CloseIdleConnections()

			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/x", nil)
			require.NoError(t, err)
			req.Header.Set("X-Request-Id", "1")
			errc := make(chan error, 1)
			go func() {
				resp, err := patient(tr).Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				errc <- err
			}()
			for range tt.attempts {
				<-f.held
			}
			cancel()
			patience := time.NewTimer(10 * time.Second)
			defer patience.Stop()
			select {
			case err = <-errc:
			case <-patience.C:
				t.Fatal("no answer 10 s after the cancellation")
			}
			var rt *balancerhttp.RoundTripError
			if assert.ErrorAs(t, err, &rt) {
				assert.ErrorIs(t, rt.Err, context.Canceled, "RoundTripError.Err")
			}
			assert.ErrorIs(t, err, context.Canceled)
			f.waitEnded(t, tt.attempts)

			log := f.arrivals()
			require.Len(t, log, tt.attempts)
			if tt.attempts == 2 {
				assert.NotEqual(t, log[0].server, log[1].server, "the hedge on the other server")
			}
			for i, a := range log {
				assert.True(t, a.cancelled, "arrival %d's context ended", i)
			}
			assert.Equal(t, uint64(tt.attempts-1), h.Stats().Sent)
			for _, q := range lb.Peers() {
				assert.Zero(t, q.InFlight(), "in flight on %s", q)
				assert.Zero(t, q.Stats().Failures, "failures of %s", q)
			}
		})
	}
}

// TestTransport_hedgeTimeoutBeforeDelay: the first attempt's server holds
// it, and the Transport's ReadTimeout ends it long before the hedge's
// delay (an hour): an ordinary retry on the other peer answers, taken from
// the retry budget, not the hedge's; no hedge is sent, and the first peer
// is counted failed once (ErrReadTimeout is the peer's failure).
func TestTransport_hedgeTimeoutBeforeDelay(t *testing.T) {
	f := newStallFleet(t, 2, func(rank int) bool { return rank == 0 }, nil)
	lb, err := balancer.NewRoundRobin(f.peers, balancer.WithRand(rand.NewPCG(7, 8)))
	require.NoError(t, err)
	hedges, err := retrybudget.New(1, 0, time.Minute)
	require.NoError(t, err)
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: hedges})
	require.NoError(t, err)
	retries, err := retrybudget.New(1, 0, time.Minute)
	require.NoError(t, err)
	tr := &balancerhttp.Transport{Picker: lb, Hedging: h, RetryBudget: retries,
		ReadTimeout: 50 * time.Millisecond * raceSlowdown} // its length only sets the test's time
	defer tr.CloseIdleConnections()

	req, err := http.NewRequest(http.MethodGet, "http://svc/x", nil)
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "1")
	resp, err := doWithin(t, tr, req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	f.waitEnded(t, 1)

	log := f.arrivals()
	require.Len(t, log, 2, "the first attempt and its retry")
	assert.True(t, log[0].cancelled, "the timed-out attempt's context ended")
	assert.NotEqual(t, log[0].server, log[1].server, "the retry on the other server")
	assert.Equal(t, fmt.Sprintf("%d 1", log[1].server), string(b), "the retry's answer")
	st := h.Stats()
	assert.Zero(t, st.Sent, "hedges sent")
	assert.Zero(t, hedges.Stats().Retries, "withdrawn from the hedges' budget")
	assert.Equal(t, uint64(1), retries.Stats().Retries, "withdrawn from the retries' budget")
	failures := map[string]uint64{}
	for _, q := range lb.Peers() {
		assert.Zero(t, q.InFlight(), "in flight on %s", q)
		failures[q.Addr()] = q.Stats().Failures
	}
	assert.Equal(t, map[string]uint64{f.peers[log[0].server].Addr(): 1, f.peers[log[1].server].Addr(): 0}, failures)
}
