package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// lateReply is a Base whose 503s reach the Transport late: it tells
// arrived (the hedge's timer) that it holds one, and hands it over only
// once the attempt's context has ended, as a slow 503 that comes in after
// the hedge's answer does, without a race between the two.
type lateReply struct {
	base    http.RoundTripper
	arrived chan<- time.Time
}

func (l *lateReply) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := l.base.RoundTrip(r)
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		return resp, err
	}
	l.arrived <- time.Time{}
	<-r.Context().Done() // lost: the hedge answered
	return resp, nil
}

// TestTransport_hedgeLoserFailureCounts: two loopback servers; the first
// attempt of each request gets a 503, which reaches the Transport only
// after the hedge, sent when the 503 is in (the hedge's timer), has
// answered 200 from the other server. The caller gets the hedge's 200,
// the hedge counts as won, and the 503 counts as its server's failure (a
// failure reply is a failure whichever answer came first), where it had
// been reported Superseded and lost to the failure accounting; the 200's
// server is counted no failure, and no peer is left in flight.
func TestTransport_hedgeLoserFailureCounts(t *testing.T) {
	var arrivals atomic.Int64
	var peers []*balancer.Peer
	for i := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if arrivals.Add(1) == 1 {
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			_, _ = fmt.Fprintf(w, "%d", i)
		}))
		t.Cleanup(srv.Close)
		peers = append(peers, balancer.NewPeer(addrOf(srv)))
	}
	lb, err := balancer.NewRoundRobin(peers)
	require.NoError(t, err)
	arrived := make(chan time.Time, 1)
	bud, err := retrybudget.New(1, 0, time.Minute)
	require.NoError(t, err)
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: bud,
		Timer: func(time.Duration) (<-chan time.Time, func() bool) { return arrived, func() bool { return true } }})
	require.NoError(t, err)
	base := http.DefaultTransport.(*http.Transport).Clone()
	tr := &balancerhttp.Transport{Picker: lb, Hedging: h, Base: &lateReply{base: base, arrived: arrived}}
	defer tr.CloseIdleConnections()
	defer base.CloseIdleConnections()

	req, err := http.NewRequest(http.MethodGet, "http://svc/x", nil)
	require.NoError(t, err)
	resp, err := doWithin(t, tr, req)
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())

	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, int64(2), arrivals.Load(), "the first attempt and the hedge")
	assert.Equal(t, balancer.HedgeStats{Sent: 1, Won: 1, Delay: time.Hour}, h.Stats())
	failures := map[string]uint64{}
	want := map[string]uint64{}
	for i, q := range lb.Peers() {
		assert.Zero(t, q.InFlight(), "in flight on %s", q)
		failures[q.Addr()] = q.Stats().Failures
		want[q.Addr()] = 1 // the 503's server, the one that did not answer the 200
		if string(b) == fmt.Sprint(i) {
			want[q.Addr()] = 0
		}
	}
	assert.Equal(t, want, failures)
}
