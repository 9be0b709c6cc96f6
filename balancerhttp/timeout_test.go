package balancerhttp_test

import (
	"bytes"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// timeouts sets the per-attempt timeouts of a Transport or a Proxy.
type timeouts struct{ connect, read time.Duration }

// timeoutsOrNot runs a test without per-attempt timeouts and with timeouts
// that do not expire: the rules must not change when they are set.
var timeoutsOrNot = []struct {
	name string
	timeouts
}{
	{"no timeouts", timeouts{}},
	{"timeouts", timeouts{connect: 5 * time.Second, read: 5 * time.Second}},
}

// balanced is one way to balance a client's requests: it returns the
// client and the URL to ask.
type balanced struct {
	name   string
	client func(t *testing.T, p balancer.Picker, to timeouts, patience time.Duration) (*http.Client, string)
}

var bothWays = []balanced{
	{"Transport", func(t *testing.T, p balancer.Picker, to timeouts, patience time.Duration) (*http.Client, string) {
		tr := &balancerhttp.Transport{Picker: p, ConnectTimeout: to.connect, ReadTimeout: to.read}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Timeout: patience, Transport: tr}, "http://backends/"
	}},
	{"Proxy", func(t *testing.T, p balancer.Picker, to timeouts, patience time.Duration) (*http.Client, string) {
		proxy := &balancerhttp.Proxy{Picker: p, ConnectTimeout: to.connect, ReadTimeout: to.read, ErrorLog: quietLog}
		front := httptest.NewServer(proxy)
		t.Cleanup(front.Close)
		t.Cleanup(proxy.CloseIdleConnections)
		return &http.Client{Timeout: patience, Transport: &http.Transport{}}, front.URL
	}},
}

// TestReadTimeout_stallingBackendFails is the regression test for
// timeouts that did not count: three backends, the middle one stalling
// (2 s, or until its caller goes), four clients at once, max_fails 1 and
// fail_timeout 10 s on the picker's clock, for the pickers the issue named.
//
// With a ReadTimeout (250 ms) shorter than the clients' patience, an
// attempt on the stalled backend is a failure of the peer: the request
// goes on to the next backend and gets its 200, and the stalled backend
// gets no attempt once its failure is reported, so at most one per client,
// in flight when the first one failed; after its fail window passes on the
// clock, it gets one probe per client at most again, which fails again.
//
// With clients whose patience runs out before the ReadTimeout, the
// clients' own deadline: every attempt on the stalled backend is
// Abandoned, none a failure, and each of them fails its request: the
// peer is not to blame for the caller's deadline, so it stays eligible
// (RoundRobin and SmoothWRR keep sending it one request in three;
// LeastConn fewer, as the attempts that wait on it count).
func TestReadTimeout_stallingBackendFails(t *testing.T) {
	const (
		clients = 4
		// Far above a loopback answer even on a loaded machine, far
		// below the stall.
		readTimeout = 250 * time.Millisecond
	)
	for _, name := range []string{"RoundRobin", "SmoothWRR", "LeastConn"} {
		for _, way := range bothWays {
			t.Run(name+"/"+way.name+"/ReadTimeout", func(t *testing.T) {
				const requests = 200
				p, tl, clk, stalled := stalledTrio(t, name)
				client, url := way.client(t, tl, timeouts{read: readTimeout}, 5*time.Second)
				for round := range 2 {
					bad, errs := getAllFrom(client, url, requests, clients)
					assert.Zero(t, bad, "requests without a 200: %v", errs)
					waitSettled(t, tl)
					picks, dones, failed := tl.snapshot()
					abandoned, _, _ := tl.latencies()
					t.Logf("round %d: attempts %v, failed %v", round, picks, failed)
					assert.Equal(t, picks, dones, "every attempt reported")
					assert.Equal(t, picks[stalled], failed[stalled], "the stalled backend's attempts are failures")
					assert.Zero(t, abandoned[stalled], "no attempt abandoned: the clients waited")
					assert.LessOrEqual(t, picks[stalled], clients*(round+1), "the stalled backend's attempts")
					assert.Positive(t, peerAt(p, stalled).State().Fails, "the stalled peer's failures counted")
					clk.add(11 * time.Second) // past the fail window: the next round probes it
				}
			})
			t.Run(name+"/"+way.name+"/caller's deadline", func(t *testing.T) {
				const requests = 60
				_, tl, _, stalled := stalledTrio(t, name)
				client, url := way.client(t, tl, timeouts{read: time.Second}, 50*time.Millisecond*raceSlowdown)
				bad, _ := getAllFrom(client, url, requests, clients)
				waitSettled(t, tl)
				picks, dones, failed := tl.snapshot()
				abandoned, _, _ := tl.latencies()
				t.Logf("attempts %v, failed %v, abandoned %v", picks, failed, abandoned)
				assert.Equal(t, picks, dones, "every attempt reported")
				assert.Empty(t, failed, "the caller's deadline is no failure of the peer")
				assert.Equal(t, picks[stalled], abandoned[stalled], "the stalled backend's attempts are abandoned")
				// On a loaded machine a fast backend's answer may come
				// too late as well.
				assert.GreaterOrEqual(t, bad, picks[stalled], "each request sent to the stalled backend timed out")
				assert.Positive(t, picks[stalled], "the stalled backend was tried")
				if name != "LeastConn" {
					// Equal weights in turn, one attempt per request
					// (an abandoned one is not retried): a third each.
					total := 0
					for _, n := range picks {
						total += n
					}
					assert.InDelta(t, float64(total)/3, picks[stalled], 1, "the stalled backend's share of %d attempts", total)
				}
			})
		}
	}
}

