package balancerhttp_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// checkedBackend is a loopback server that answers its health path
// ("/healthz") apart from its traffic: with health (0: 200), or not at
// all until the check gives up while stall is set. It counts both.
type checkedBackend struct {
	addr            string
	health          atomic.Int32
	stall           atomic.Bool
	traffic, checks atomic.Int64
	srv             *httptest.Server
}

func newCheckedBackend(t *testing.T) *checkedBackend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &checkedBackend{addr: ln.Addr().String()}
	b.serve(ln)
	t.Cleanup(b.stop)
	return b
}

func (b *checkedBackend) serve(ln net.Listener) {
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			b.traffic.Add(1)
			_, _ = io.WriteString(w, "ok")
			return
		}
		b.checks.Add(1)
		if b.stall.Load() {
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		if s := int(b.health.Load()); s != 0 {
			w.WriteHeader(s)
		}
	}))
	b.srv.Listener.Close()
	b.srv.Listener = ln
	b.srv.Start()
}

// stop closes the listener and every connection: connections are refused.
func (b *checkedBackend) stop() {
	if b.srv != nil {
		b.srv.CloseClientConnections()
		b.srv.Close()
		b.srv = nil
	}
}

// start listens again on the same address.
func (b *checkedBackend) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", b.addr)
	require.NoError(t, err)
	b.serve(ln)
}

type change struct {
	addr string
	down bool
	at   time.Time
}

// TestHealthChecker_endToEnd runs traffic through a Transport over three
// loopback backends whose peers never go out for their traffic's failures
// (max_fails 0), so only the HealthChecker (interval I = 100 ms, jitter j
// = 0.1, rise 2, fall 3, timeout T = 50 ms, then the default T = I) moves traffic. Backend c goes
// bad three ways: its health path answers 503; it stops listening; its
// health path stalls past the timeout. Each time, c goes down and back up
// within the bound derived from the checker's schedule: a check that began
// before the change may still pass and end up to T after it; each later
// check starts at most I(1+j) after the one before ended and lasts at most
// T. So the Fall-th failing check ends at most T + fall × (I(1+j) + T) =
// 530 ms (730 ms with T = I) after the change, and the Rise-th passing
// one T + rise × (I(1+j) + T) = 370 ms (520 ms) after it, plus the loop's
// own scheduling, allowed 200 ms, and what the machine made the process
// wait while c changed (stallMeter: under -race beside other builds, a
// transition took 1.09 s against the 930 ms bound);
// and c answers Fall (Rise) checks in between, one more at most.
// While c is down, the traffic reaches a and b only; once it is up, c
// gets its share again. The checks count in no peer's attempts.
func TestHealthChecker_endToEnd(t *testing.T) {
	for _, tc := range []struct {
		name     string
		timeout  time.Duration // 0: the default
		down, up time.Duration // the bounds before scheduling
	}{{"timeout 50ms", 50 * time.Millisecond, 530 * time.Millisecond, 370 * time.Millisecond},
		{"default timeout", 0, 730 * time.Millisecond, 520 * time.Millisecond}} {
		t.Run(tc.name, func(t *testing.T) { healthEndToEnd(t, tc.timeout, tc.down, tc.up) })
	}
}

