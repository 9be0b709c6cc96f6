package balancerhttp_test

import (
	"context"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// openBudget allows every hedge.
type openBudget struct{}

func (openBudget) Deposit()          {}
func (openBudget) TryWithdraw() bool { return true }
func (openBudget) Refund()           {}

// hostAddr is s's host:port.
func hostAddr(s *httptest.Server) string { return strings.TrimPrefix(s.URL, "http://") }

// roundRobinOver returns a RoundRobin over the servers, none ever marked
// down (MaxFails 0), so that the order of the picks is the servers'.
func roundRobinOver(t *testing.T, srvs ...*httptest.Server) *balancer.RoundRobin {
	t.Helper()
	var peers []*balancer.Peer
	for _, s := range srvs {
		peers = append(peers, balancer.NewPeer(hostAddr(s), balancer.MaxFails(0)))
	}
	rr, err := balancer.NewRoundRobin(peers)
	require.NoError(t, err)
	return rr
}

// TestHostile_emptyMethodIsGET: net/http reads an empty Method as GET,
// and so does hedgeable; a request built by hand with Method "" must be
// retried past a 503 as a GET is. Two servers, one answering 503: round
// robin sends one of every two requests to it first; every request must
// end 200, served by the other.
func TestHostile_emptyMethodIsGET(t *testing.T) {
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer bad.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer good.Close()
	rr := roundRobinOver(t, bad, good)
	tr := &balancerhttp.Transport{Picker: rr}
	defer tr.CloseIdleConnections()
	for i := range 4 {
		req, err := http.NewRequest(http.MethodGet, "http://svc/x", nil)
		require.NoError(t, err)
		req.Method = ""
		resp, err := tr.RoundTrip(req)
		require.NoError(t, err, "request %d", i)
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		assert.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
		assert.Equal(t, "ok", string(b), "request %d", i)
	}
	for _, p := range rr.Peers() {
		assert.Zero(t, p.InFlight(), "in flight on %s", p)
	}
}

// TestHostile_stalledFailureBody: a server answers 503 with headers that
// promise a body it never sends, and holds the connection. The failure is
// the peer's, decided on its status: the request must go on to the other
// server at once, not wait on the failed peer's body (nginx closes the
// failed upstream's connection and goes on). The context's deadline only
// bounds a failure of the test; a request that waits on the stalled body
// ends with it.
func TestHostile_stalledFailureBody(t *testing.T) {
	release := make(chan struct{})
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "part")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer bad.Close()
	defer close(release)
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	defer good.Close()

	for _, hedged := range []bool{false, true} {
		rr := roundRobinOver(t, bad, good)
		tr := &balancerhttp.Transport{Picker: rr}
		if hedged {
			h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: openBudget{}})
			require.NoError(t, err)
			tr.Hedging = h
		}
		for i := range 2 { // one of the two goes to bad first
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/x", nil)
			require.NoError(t, err)
			resp, err := tr.RoundTrip(req)
			if assert.NoError(t, err, "hedged %v, request %d", hedged, i) {
				b, err := io.ReadAll(resp.Body)
				assert.NoError(t, err)
				_ = resp.Body.Close()
				assert.Equal(t, "ok", string(b))
			}
			cancel()
		}
		// Only the stalled server left: the request ends with its
		// failure, a *StatusError, not the caller's deadline.
		solo := roundRobinOver(t, bad)
		tr2 := &balancerhttp.Transport{Picker: solo, Hedging: tr.Hedging}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://svc/x", nil)
		require.NoError(t, err)
		_, err = tr2.RoundTrip(req)
		var se *balancerhttp.StatusError
		assert.True(t, errors.As(err, &se), "hedged %v: %v", hedged, err)
		assert.False(t, errors.Is(err, context.DeadlineExceeded), "hedged %v: %v", hedged, err)
		cancel()
		for _, p := range append(rr.Peers(), solo.Peers()...) {
			assert.Zero(t, p.InFlight(), "in flight on %s", p)
		}
		tr.CloseIdleConnections()
		tr2.CloseIdleConnections()
	}

	// The Proxy holds the failure's response in case no peer is left:
	// dropped, unread, once the next peer is tried.
	rr := roundRobinOver(t, bad, good)
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: rr, ErrorLog: log.New(io.Discard, "", 0)})
	defer front.Close()
	for i := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, front.URL+"/x", nil)
		require.NoError(t, err)
		resp, err := front.Client().Do(req)
		if assert.NoError(t, err, "proxy, request %d", i) {
			b, err := io.ReadAll(resp.Body)
			assert.NoError(t, err)
			_ = resp.Body.Close()
			assert.Equal(t, "ok", string(b), "proxy, request %d", i)
		}
		cancel()
	}
	for _, p := range rr.Peers() {
		assert.Zero(t, p.InFlight(), "in flight on %s", p)
	}
}
