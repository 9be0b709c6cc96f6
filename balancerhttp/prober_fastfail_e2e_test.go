package balancerhttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// TestProber_prequalFastFailure: of three servers behind loadreport's
// Middleware, one answers every request 500 at once and two take 5 ms a
// request. Its probes answer as the least loaded (nothing in flight, a
// latency estimate of about 0), so Prequal keeps it out of the pool only
// when its 500s count as failures: with the Transport's default
// FailureStatuses (502, 503, 504) a 500 is an answer, the peer looks the
// fastest, and it takes more than its fair share (100 of 300; require more
// than 120). It took 283 until Prequal raised an answer's count to the
// client's own attempts on the peer (trust.go): the failing server's
// answers come while this client's attempt on it is still out, so count 1,
// hot against the others' 0, and it now takes every other request, 150;
// with 500 listed, its first failure keeps its answers out of
// the pool for fail_timeout (10 s, longer than the run), and it gets no
// more than 3 attempts, each retried on another server.
func TestProber_prequalFastFailure(t *testing.T) {
	tests := []struct {
		name     string
		statuses []int
		sink     bool
	}{
		{"default statuses", nil, true},
		{"500 listed", []int{500, 502, 503, 504}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var failing atomic.Int64
			handlers := []http.HandlerFunc{
				func(w http.ResponseWriter, r *http.Request) {
					failing.Add(1)
					w.WriteHeader(http.StatusInternalServerError)
				},
			}
			for range 2 {
				handlers = append(handlers, func(w http.ResponseWriter, r *http.Request) {
					select {
					case <-time.After(5 * time.Millisecond):
					case <-r.Context().Done():
					}
				})
			}
			var peers []*balancer.Peer
			for _, h := range handlers {
				m, err := loadreport.New()
				require.NoError(t, err)
				srv := httptest.NewServer(m.Handler(h))
				defer srv.Close()
				peers = append(peers, balancer.NewPeer(addrOf(srv), balancer.MaxFails(1), balancer.FailTimeout(10*time.Second)))
			}
			pr, err := balancerhttp.NewProber()
			require.NoError(t, err)
			picker, err := balancer.PrequalSettings{Prober: pr}.New(peers)
			require.NoError(t, err)
			defer picker.Close()
			client := &http.Client{
				Transport: &balancerhttp.Transport{Picker: picker, FailureStatuses: tt.statuses},
				Timeout:   3 * time.Second,
			}
			const n = 300
			ok := 0
			for range n {
				resp, err := client.Get("http://service/work")
				require.NoError(t, err)
				if resp.StatusCode == http.StatusOK {
					ok++
				}
				resp.Body.Close()
			}
			got := failing.Load()
			t.Logf("the failing server got %d of %d; %d answered 200; prober %+v", got, n, ok, pr.Stats())
			if tt.sink {
				assert.Greater(t, got, int64(n*2/5), "a sink: more than 1.2× its fair share")
			} else {
				assert.LessOrEqual(t, got, int64(3))
				assert.Equal(t, n, ok, "every failure retried on another server")
			}
		})
	}
}