func healthEndToEnd(t *testing.T, timeoutSet, wantDown, wantUp time.Duration) {
	const (
		interval = 100 * time.Millisecond
		jitter   = 0.1
		rise     = 2
		fall     = 3
		sched    = 200 * time.Millisecond
	)
	timeout := timeoutSet
	if timeout == 0 {
		timeout = interval
	}
	step := interval*11/10 + timeout // I(1+j) + T
	require.Equal(t, wantDown, timeout+fall*step, "the derivation's down bound")
	require.Equal(t, wantUp, timeout+rise*step, "the derivation's up bound")
	downBound := timeout + fall*step + sched
	upBound := timeout + rise*step + sched

	a, b, c := newCheckedBackend(t), newCheckedBackend(t), newCheckedBackend(t)
	bs := []*checkedBackend{a, b, c}
	peers := []*balancer.Peer{
		balancer.NewPeer(a.addr, balancer.MaxFails(0)),
		balancer.NewPeer(b.addr, balancer.MaxFails(0)),
		balancer.NewPeer(c.addr, balancer.MaxFails(0)),
	}
	bal, err := balancer.NewRoundRobin(peers)
	require.NoError(t, err)
	changes := make(chan change, 16)
	opts := []balancerhttp.HealthOption{
		balancerhttp.HealthPath("/healthz"), balancerhttp.HealthInterval(interval), balancerhttp.HealthJitter(jitter),
		balancerhttp.HealthRise(rise), balancerhttp.HealthFall(fall),
		balancerhttp.HealthOnChange(func(p *balancer.Peer, down bool) { changes <- change{p.Addr(), down, time.Now()} })}
	if timeoutSet != 0 {
		opts = append(opts, balancerhttp.HealthTimeout(timeoutSet))
	}
	hc, err := balancerhttp.NewHealthChecker(bal, opts...)
	require.NoError(t, err)
	defer hc.Close()

	client := &http.Client{Timeout: 5 * time.Second, Transport: &balancerhttp.Transport{Picker: bal}}
	defer client.CloseIdleConnections()
	traffic := func() {
		t.Helper()
		bad, errs := getAll(client, 90, 3)
		require.Zero(t, bad, "requests that failed: %v", errs)
	}
	wait := func(down bool, since time.Time, stalls *stallMeter, bound time.Duration) {
		t.Helper()
		select {
		case ch := <-changes:
			stalled := stalls.Stop()
			require.Equal(t, change{c.addr, down, ch.at}, ch)
			took := ch.at.Sub(since)
			t.Logf("c down=%v after %v (bound %v, and %v the machine made the process wait)", down, took.Round(time.Millisecond), bound, stalled.Round(time.Millisecond))
			assert.LessOrEqual(t, took, bound+stalled)
		case <-time.After(bound + 2*time.Second):
			stalls.Stop()
			t.Fatalf("c not down=%v %v after the change (bound %v)", down, bound+2*time.Second, bound)
		}
	}
	served := func() [3]int64 { return [3]int64{a.traffic.Load(), b.traffic.Load(), c.traffic.Load()} }

	traffic()
	require.Equal(t, [3]int64{30, 30, 30}, served(), "round robin over three")

	for _, bad := range []struct {
		name        string
		fail, cured func()
	}{
		{"health 503", func() { c.health.Store(503) }, func() { c.health.Store(0) }},
		{"listener closed", c.stop, func() { c.start(t) }},
		{"health stalls", func() { c.stall.Store(true) }, func() { c.stall.Store(false) }},
	} {
		t.Run(bad.name, func(t *testing.T) {
			// The checks c answers between the change and the event:
			// Fall (Rise) of them, and one more that arrived before the
			// change took effect, or after the event. A closed listener
			// answers none.
			counted := func(n0 int64, want int) {
				t.Helper()
				n := c.checks.Load() - n0
				assert.True(t, n == int64(want) || n == int64(want)+1, "%d checks of c, want %d (or one more)", n, want)
			}
			n0, t0, stalls := c.checks.Load(), time.Now(), startStalls()
			bad.fail()
			wait(true, t0, stalls, downBound)
			if bad.name != "listener closed" {
				counted(n0, fall)
			}
			before := served()
			cAttempts := peers[2].Stats().Attempts
			traffic()
			after := served()
			assert.Equal(t, before[2], after[2], "c gets no traffic while down")
			assert.Equal(t, cAttempts, peers[2].Stats().Attempts, "c is not picked while down")
			assert.Equal(t, int64(90), after[0]+after[1]-before[0]-before[1])

			n1, t1, stalls := c.checks.Load(), time.Now(), startStalls()
			bad.cured()
			wait(false, t1, stalls, upBound)
			counted(n1, rise)
			before = served()
			traffic()
			assert.Equal(t, int64(30), served()[2]-before[2], "c gets its third again")
		})
	}
	var picked, answered int64
	for i, p := range peers {
		picked += int64(p.Stats().Attempts)
		answered += bs[i].traffic.Load()
		assert.Positive(t, bs[i].checks.Load(), "checks of %s", bs[i].addr)
	}
	assert.Equal(t, answered, picked, "every pick is traffic: no check was picked")
}

// TestHealthChecker_close: Close ends the checker's goroutines, a check
// stalled in flight included, and the goroutine count returns to what it
// was before the checker started.
func TestHealthChecker_close(t *testing.T) {
	a, b := newCheckedBackend(t), newCheckedBackend(t)
	b.stall.Store(true)
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(a.addr), balancer.NewPeer(b.addr)})
	require.NoError(t, err)
	before := settledGoroutines()
	hc, err := balancerhttp.NewHealthChecker(bal, balancerhttp.HealthPath("/healthz"),
		balancerhttp.HealthInterval(10*time.Millisecond), balancerhttp.HealthTimeout(10*time.Second))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.checks.Load() >= 3 && b.checks.Load() >= 1 }, 5*time.Second, 5*time.Millisecond)
	during := runtime.NumGoroutine()
	require.NoError(t, hc.Close())
	require.NoError(t, hc.Close(), "a second Close")
	n := a.checks.Load()
	after := runtime.NumGoroutine() // polled here: Eventually runs its condition on goroutines of its own
	for deadline := time.Now().Add(5 * time.Second); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, after, before, "goroutines back to %d (%d while checking)", before, during)
	assert.Equal(t, n, a.checks.Load(), "no check after Close, while the goroutines settled")
	assert.False(t, bal.Peers()[1].IsDown(), "the stalled check was canceled, not failed")
}

// TestHealthChecker_closeFromOnChange: Close called from the HealthOnChange
// callback returns (the callback does not run on the goroutine Close
// waits for), the checker stops, and a later Close returns too.
func TestHealthChecker_closeFromOnChange(t *testing.T) {
	a := newCheckedBackend(t)
	a.health.Store(http.StatusServiceUnavailable)
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(a.addr)})
	require.NoError(t, err)
	var hc *balancerhttp.HealthChecker
	ready, closed := make(chan struct{}), make(chan error, 1)
	hc, err = balancerhttp.NewHealthChecker(bal, balancerhttp.HealthPath("/healthz"), balancerhttp.HealthFall(1),
		balancerhttp.HealthInterval(10*time.Millisecond),
		balancerhttp.HealthOnChange(func(*balancer.Peer, bool) {
			<-ready
			closed <- hc.Close()
		}))
	require.NoError(t, err)
	close(ready)
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Close called from the callback has not returned in 5 s")
	}
	n := a.checks.Load()
	require.NoError(t, hc.Close())
	assert.Equal(t, n, a.checks.Load(), "no check after Close")
	assert.True(t, bal.Peers()[0].IsDown())
	st := hc.Stats()
	var se *balancerhttp.StatusError
	require.ErrorAs(t, st.LastError, &se, "the last failure: %v", st.LastError)
	assert.Equal(t, http.StatusServiceUnavailable, se.StatusCode)
	assert.Contains(t, st.LastError.Error(), a.addr)
}
