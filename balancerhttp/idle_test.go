package balancerhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestCloseIdleConnections is the regression test for idle connections
// that nothing could close: 1,000 requests from 100 clients at once over
// three loopback backends leave kept-alive connections (a few goroutines
// each, on both ends), and closing the idle connections, through
// http.Client for the Transport and the Proxy's own method for the Proxy,
// must bring the goroutine count back to where it was before the
// requests. Both with the default Base (which the caller cannot reach) and
// with a Base of the caller's.
func TestCloseIdleConnections(t *testing.T) {
	const (
		requests = 1000
		clients  = 100
		slack    = 5 // goroutines of the runtime or the test framework that come and go
	)
	ways := []struct {
		name string
		// client returns the client that makes the requests, the URL it
		// asks, and closes every idle connection of the balancing side.
		client func(t *testing.T, p balancer.Picker, base http.RoundTripper) (c *http.Client, url string, closeIdle func())
	}{
		{"Transport", func(t *testing.T, p balancer.Picker, base http.RoundTripper) (*http.Client, string, func()) {
			c := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: p, Base: base}}
			return c, "http://backends/", c.CloseIdleConnections
		}},
		{"Proxy", func(t *testing.T, p balancer.Picker, base http.RoundTripper) (*http.Client, string, func()) {
			proxy := &balancerhttp.Proxy{Picker: p, Transport: base, ErrorLog: quietLog}
			front := httptest.NewServer(proxy)
			t.Cleanup(front.Close)
			c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
			return c, front.URL, func() {
				c.CloseIdleConnections() // the clients' connections to the proxy
				proxy.CloseIdleConnections()
			}
		}},
	}
	bases := []struct {
		name string
		base func() http.RoundTripper
	}{
		{"default Base", func() http.RoundTripper { return nil }},
		{"caller's Base", func() http.RoundTripper { return &http.Transport{MaxIdleConnsPerHost: clients} }},
	}
	for _, way := range ways {
		for _, b := range bases {
			t.Run(way.name+"/"+b.name, func(t *testing.T) {
				srvs := []*httptest.Server{okServer(t), okServer(t), okServer(t)}
				var peers []*balancer.Peer
				for _, s := range srvs {
					peers = append(peers, balancer.NewPeer(s.Listener.Addr().String()))
				}
				p, err := balancer.NewRoundRobin(peers)
				require.NoError(t, err)
				client, url, closeIdle := way.client(t, p, b.base())
				before := settledGoroutines()

				failed := clientLoop(requests, clients, func() error {
					resp, err := client.Get(url)
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					return err
				})
				require.Zero(t, failed, "requests failed")
				during := runtime.NumGoroutine()
				// The connections are kept: without this the test would
				// prove nothing.
				require.Greater(t, during, before+clients, "goroutines with the connections kept alive (%d before)", before)

				closeIdle()
				assert.Eventually(t, func() bool { return runtime.NumGoroutine() <= before+slack },
					5*time.Second, 10*time.Millisecond, "goroutines back to %d+%d after closing the idle connections (%d with them)", before, slack, during)
				t.Logf("goroutines: %d before, %d with the connections kept, %d after closing them", before, during, runtime.NumGoroutine())
			})
		}
	}
}

// settledGoroutines returns the goroutine count once the goroutines of
// earlier tests' connections have ended, waiting at most 2 s.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		m := runtime.NumGoroutine()
		if m >= n {
			return min(m, n)
		}
		n = m
	}
	return n
}