// stalledTrio starts three backends, the middle one stalling, and returns
// the named picker over them on a test clock (counted by a tally), the
// clock and the stalled backend's address.
func stalledTrio(t *testing.T, name string) (balancer.Balancer, *tally, *clock, string) {
	t.Helper()
	srvs := []*httptest.Server{okServer(t), stallServer(t), okServer(t)}
	var peers []*balancer.Peer
	for _, s := range srvs {
		peers = append(peers, balancer.NewPeer(s.Listener.Addr().String()))
	}
	a, err := balancer.AlgorithmNamed(name)
	require.NoError(t, err)
	clk := newClock()
	p, err := onClock(a, peers, clk)
	require.NoError(t, err)
	return p, newTally(p), clk, peers[1].Addr()
}

// getAllFrom sends n GETs to url from `clients` goroutines and returns how
// many did not end in a 200 read whole.
func getAllFrom(client *http.Client, url string, n, clients int) (bad int, errs []error) {
	errc := make(chan error, n)
	clientLoop(n, clients, func() error {
		resp, err := client.Get(url)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != http.StatusOK {
				err = errors.New(resp.Status)
			}
		}
		if err != nil {
			errc <- err
		}
		return err
	})
	close(errc)
	for err := range errc {
		errs = append(errs, err)
	}
	return len(errs), errs
}

// TestReadTimeout_body: ReadTimeout bounds each read of the body too, as
// nginx's proxy_read_timeout bounds the time between two reads: a backend
// that sends its headers and part of its body, then stalls, fails the
// read with ErrReadTimeout, and its attempt is a failure.
func TestReadTimeout_body(t *testing.T) {
	stall := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "partial")
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-time.After(2 * time.Second):
		}
	}))
	t.Cleanup(stall.Close)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(stall.Listener.Addr().String())})
	require.NoError(t, err)
	tl := newTally(p)
	tr := &balancerhttp.Transport{Picker: tl, ReadTimeout: 250 * time.Millisecond}
	defer tr.CloseIdleConnections()
	client := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	resp, err := client.Get("http://backends/")
	require.NoError(t, err, "the headers came in time")
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, "partial", string(got))
	assert.ErrorIs(t, err, balancerhttp.ErrReadTimeout)
	assert.Contains(t, err.Error(), stall.Listener.Addr().String(), "the error names the peer")
	_, dones, failed := tl.snapshot()
	assert.Equal(t, 1, dones[stall.Listener.Addr().String()])
	assert.Equal(t, 1, failed[stall.Listener.Addr().String()], "a read timeout is a failure")
}

