package balancerhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestOutlier_endToEnd: six loopback backends, one of which answers 503
// to every other request, behind a Transport whose picker has
// WithSuccessRateEjection (intervals of 200 ms, 20 attempts a peer, 5
// peers), on the real clock, for every picker that neither routes by key
// nor learns latency (those starve the failing backend below the volume:
// TestOutlier_concurrent). max_fails is 1000 so that nginx's own rule does
// not take the backend out first: its success rate alone must. Four
// clients send GETs (503 is retried on another backend, so each GET
// succeeds) until the picker reports EventPeerOutlier or 10 s have passed
// (bounded by time, not by a count: at about 40 µs a GET over loopback,
// 5,000 GETs can end before the first 200 ms interval does); then 200
// more GETs all succeed and none reaches the failing backend, out for its fail_timeout (30 s). Expected, per interval: the
// failing backend's rate about 0.5, the others' 1.0: mean 5.5/6 = 0.917,
// stdev √((0.417² + 5 × 0.083²)/6) = 0.186, threshold 0.917 − 1.9 × 0.186
// = 0.563; only the failing backend is below it.
func TestOutlier_endToEnd(t *testing.T) {
	for _, a := range balancer.Algorithms() {
		if a.Keyed || a.Latency {
			continue
		}
		t.Run(a.Name, func(t *testing.T) {
			var bad atomic.Int64 // requests the failing backend answered
			var peers []*balancer.Peer
			for i := range 6 {
				var n atomic.Int64
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if i == 0 {
						bad.Add(1)
						if n.Add(1)%2 == 0 {
							w.WriteHeader(http.StatusServiceUnavailable)
							return
						}
					}
					io.WriteString(w, "ok")
				}))
				t.Cleanup(srv.Close)
				peers = append(peers, balancer.NewPeer(srv.Listener.Addr().String(), balancer.MaxFails(1000), balancer.FailTimeout(30*time.Second)))
			}
			var mu sync.Mutex
			var outliers []string
			ejected := make(chan struct{})
			p, err := a.New(peers,
				balancer.WithSuccessRateEjection(balancer.SuccessRateEjection{Interval: 200 * time.Millisecond, RequestVolume: 20}),
				balancer.WithEvents(func(e balancer.Event) {
					if e.Kind != balancer.EventPeerOutlier {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					outliers = append(outliers, e.Peer.Addr())
					if len(outliers) == 1 {
						close(ejected)
					}
				}))
			require.NoError(t, err)
			client := &http.Client{Transport: &balancerhttp.Transport{Picker: p}, Timeout: 5 * time.Second}
			get := func() error {
				resp, err := client.Get("http://service/")
				if err != nil {
					return err
				}
				defer resp.Body.Close()
				_, _ = io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != http.StatusOK {
					return &statusError{resp.StatusCode}
				}
				return nil
			}
			var sent atomic.Int64
			deadline := time.Now().Add(10 * time.Second)
			var wg sync.WaitGroup
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for sent.Add(1) > 0 && time.Now().Before(deadline) {
						select {
						case <-ejected:
							return
						default:
						}
						if err := get(); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			mu.Lock()
			got := append([]string(nil), outliers...)
			mu.Unlock()
			require.Equal(t, []string{peers[0].Addr()}, got, "after %d GETs", sent.Load())
			before := bad.Load()
			for i := range 200 {
				require.NoError(t, get(), "GET %d after the ejection", i)
			}
			assert.Equal(t, before, bad.Load(), "no GET reached the ejected backend")
			assert.Equal(t, balancer.HealthFailed, peers[0].Stats().Health)
		})
	}
}

type statusError struct{ code int }

func (e *statusError) Error() string { return http.StatusText(e.code) }
