package balancerhttp_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// brownout starts n backends that answer 503 to everything, with peers
// that never go out (max_fails 0), so only a retry budget stops the
// retries, and returns the attempts they answer.
func brownout(t *testing.T, n int) (*atomic.Int64, balancer.Balancer) {
	t.Helper()
	bs := make([]*backend, n)
	for i := range bs {
		bs[i] = newBackend(t, string(rune('a'+i)))
		bs[i].status.Store(http.StatusServiceUnavailable)
	}
	var hits atomic.Int64
	for _, b := range bs {
		h := b.srv.Config.Handler
		b.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			h.ServeHTTP(w, r)
		})
	}
	bal, err := balancer.NewRoundRobin(peersOf(bs, balancer.MaxFails(0)))
	require.NoError(t, err)
	return &hits, bal
}

// TestRetryBudget_endToEnd sends requests from 16 clients at once through
// one Transport, then through one Proxy, over five backends that all
// answer 503. Without a budget each request tries every backend: 5
// attempts a request. With Finagle's budget (ratio 0.2, 10/s over 10 s,
// on the real clock), a run that ends within the first 9 s lies in one
// window (the budget's tenths 0 to 8), so its retries are at most 0.2 ×
// requests + 10 × 10: attempts / requests ≤ 1 + 0.2 + 100 / requests =
// 1.3 for 1000 requests. And since every request ends on a refusal or on
// the tries running out, the last refusal found the reserve spent: at
// least 100 retries.
func TestRetryBudget_endToEnd(t *testing.T) {
	const requests, clients, peers = 1000, 16, 5
	for _, via := range []string{"Transport", "Proxy"} {
		t.Run(via, func(t *testing.T) {
			run := func(t *testing.T, budget *retrybudget.Budget) (attempts int64, elapsed time.Duration) {
				hits, bal := brownout(t, peers)
				var get func() error
				var refused, exhausted atomic.Int64
				if via == "Transport" {
					client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: bal, RetryBudget: budget}}
					get = func() error {
						resp, err := client.Get("http://service/")
						if err == nil {
							resp.Body.Close()
							return errors.New("a response")
						}
						var se *balancerhttp.StatusError
						switch {
						case !errors.As(err, &se) || se.StatusCode != http.StatusServiceUnavailable:
							t.Errorf("error without the 503: %v", err)
						case errors.Is(err, balancer.ErrRetryBudget):
							refused.Add(1)
						case errors.Is(err, balancer.ErrTriesExhausted):
							exhausted.Add(1)
						default:
							t.Errorf("unexpected error: %v", err)
						}
						return err
					}
				} else {
					front := httptest.NewServer(&balancerhttp.Proxy{Picker: bal, RetryBudget: budget})
					t.Cleanup(front.Close)
					client := &http.Client{Timeout: 5 * time.Second}
					get = func() error {
						resp, err := client.Get(front.URL)
						if err != nil {
							t.Errorf("proxy: %v", err)
							return err
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						resp.Body.Close()
						if resp.StatusCode != http.StatusServiceUnavailable {
							t.Errorf("proxy answered %d, not the backends' 503", resp.StatusCode)
						}
						return nil
					}
				}
				start := time.Now()
				clientLoop(requests, clients, get)
				if via == "Transport" {
					assert.EqualValues(t, requests, refused.Load()+exhausted.Load())
					if budget == nil {
						assert.Zero(t, refused.Load())
					}
				}
				return hits.Load(), time.Since(start)
			}

			without, _ := run(t, nil)
			assert.EqualValues(t, requests*peers, without, "without a budget every request tries every backend")
			t.Logf("without a budget: %d attempts for %d requests, %.2f a request", without, requests, float64(without)/requests)

			b, err := retrybudget.New(retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow)
			require.NoError(t, err)
			with, elapsed := run(t, b)
			require.Less(t, elapsed, 9*time.Second, "the derivation needs the run inside one window")
			reserve := retrybudget.DefaultMinPerSecond * retrybudget.DefaultWindow.Seconds()
			bound := 1 + retrybudget.DefaultRatio + reserve/requests
			t.Logf("with Finagle's budget: %d attempts for %d requests in %v, %.3f a request (bound %.3f)", with, requests, elapsed.Round(time.Millisecond), float64(with)/requests, bound)
			assert.LessOrEqual(t, float64(with), requests*(1+retrybudget.DefaultRatio)+reserve, "attempts: requests × bound")
			assert.GreaterOrEqual(t, float64(with-requests), reserve, "the reserve is spent")
			st := b.Stats()
			assert.EqualValues(t, requests, st.Deposits)
			assert.EqualValues(t, with-requests, st.Retries, "the budget's retries are the backends' attempts after the first of each request")
			assert.Positive(t, st.Refused)
		})
	}
}

// TestRetryBudget_empty: a budget that allows no retry (ratio 0, minimum
// 0) makes each request one attempt. The Transport's error matches
// ErrRetryBudget and the attempt's 503; the Proxy passes the 503 on, as
// when the tries run out.
func TestRetryBudget_empty(t *testing.T) {
	hits, bal := brownout(t, 3)
	none, err := retrybudget.New(0, 0, time.Second)
	require.NoError(t, err)

	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: bal, RetryBudget: none}}
	_, err = client.Get("http://service/")
	require.ErrorIs(t, err, balancer.ErrRetryBudget)
	var se *balancerhttp.StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, http.StatusServiceUnavailable, se.StatusCode)
	assert.Contains(t, err.Error(), "retry refused by the retry budget after 1 attempt")
	assert.EqualValues(t, 1, hits.Load())

	front := httptest.NewServer(&balancerhttp.Proxy{Picker: bal, RetryBudget: none})
	defer front.Close()
	resp, err := http.Get(front.URL)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "the backend's own 503: %s", body)
	assert.EqualValues(t, 2, hits.Load())
	assert.Equal(t, retrybudget.Stats{Deposits: 2, Refused: 2}, none.Stats())
}

// TestRetryBudget_refusedKeepsBody: the Transport asks the budget before
// it rewinds the body, so a refused retry never calls Request.GetBody; an
// allowed one calls it once per retry. Three backends answer 503 to a PUT
// (retried: idempotent) with a body.
func TestRetryBudget_refusedKeepsBody(t *testing.T) {
	for _, tc := range []struct {
		name     string
		reserve  float64 // retries a second, over a 1 s window
		getBody  int64
		attempts int64
	}{{"refused", 0, 0, 1}, {"two allowed", 2, 2, 3}} {
		t.Run(tc.name, func(t *testing.T) {
			hits, bal := brownout(t, 3)
			budget, err := retrybudget.New(0, tc.reserve, time.Second)
			require.NoError(t, err)
			client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: bal, RetryBudget: budget}}
			req, err := http.NewRequest(http.MethodPut, "http://service/", strings.NewReader("payload"))
			require.NoError(t, err)
			var rewinds atomic.Int64
			getBody := req.GetBody
			req.GetBody = func() (io.ReadCloser, error) { rewinds.Add(1); return getBody() }
			_, err = client.Do(req)
			require.Error(t, err)
			assert.Equal(t, tc.getBody, rewinds.Load(), "GetBody calls")
			assert.Equal(t, tc.attempts, hits.Load())
		})
	}
}