// resetServer reads each request and closes its connection without an
// answer: the attempt fails after the backend saw the request.
func resetServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestNotRetried_reasons: an attempt that fails and is not retried says
// why, in the error's text and for errors.Is: the method is not
// idempotent, the body cannot be rewound, or the tries ran out. Backends
// that close the connection on every request (and, for the timeout, one
// that stalls); SmoothWRR over equal weights tries them in order.
func TestNotRetried_reasons(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		body      string
		noGetBody bool
		backends  int // resetServers; 0: one stallServer
		set       func(*balancerhttp.Transport)
		attempts  int
		wantErrs  []error
		wantText  []string
	}{
		{name: "POST", method: "POST", body: "x", backends: 2, attempts: 1,
			wantErrs: []error{balancerhttp.ErrNotIdempotent, io.EOF},
			wantText: []string{"not retried: method not idempotent (POST without Idempotency-Key) after 1 attempt: "}},
		{name: "PATCH after a read timeout", method: "PATCH", set: func(tr *balancerhttp.Transport) { tr.ReadTimeout = 20 * time.Millisecond },
			attempts: 1, wantErrs: []error{balancerhttp.ErrNotIdempotent, balancerhttp.ErrReadTimeout},
			wantText: []string{"not retried: method not idempotent (PATCH", "timed out reading from the peer (ReadTimeout 20ms)"}},
		{name: "PUT without GetBody", method: "PUT", body: "x", noGetBody: true, backends: 2, attempts: 1,
			wantErrs: []error{balancerhttp.ErrBodyNotRewindable},
			wantText: []string{"not retried: body not rewindable (no Request.GetBody) after 1 attempt: "}},
		{name: "GET with MaxTries 1", method: "GET", backends: 2, set: func(tr *balancerhttp.Transport) { tr.MaxTries = 1 }, attempts: 1,
			wantErrs: []error{balancer.ErrTriesExhausted},
			wantText: []string{"MaxTries 1: balancer: tries exhausted after 1 attempt: "}},
		{name: "GET on every peer", method: "GET", backends: 2, attempts: 2,
			wantErrs: []error{balancer.ErrTriesExhausted},
			wantText: []string{"balancer: tries exhausted after 2 attempts: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var peers []*balancer.Peer
			if tt.backends == 0 {
				peers = append(peers, balancer.NewPeer(stallServer(t).Listener.Addr().String()), balancer.NewPeer(okServer(t).Listener.Addr().String()))
			}
			for range tt.backends {
				peers = append(peers, balancer.NewPeer(resetServer(t).Listener.Addr().String()))
			}
			p, err := balancer.NewSmoothWRR(peers)
			require.NoError(t, err)
			tl := newTally(p)
			tr := &balancerhttp.Transport{Picker: tl}
			if tt.set != nil {
				tt.set(tr)
			}
			defer tr.CloseIdleConnections()
			req := newRequest(t, tt.method, "http://service/x", tt.body, nil, tt.name)
			if tt.noGetBody {
				req.GetBody = nil
			}
			_, err = (&http.Client{Timeout: 5 * time.Second, Transport: tr}).Do(req)
			require.Error(t, err)
			for _, want := range tt.wantErrs {
				assert.ErrorIs(t, err, want)
			}
			for _, want := range tt.wantText {
				assert.Contains(t, err.Error(), want)
			}
			var rt *balancerhttp.RoundTripError
			require.ErrorAs(t, err, &rt)
			assert.Len(t, rt.Attempts, tt.attempts)
			n, f := tl.totals()
			assert.Equal(t, tt.attempts, n, "attempts")
			assert.Equal(t, tt.attempts, f, "attempts reported failed")
		})
	}
}

// TestProxy_notRetriedReasons: the Proxy's 502 after an attempt it did not
// retry logs why.
func TestProxy_notRetriedReasons(t *testing.T) {
	tests := []struct {
		name     string
		method   string
		body     string
		maxTries int
		maxBody  int64
		attempts int
		wantLog  string
	}{
		{"POST", "POST", "x", 0, 0, 1, "not retried: method not idempotent (POST without Idempotency-Key) after 1 attempt: "},
		{"PUT over MaxReplayBody", "PUT", strings.Repeat("x", 100), 0, 10, 1, "not retried: body not rewindable (over MaxReplayBody 10) after 1 attempt: "},
		{"PUT with MaxReplayBody -1", "PUT", "x", 0, -1, 1, "not retried: body not rewindable (MaxReplayBody -1) after 1 attempt: "},
		{"GET with MaxTries 1", "GET", "", 1, 0, 1, "balancer: tries exhausted after 1 attempt: "},
		{"GET on every peer", "GET", "", 0, 0, 2, "balancer: tries exhausted after 2 attempts: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var peers []*balancer.Peer
			for range 2 {
				peers = append(peers, balancer.NewPeer(resetServer(t).Listener.Addr().String()))
			}
			p, err := balancer.NewSmoothWRR(peers)
			require.NoError(t, err)
			tl := newTally(p)
			var logged bytes.Buffer
			proxy := &balancerhttp.Proxy{Picker: tl, MaxTries: tt.maxTries, MaxReplayBody: tt.maxBody, ErrorLog: log.New(&logged, "", 0)}
			front := httptest.NewServer(proxy)
			defer front.Close()
			defer proxy.CloseIdleConnections()
			req := newRequest(t, tt.method, front.URL+"/x", tt.body, nil, tt.name)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
			assert.Contains(t, logged.String(), tt.wantLog)
			assert.Contains(t, logged.String(), peers[0].Addr(), "names the peer")
			n, f := tl.totals()
			assert.Equal(t, tt.attempts, n, "attempts")
			assert.Equal(t, tt.attempts, f, "attempts reported failed")
		})
	}
}

