package balancerhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// panicFailTimeout is the peers' fail_timeout in the panic tests: short,
// on the real clock, so that the run without panic mode, which waits it
// out, stays short.
const panicFailTimeout = 2 * time.Second

// outage starts three loopback backends that answer 503 and a picker of
// algorithm name over them (max_fails 1, fail_timeout panicFailTimeout,
// the real clock) built with opts; it returns them and the peers.
func outage(t *testing.T, name string, opts ...balancer.Option) ([]*backend, balancer.Balancer) {
	t.Helper()
	a, err := balancer.AlgorithmNamed(name)
	require.NoError(t, err)
	var bs []*backend
	var peers []*balancer.Peer
	for i := range 3 {
		b := newBackend(t, fmt.Sprint("b", i))
		b.status.Store(http.StatusServiceUnavailable)
		bs = append(bs, b)
		peers = append(peers, balancer.NewPeer(b.addr, balancer.FailTimeout(panicFailTimeout)))
	}
	p, err := a.New(peers, opts...)
	require.NoError(t, err)
	return bs, p
}

// get sends one GET through client and returns its status, or its error.
func get(client *http.Client) (int, error) {
	resp, err := client.Get("http://service/")
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// TestPanic_endToEnd is the outage of the issue over real HTTP servers:
// three backends answer 503 to everything; one GET through the Transport
// tries all three (its tries exhausted), which takes the whole pool out
// (max_fails 1). Then the backends recover. With WithPanicThreshold(50)
// (no peer of three eligible, 0% < 50%) the next GET succeeds at once, and
// so do the 20 after it, for every picker of the registry: each success
// on a peer out readmits it; with two of three back (67%) panic is over
// and the third waits out its window while the two serve. The same
// through balancer.Do.
func TestPanic_endToEnd(t *testing.T) {
	for _, a := range balancer.Algorithms() {
		t.Run(a.Name, func(t *testing.T) {
			var kinds []balancer.EventKind
			bs, p := outage(t, a.Name, balancer.WithPanicThreshold(50), balancer.WithEvents(func(e balancer.Event) {
				if e.Kind == balancer.EventPanic || e.Kind == balancer.EventPanicOver {
					kinds = append(kinds, e.Kind)
				}
			}))
			client := &http.Client{Transport: &balancerhttp.Transport{Picker: p}, Timeout: 5 * time.Second}
			code, err := get(client)
			require.True(t, err != nil || code != http.StatusOK, "the outage's GET: %d, %v", code, err)
			for _, b := range bs {
				require.Equal(t, int64(1), b.hits.Load(), "one attempt on each backend")
			}
			for _, q := range p.Peers() {
				require.Equal(t, balancer.HealthFailed, q.Stats().Health, "%s out", q)
			}
			for _, b := range bs {
				b.status.Store(0)
			}
			start := time.Now()
			for i := range 21 {
				code, err := get(client)
				require.NoError(t, err, "GET %d after the recovery", i)
				require.Equal(t, http.StatusOK, code, "GET %d after the recovery", i)
			}
			assert.Less(t, time.Since(start), panicFailTimeout, "served before any fail window ended")
			// Panic ends with the second peer readmitted; a picker that
			// keeps to one peer (IPHash, which sees no client address here,
			// FastestFirst, which prefers the one it measured) stays in it.
			readmitted := 0
			for _, q := range p.Peers() {
				if q.Stats().Fails == 0 {
					readmitted++
				}
			}
			want := []balancer.EventKind{balancer.EventPanic}
			if readmitted >= 2 {
				want = append(want, balancer.EventPanicOver)
			}
			assert.Equal(t, want, kinds, "%d readmitted", readmitted)

			// balancer.Do, on a fresh outage.
			bs, p = outage(t, a.Name, balancer.WithPanicThreshold(50))
			try := func(ctx context.Context, peer *balancer.Peer) error {
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+peer.Addr()+"/", nil)
				if err != nil {
					return err
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return err
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			require.ErrorIs(t, balancer.Do(context.Background(), p, nil, try), balancer.ErrTriesExhausted)
			for _, b := range bs {
				b.status.Store(0)
			}
			for i := range 21 {
				require.NoError(t, balancer.Do(context.Background(), p, nil, try), "Do %d after the recovery", i)
			}
		})
	}
}

// TestPanic_endToEndWithout measures the same outage without panic mode,
// nginx's behaviour, with SmoothWRR (nginx's default method): after the
// recovery every GET fails with "no live peer" until the first fail
// window ends, panicFailTimeout after the outage's GET; the first success
// comes then. GETs every 50 ms, bounded by 3 fail_timeouts.
func TestPanic_endToEndWithout(t *testing.T) {
	bs, p := outage(t, "SmoothWRR")
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: p}, Timeout: 5 * time.Second}
	code, err := get(client)
	require.True(t, err != nil || code != http.StatusOK)
	failedAt := time.Now()
	for _, b := range bs {
		b.status.Store(0)
	}
	var noLive, other int
	var first time.Duration
	for time.Since(failedAt) < 3*panicFailTimeout {
		code, err := get(client)
		if err == nil && code == http.StatusOK {
			first = time.Since(failedAt)
			break
		}
		if errors.Is(err, balancer.ErrNoLivePeer) {
			noLive++
		} else {
			other++
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("without panic mode: %d GETs failed with no live peer, %d otherwise; first success %v after the outage (fail_timeout %v)", noLive, other, first, panicFailTimeout)
	require.NotZero(t, first, "a GET succeeded within 3 fail_timeouts")
	assert.GreaterOrEqual(t, first, panicFailTimeout, "no success before the fail window ended")
	assert.Zero(t, other)
	assert.Positive(t, noLive)
}
