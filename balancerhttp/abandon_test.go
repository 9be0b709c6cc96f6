package balancerhttp_test

import (
	"context"
	"io"
	"math"
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

// stallServer answers nothing until the request's context ends (the
// caller gave up) or 2 s pass, whichever is first.
func stallServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func okServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(srv.Close)
	return srv
}

// clientLoop runs n requests from `clients` goroutines, each made by do,
// and returns how many failed.
func clientLoop(n, clients int, do func() error) int {
	var failed atomic.Int64
	var wg sync.WaitGroup
	jobs := make(chan struct{})
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				if do() != nil {
					failed.Add(1)
				}
			}
		}()
	}
	for range n {
		jobs <- struct{}{}
	}
	close(jobs)
	wg.Wait()
	return int(failed.Load())
}

// TestAbandoned_stalledBackendAvoided is the regression test for attempts
// whose client gave up: two fast backends and one that stalls until the
// caller goes away, clients that give up after 30 ms, through the Proxy
// and through the Transport. Every attempt on the stalled backend must be
// reported Abandoned (not a failure, not a success as fast as the
// caller's patience); the latency-aware pickers
// must send the stalled backend under 2% of the attempts (the issue's
// threshold: its first attempt and a few probes); and FastestFirst must
// hold its derived weight at its lowest, see stalledWeightBound.
//
// The pickers run on the real clock: the latencies are real ones. Under
// the race detector the patience is 150 ms, for the same ratio to the
// fast replies.
func TestAbandoned_stalledBackendAvoided(t *testing.T) {
	const (
		requests = 1000
		clients  = 2
		patience = 30 * time.Millisecond * raceSlowdown
	)
	ways := []struct {
		name string
		// client returns the client whose requests p balances, and the
		// URL to ask.
		client func(t *testing.T, p balancer.Picker, base *http.Transport) (*http.Client, string)
	}{
		{"Proxy", func(t *testing.T, p balancer.Picker, base *http.Transport) (*http.Client, string) {
			front := httptest.NewServer(&balancerhttp.Proxy{Picker: p, Transport: base, ErrorLog: quietLog})
			t.Cleanup(front.Close)
			return &http.Client{Timeout: patience}, front.URL
		}},
		{"Transport", func(t *testing.T, p balancer.Picker, base *http.Transport) (*http.Client, string) {
			return &http.Client{Timeout: patience, Transport: &balancerhttp.Transport{Picker: p, Base: base}}, "http://backends/"
		}},
	}
	for _, name := range []string{"FastestFirst", "P2CPeakEWMA"} {
		for _, way := range ways {
			t.Run(name+"/"+way.name, func(t *testing.T) {
				stalled := stallServer(t)
				fast := []*httptest.Server{okServer(t), okServer(t)}
				stalledAddr := stalled.Listener.Addr().String()
				peers := []*balancer.Peer{
					balancer.NewPeer(fast[0].Listener.Addr().String()),
					balancer.NewPeer(stalledAddr),
					balancer.NewPeer(fast[1].Listener.Addr().String()),
				}
				a, err := balancer.AlgorithmNamed(name)
				require.NoError(t, err)
				p, err := a.New(peers)
				require.NoError(t, err)
				tl := newTally(p)
				// Open the connections to the fast backends first, so
				// that no measured attempt includes a dial.
				base := http.DefaultTransport.(*http.Transport).Clone()
				warm(t, base, clients, fast...)
				client, url := way.client(t, tl, base)
				began := time.Now()
				clientLoop(requests, clients, func() error {
					resp, err := client.Get(url)
					if err != nil {
						return err
					}
					_, err = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					return err
				})
				waitSettled(t, tl)
				elapsed := time.Since(began)

				picks, dones, failed := tl.snapshot()
				abandoned, slowest, quickestAbandoned := tl.latencies()
				total := 0
				for _, n := range picks {
					total += n
				}
				t.Logf("attempts %v of %d in %v, abandoned %v, slowest %v", picks, total, elapsed, abandoned, slowest)
				assert.Equal(t, picks, dones, "every attempt reported")
				assert.Empty(t, failed, "a caller giving up is no failure of the backend")
				// Every attempt on the stalled backend was abandoned (a
				// fast one may be too, on a loaded machine).
				assert.Equal(t, picks[stalledAddr], abandoned[stalledAddr], "stalled backend's attempts reported Abandoned")
				assert.Less(t, float64(picks[stalledAddr]), 0.02*float64(total), "stalled backend's share of attempts")
				if name == "FastestFirst" {
					fastest := min(slowest[peers[0].Addr()], slowest[peers[2].Addr()])
					bound := stalledWeightBound(fastest, quickestAbandoned[stalledAddr], elapsed)
					t.Logf("fastest peer's slowest reply %v: the stalled peer's weight is at most %d", fastest, bound)
					assert.LessOrEqual(t, peers[1].State().DerivedWeight, bound, "stalled backend's derived weight")
				}
			})
		}
	}
}

// stalledWeightBound returns the largest weight FastestFirst, with its
// default options, may derive for a peer whose only replies were abandoned
// after at least waited, while the other peers replied in at most fastest,
// over a run of elapsed. Its law 1: a peer whose estimate e exceeds the
// tolerance (3) times the fastest estimate m gets 100·(3·m/e)^2, rounded,
// at least the floor, 1. A peak EWMA never exceeds its slowest sample, so
// m <= fastest. An abandoned attempt raises e to at least waited, and
// between replies e decays toward m by exp(-Δt/5 s), so
// e >= waited·exp(-elapsed/5 s). Weights are recomputed only when an
// estimate leaves the band (1.25) around the one it was computed from, so
// the ratio may be stale by that factor. Hence the bound
// max(1, ceil(100·(3·1.25·m/e)^2)): the floor, 1, whenever the fast
// backends never took more than waited/37.5 (0.8 ms for 30 ms) to reply,
// and some more when the machine is loaded enough to delay them.
func stalledWeightBound(fastest, waited, elapsed time.Duration) int {
	const (
		tolerance = 3.0
		band      = 1.25
		decay     = 5 * time.Second
		floor     = 1
	)
	e := float64(waited) * math.Exp(-float64(elapsed)/float64(decay))
	r := tolerance * band * float64(fastest) / e
	return max(floor, int(math.Ceil(100*r*r)))
}

// waitSettled waits, up to 2 s, until every attempt picked has been
// reported: the proxy learns of a client's departure shortly after the
// client's own timeout fires.
func waitSettled(t *testing.T, tl *tally) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for {
		picks, dones, _ := tl.snapshot()
		if equalCounts(picks, dones) || ctx.Err() != nil {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// warm opens n kept-alive connections from tr to each server.
func warm(t *testing.T, tr *http.Transport, n int, srvs ...*httptest.Server) {
	t.Helper()
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	for _, srv := range srvs {
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := c.Get(srv.URL)
				if assert.NoError(t, err) {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		wg.Wait()
	}
}