// TestProxy_heldResponseWithTimeouts: with per-attempt timeouts set, the
// last failed response, passed on when the tries run out, arrives whole,
// a body larger than the socket buffers included: its attempt's context
// lives until it has been copied.
func TestProxy_heldResponseWithTimeouts(t *testing.T) {
	big := strings.Repeat("x", 16<<20) // more than the socket buffers hold
	var peers []*balancer.Peer
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, big)
		}))
		t.Cleanup(srv.Close)
		peers = append(peers, balancer.NewPeer(srv.Listener.Addr().String()))
	}
	p, err := balancer.NewSmoothWRR(peers)
	require.NoError(t, err)
	proxy := &balancerhttp.Proxy{Picker: p, ConnectTimeout: 5 * time.Second, ReadTimeout: 5 * time.Second, ErrorLog: quietLog}
	front := httptest.NewServer(proxy)
	defer front.Close()
	defer proxy.CloseIdleConnections()
	resp, err := http.Get(front.URL)
	require.NoError(t, err)
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	assert.Equal(t, len(big), len(got), "body length")
}

// TestTimeouts_negative: a negative timeout is refused, naming the field.
func TestTimeouts_negative(t *testing.T) {
	ok := okServer(t)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(ok.Listener.Addr().String())})
	require.NoError(t, err)
	tr := &balancerhttp.Transport{Picker: p, ReadTimeout: -time.Second}
	_, err = (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://backends/")
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.ErrorContains(t, err, "Transport.ReadTimeout -1s is negative")

	var logged bytes.Buffer
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: p, ConnectTimeout: -time.Millisecond, ErrorLog: log.New(&logged, "", 0)})
	defer front.Close()
	resp, err := http.Get(front.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, logged.String(), "Proxy.ConnectTimeout -1ms is negative")
}

// TestMaxTries_negative: a negative MaxTries (once no bound) is refused
// by the attempt loop before any pick, with an error naming it: the
// Transport returns it, the Proxy answers 502 and logs it.
func TestMaxTries_negative(t *testing.T) {
	ok := okServer(t)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(ok.Listener.Addr().String())})
	require.NoError(t, err)
	tr := &balancerhttp.Transport{Picker: p, MaxTries: -1}
	_, err = (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Get("http://backends/")
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.ErrorContains(t, err, "MaxTries -1 is negative")

	var logged bytes.Buffer
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: p, MaxTries: -1, ErrorLog: log.New(&logged, "", 0)})
	defer front.Close()
	resp, err := http.Get(front.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, logged.String(), "MaxTries -1 is negative")
	assert.Zero(t, p.Peers()[0].InFlight(), "nothing picked")
}

// TestBaseResponseHeaderTimeout_isFailure: a timeout of Base's own, here
// http.Transport.ResponseHeaderTimeout, is the peer's failure too (the
// caller is still waiting), and the request goes on to the next peer.
func TestBaseResponseHeaderTimeout_isFailure(t *testing.T) {
	stalled, ok := stallServer(t), okServer(t)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(stalled.Listener.Addr().String()), balancer.NewPeer(ok.Listener.Addr().String())})
	require.NoError(t, err)
	tl := newTally(p)
	base := &http.Transport{ResponseHeaderTimeout: 250 * time.Millisecond}
	defer base.CloseIdleConnections()
	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: tl, Base: base}}
	resp, err := client.Get("http://backends/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	_, _, failed := tl.snapshot()
	assert.Equal(t, map[string]int{stalled.Listener.Addr().String(): 1}, failed)
}
