package balancerhttp_test

import (
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
)

// brokenRT answers every request with resp and a nil error, or panics
// with "broken" when panics is set, and counts its calls.
type brokenRT struct {
	resp   func() *http.Response
	panics bool
	calls  atomic.Int64
}

func (rt *brokenRT) RoundTrip(req *http.Request) (*http.Response, error) {
	rt.calls.Add(1)
	if req.Body != nil {
		_ = req.Body.Close()
	}
	if rt.panics {
		panic("broken")
	}
	return rt.resp(), nil
}

// contractCases are the ways a RoundTripper breaks its contract, and a nil
// Body that http.Client takes for an empty one (ok).
var contractCases = []struct {
	name   string
	resp   func() *http.Response
	panics bool
	ok     bool
}{
	{name: "nil response", resp: func() *http.Response { return nil }},
	{name: "nil Body of 5 bytes", resp: func() *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", ContentLength: 5, Header: http.Header{}}
	}},
	{name: "panics", panics: true},
	{name: "nil Body, no length", ok: true, resp: func() *http.Response {
		return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", ContentLength: -1, Header: http.Header{}}
	}},
}

// catch runs f and returns what it panicked with, nil if it did not.
func catch(f func()) (v any) {
	defer func() { v = recover() }()
	f()
	return nil
}

// contractPeers is a RoundRobin over two peers that nothing listens on:
// the broken RoundTripper answers for them.
func contractPeers(t *testing.T) (*balancer.RoundRobin, []*balancer.Peer) {
	t.Helper()
	peers := []*balancer.Peer{balancer.NewPeer("127.0.0.1:9"), balancer.NewPeer("127.0.0.2:9")}
	rr, err := balancer.NewRoundRobin(peers)
	require.NoError(t, err)
	return rr, peers
}

func assertNothingInFlight(t *testing.T, peers []*balancer.Peer) {
	t.Helper()
	for _, p := range peers {
		s := p.State()
		assert.Equal(t, 0, s.InFlight, "%s in flight", p)
		assert.Equal(t, 0, s.Fails, "%s failed: the RoundTripper's fault, not the peer's", p)
	}
}

// Transport.Base breaking its contract: an error wrapping
// ErrBadRoundTripper after one attempt, or its panic going on to the
// caller once the attempt is reported; nothing left in flight.
func TestTransport_baseBreaksContract(t *testing.T) {
	for _, tc := range contractCases {
		t.Run(tc.name, func(t *testing.T) {
			rr, peers := contractPeers(t)
			rt := &brokenRT{resp: tc.resp, panics: tc.panics}
			tr := &balancerhttp.Transport{Picker: rr, Base: rt}
			req, err := http.NewRequest(http.MethodGet, "http://svc/x", nil)
			require.NoError(t, err)
			var resp *http.Response
			v := catch(func() { resp, err = tr.RoundTrip(req) })
			switch {
			case tc.panics:
				assert.Equal(t, "broken", v, "the panic goes on to the caller")
			case tc.ok:
				require.Nil(t, v)
				require.NoError(t, err)
				b, rerr := io.ReadAll(resp.Body)
				assert.NoError(t, rerr)
				assert.Empty(t, b)
				require.NoError(t, resp.Body.Close())
			default:
				require.Nil(t, v, "RoundTrip panicked")
				assert.ErrorIs(t, err, balancerhttp.ErrBadRoundTripper)
				assert.Nil(t, resp)
			}
			assert.Equal(t, int64(1), rt.calls.Load(), "attempts: no retry through a broken RoundTripper")
			assertNothingInFlight(t, peers)
		})
	}
}

// Proxy.Transport breaking its contract: 502, or the panic going on to the
// server (which recovers a handler's), once the attempt is reported.
func TestProxy_transportBreaksContract(t *testing.T) {
	for _, tc := range contractCases {
		t.Run(tc.name, func(t *testing.T) {
			rr, peers := contractPeers(t)
			rt := &brokenRT{resp: tc.resp, panics: tc.panics}
			p := &balancerhttp.Proxy{Picker: rr, Transport: rt, ErrorLog: quietLog}
			rec := httptest.NewRecorder()
			v := catch(func() { p.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://svc/x", nil)) })
			switch {
			case tc.panics:
				assert.Equal(t, "broken", v)
			case tc.ok:
				require.Nil(t, v)
				assert.Equal(t, http.StatusOK, rec.Code)
				assert.Empty(t, rec.Body.String())
			default:
				require.Nil(t, v, "ServeHTTP panicked")
				assert.Equal(t, http.StatusBadGateway, rec.Code)
			}
			assert.Equal(t, int64(1), rt.calls.Load())
			assertNothingInFlight(t, peers)
		})
	}
}

// A probe through a broken or panicking transport is answered Failed, with
// ErrBadRoundTripper as the cause, and the process goes on.
func TestProber_transportBreaksContract(t *testing.T) {
	for _, tc := range contractCases {
		if tc.ok {
			continue // an empty 200 is ParseProbe's to refuse
		}
		t.Run(tc.name, func(t *testing.T) {
			pr, err := balancerhttp.NewProber(balancerhttp.WithProbeTransport(&brokenRT{resp: tc.resp, panics: tc.panics}))
			require.NoError(t, err)
			defer pr.Close()
			to := newAnswers()
			pr.Probe(balancer.NewPeer("127.0.0.1:9"), to)
			got := to.wait(t, 1)
			assert.True(t, got[0].a.Failed)
			st := pr.Stats()
			assert.Equal(t, uint64(1), st.Failed)
			assert.ErrorIs(t, st.LastError, balancerhttp.ErrBadRoundTripper)
		})
	}
}

// A health check through a broken or panicking transport fails with
// ErrBadRoundTripper, and the process goes on.
func TestHealthChecker_transportBreaksContract(t *testing.T) {
	for _, tc := range contractCases {
		if tc.ok {
			continue // an empty 200 passes
		}
		t.Run(tc.name, func(t *testing.T) {
			rr, _ := contractPeers(t)
			h, err := balancerhttp.NewHealthChecker(rr, balancerhttp.HealthTransport(&brokenRT{resp: tc.resp, panics: tc.panics}),
				balancerhttp.HealthInterval(balancerhttp.MinHealthInterval), balancerhttp.HealthFall(1))
			require.NoError(t, err)
			defer h.Close()
			deadline := time.Now().Add(10 * time.Second)
			for h.Stats().LastError == nil && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			assert.ErrorIs(t, h.Stats().LastError, balancerhttp.ErrBadRoundTripper)
		})
	}
}
