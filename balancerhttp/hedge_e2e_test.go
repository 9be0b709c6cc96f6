package balancerhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// TestTransport_hedgeE2E: three real servers on loopback, of which "slow"
// stalls every request until the client goes away (its handler waits on
// r.Context()). The hedge's timer fires when the stalled server has the
// request (no wall clock: its handler signals the timer), so every GET
// whose first attempt went to it is hedged to another server and
// completes there. 60 GETs one after another (the timer's signal is
// shared, so concurrent requests could take each other's), SmoothWRR, MaxFails 0 (the
// stall is never the peer's failure): every GET answers 200 from a fast
// server with its body intact; the stalled server saw every request it
// got cancelled (its handler's context ended); hedges won at most once
// per stalled request and at least once.
func TestTransport_hedgeE2E(t *testing.T) {
	arrived := make(chan time.Time, 256)
	var stalled, cancelled atomic.Int64
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stalled.Add(1)
		arrived <- time.Time{}
		<-r.Context().Done()
		cancelled.Add(1)
	}))
	defer slow.Close()
	var fastServed atomic.Int64
	fast := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fastServed.Add(1)
			_, _ = io.WriteString(w, "from "+name)
		}))
	}
	f1, f2 := fast("f1"), fast("f2")
	defer f1.Close()
	defer f2.Close()
	addr := func(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer(addr(slow), balancer.MaxFails(0)),
		balancer.NewPeer(addr(f1), balancer.MaxFails(0)),
		balancer.NewPeer(addr(f2), balancer.MaxFails(0)),
	})
	require.NoError(t, err)
	bud, err := retrybudget.New(1, 0, time.Minute)
	require.NoError(t, err)
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: bud,
		Timer: func(time.Duration) (<-chan time.Time, func() bool) { return arrived, func() bool { return true } }})
	require.NoError(t, err)
	tr := &balancerhttp.Transport{Picker: lb, Hedging: h}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}

	const n = 60
	var got []string
	for range n {
		resp, err := client.Get("http://service/x")
		require.NoError(t, err)
		b, err := io.ReadAll(resp.Body)
		assert.NoError(t, err)
		_ = resp.Body.Close()
		got = append(got, string(b))
	}
	require.Len(t, got, n)
	for _, b := range got {
		assert.True(t, b == "from f1" || b == "from f2", "answered %q", b)
	}
	for cancelled.Load() != stalled.Load() { // the stalled handlers see their client go
		runtime.Gosched()
	}
	st := h.Stats()
	assert.Positive(t, stalled.Load(), "the stalled server got requests")
	assert.LessOrEqual(t, st.Won, uint64(stalled.Load()))
	assert.Positive(t, st.Won)
	assert.Equal(t, int64(n), fastServed.Load()-int64(st.Sent-st.Won), "each GET served once by a fast server, besides hedges that lost")
	for _, q := range lb.Peers() {
		assert.Zero(t, q.InFlight(), "in flight on %s", q)
	}

}
