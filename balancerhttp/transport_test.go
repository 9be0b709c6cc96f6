package balancerhttp_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestTransport_retries checks when a failed attempt goes on to the next
// peer and what the caller gets, the rules of Transport's doc, without
// per-attempt timeouts and with timeouts that do not expire. SmoothWRR
// over equal weights tries the backends in order, a first.
func TestTransport_retries(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		body      string
		noGetBody bool // the body cannot be replayed
		header    http.Header
		statuses  []int                         // per backend; -1: stopped
		set       func(*balancerhttp.Transport) // options; nil: the defaults
		want      int                           // the status the caller gets; 0: an error
		wantFrom  string                        // the backend that answered
		wantErrs  []error
		wantStat  []int // the statuses among the error's attempts
		attempts  int
		failed    int
	}{
		{name: "GET 503 goes to the next", method: "GET", statuses: []int{503, 200}, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "GET refused goes to the next", method: "GET", statuses: []int{-1, 200}, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "GET 500 is an answer by default", method: "GET", statuses: []int{500, 200}, want: 500, wantFrom: "a", attempts: 1},
		{name: "GET 500 listed goes to the next", method: "GET", statuses: []int{500, 200}, set: func(t *balancerhttp.Transport) { t.FailureStatuses = []int{500} }, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "GET 503 with no status listed is an answer", method: "GET", statuses: []int{503, 200}, set: func(t *balancerhttp.Transport) { t.FailureStatuses = []int{} }, want: 503, wantFrom: "a", attempts: 1},
		{name: "GET every backend 503", method: "GET", statuses: []int{503, 502}, wantErrs: []error{balancer.ErrTriesExhausted}, wantStat: []int{503, 502}, attempts: 2, failed: 2},
		{name: "GET every backend refuses", method: "GET", statuses: []int{-1, -1, -1}, wantErrs: []error{balancer.ErrTriesExhausted, syscall.ECONNREFUSED}, attempts: 3, failed: 3},
		{name: "GET refused then 504", method: "GET", statuses: []int{-1, 504}, wantErrs: []error{balancer.ErrTriesExhausted, syscall.ECONNREFUSED}, wantStat: []int{504}, attempts: 2, failed: 2},
		{name: "MaxTries 1", method: "GET", statuses: []int{503, 200}, set: func(t *balancerhttp.Transport) { t.MaxTries = 1 }, wantErrs: []error{balancer.ErrTriesExhausted}, wantStat: []int{503}, attempts: 1, failed: 1},
		{name: "PUT body replayed", method: "PUT", body: "payload", statuses: []int{503, 200}, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "PUT body without GetBody is not retried", method: "PUT", body: "payload", noGetBody: true, statuses: []int{503, 200}, want: 503, wantFrom: "a", attempts: 1, failed: 1},
		{name: "POST 503 is not retried", method: "POST", body: "payload", statuses: []int{503, 200}, want: 503, wantFrom: "a", attempts: 1, failed: 1},
		{name: "POST refused goes to the next with its body", method: "POST", body: "payload", statuses: []int{-1, 200}, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "POST with Idempotency-Key is retried", method: "POST", body: "payload", header: http.Header{"Idempotency-Key": {"k1"}}, statuses: []int{503, 200}, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "POST with RetryNonIdempotent is retried", method: "POST", body: "payload", statuses: []int{503, 200}, set: func(t *balancerhttp.Transport) { t.RetryNonIdempotent = true }, want: 200, wantFrom: "b", attempts: 2, failed: 1},
		{name: "PATCH 502 is not retried", method: "PATCH", statuses: []int{502, 200}, want: 502, wantFrom: "a", attempts: 1, failed: 1},
		{name: "no peers", method: "GET", wantErrs: []error{balancer.ErrNoPeers}},
	}
	for _, to := range timeoutsOrNot {
		for _, tt := range tests {
			t.Run(to.name+"/"+tt.name, func(t *testing.T) {
				bs, peers := statusBackends(t, tt.statuses)
				p, err := balancer.NewSmoothWRR(peers)
				require.NoError(t, err)
				tl := newTally(p)
				tr := &balancerhttp.Transport{Picker: tl, ConnectTimeout: to.connect, ReadTimeout: to.read}
				if tt.set != nil {
					tt.set(tr)
				}
				client := &http.Client{Transport: tr, Timeout: 5 * time.Second}

				req := newRequest(t, tt.method, "http://service/x", tt.body, tt.header, tt.name)
				if tt.noGetBody {
					req.GetBody = nil
				}
				resp, err := client.Do(req)
				if tt.want == 0 {
					require.Error(t, err)
					for _, want := range tt.wantErrs {
						assert.ErrorIs(t, err, want)
					}
					var rt *balancerhttp.RoundTripError
					require.ErrorAs(t, err, &rt)
					assert.Len(t, rt.Attempts, tt.attempts, "attempts in the error: %v", err)
					var stats []int
					for _, a := range rt.Attempts {
						var se *balancerhttp.StatusError
						if errors.As(a, &se) {
							stats = append(stats, se.StatusCode)
						}
					}
					assert.Equal(t, tt.wantStat, stats, "failure statuses in the error")
					for _, b := range bs[:tt.attempts] {
						assert.Contains(t, err.Error(), b.addr, "the error names every peer tried")
					}
				} else {
					require.NoError(t, err)
					got, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					assert.Equal(t, tt.want, resp.StatusCode)
					assert.Equal(t, tt.wantFrom, string(got), "answered by")
				}
				n, f := tl.totals()
				picks, dones, _ := tl.snapshot()
				assert.Equal(t, tt.attempts, n, "attempts")
				assert.Equal(t, tt.failed, f, "attempts reported failed")
				assert.Equal(t, picks, dones, "every attempt reported")
				assertBodies(t, bs, tt.name, tt.method, tt.body)
			})
		}
	}
}

