package balancerhttp_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// TestGuards_allTogetherEndToEnd runs every guard on one picker behind a
// Transport with a retry budget and a health checker, over three loopback
// backends that answer 503 (health path included) and then recover, with
// eight clients at once that time out and give up. During the outage the
// checker takes every peer down; after recovery it brings them back (in
// slow start, still inside their fail windows, which panic mode
// ignores), and within a bounded time every client's GETs succeed again.
func TestGuards_allTogetherEndToEnd(t *testing.T) {
	for _, tc := range []struct {
		name string
		cap  []balancer.Option
	}{
		{"all", []balancer.Option{balancer.WithMaxEjectionPercent(50)}},
		{"noCap", nil}, // every peer may go out: panic mode engages
	} {
		t.Run(tc.name, func(t *testing.T) { guardsEndToEnd(t, tc.cap) })
	}
}

func guardsEndToEnd(t *testing.T, opts []balancer.Option) {
	var bs []*backend
	var peers []*balancer.Peer
	for i := range 3 {
		b := newBackend(t, fmt.Sprint("b", i))
		b.status.Store(http.StatusServiceUnavailable)
		bs = append(bs, b)
		peers = append(peers, balancer.NewPeer(b.addr, balancer.FailTimeout(time.Second), balancer.MaxFails(2)))
	}
	picker, err := balancer.NewSmoothWRR(peers, append([]balancer.Option{
		balancer.WithPanicThreshold(50),
		balancer.WithEjectionBackoff(4 * time.Second), balancer.WithSlowStart(time.Second, 1, 10),
		balancer.WithSuccessRateEjection(balancer.SuccessRateEjection{Interval: 200 * time.Millisecond, RequestVolume: 5, MinimumHosts: 3})}, opts...)...)
	require.NoError(t, err)
	var downs, ups atomic.Int64
	hc, err := balancerhttp.NewHealthChecker(picker, balancerhttp.HealthPath("/health"),
		balancerhttp.HealthInterval(30*time.Millisecond), balancerhttp.HealthRise(2), balancerhttp.HealthFall(2),
		balancerhttp.HealthOnChange(func(_ *balancer.Peer, down bool) {
			if down {
				downs.Add(1)
			} else {
				ups.Add(1)
			}
		}))
	require.NoError(t, err)
	defer hc.Close()
	budget, err := retrybudget.New(retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow)
	require.NoError(t, err)
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker, RetryBudget: budget}, Timeout: 2 * time.Second}

	run := func(d time.Duration) (ok, failed int) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		deadline := time.Now().Add(d)
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for n := 0; n < 200 && time.Now().Before(deadline); n++ {
					code, err := get(client)
					mu.Lock()
					if err == nil && code == http.StatusOK {
						ok++
					} else {
						failed++
					}
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
				}
			}()
		}
		wg.Wait()
		return ok, failed
	}
	ok, failed := run(300 * time.Millisecond)
	require.Zero(t, ok, "every backend answers 503")
	require.NotZero(t, failed)
	require.Eventually(t, func() bool { return downs.Load() == 3 }, 5*time.Second, 10*time.Millisecond, "the checker takes every peer down")

	for _, b := range bs {
		b.status.Store(http.StatusOK)
	}
	require.Eventually(t, func() bool { return ups.Load() == 3 }, 5*time.Second, 10*time.Millisecond, "the checker brings every peer back")
	ok, failed = run(500 * time.Millisecond)
	t.Logf("after recovery: %d ok, %d failed; panics %d, capped %d, outliers %d, budget %+v",
		ok, failed, picker.PanicCount(), picker.EjectionCappedCount(), picker.OutlierEjectionCount(), budget.Stats())
	require.NotZero(t, ok)
	require.Zero(t, failed, "once the checker has every peer up, no GET fails")
}
