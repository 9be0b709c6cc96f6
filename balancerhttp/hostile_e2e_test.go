package balancerhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

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