// TestTransport_noPicker: the zero Transport returns ErrNoPicker and closes
// the body.
func TestTransport_noPicker(t *testing.T) {
	body := &closeCounter{Reader: strings.NewReader("x")}
	req, err := http.NewRequest("PUT", "http://service/", body)
	require.NoError(t, err)
	_, err = (&http.Client{Transport: &balancerhttp.Transport{}}).Do(req)
	assert.ErrorIs(t, err, balancerhttp.ErrNoPicker)
	assert.Positive(t, body.closed.Load(), "body closed")
}

type closeCounter struct {
	io.Reader
	closed atomic.Int32
}

func (c *closeCounter) Close() error { c.closed.Add(1); return nil }

// TestTransport_hostAndKey: the backend sees the Host the caller wrote,
// and Key routes the keyed pickers: each key sticks to one backend.
func TestTransport_hostAndKey(t *testing.T) {
	var mu sync.Mutex
	hosts := map[string]bool{}
	seen := map[string]map[string]bool{} // key -> backends
	var peers []*balancer.Peer
	for i := range 4 {
		b := newBackend(t, string(rune('a'+i)))
		b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			defer mu.Unlock()
			hosts[r.Host] = true
			k := r.URL.Query().Get("user")
			if seen[k] == nil {
				seen[k] = map[string]bool{}
			}
			seen[k][b.name] = true
		})
		peers = append(peers, balancer.NewPeer(b.addr))
	}
	p, err := balancer.NewHash(peers)
	require.NoError(t, err)
	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{
		Picker: p,
		Key:    func(r *http.Request) string { return r.URL.Query().Get("user") },
	}}
	for i := range 80 {
		resp, err := client.Get("http://users.internal/profile?user=u" + string(rune('0'+i%8)))
		require.NoError(t, err)
		resp.Body.Close()
	}
	assert.Equal(t, map[string]bool{"users.internal": true}, hosts, "Host header")
	assert.Len(t, seen, 8)
	used := map[string]bool{}
	for k, bs := range seen {
		assert.Len(t, bs, 1, "backends of key %s", k)
		for b := range bs {
			used[b] = true
		}
	}
	assert.Greater(t, len(used), 1, "keys spread over backends")
}
