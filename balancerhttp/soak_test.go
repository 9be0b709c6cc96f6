package balancerhttp_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/subset"
)

// soakBackend answers 200 "ok", or 503 while failing; "/slow" first waits
// 30 ms, past the deadline of the clients that ask for it.
type soakBackend struct {
	srv     *httptest.Server
	failing atomic.Bool
	failed  atomic.Int64 // 503s answered
}

func newSoakBackend() *soakBackend {
	b := &soakBackend{}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			t := time.NewTimer(30 * time.Millisecond)
			defer t.Stop()
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		if b.failing.Load() {
			b.failed.Add(1)
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	return b
}

func (b *soakBackend) addr() string { return strings.TrimPrefix(b.srv.URL, "http://") }

// recordingPicker passes picks and reports on to its picker, keeping every
// peer it gave (to check their in-flight counts at the end, removed ones
// too) and counting ErrNoLivePeer.
type recordingPicker struct {
	balancer.Picker
	picked sync.Map // *balancer.Peer → struct{}
	noLive atomic.Int64
}

func (r *recordingPicker) Pick(req *balancer.Request) (*balancer.Peer, error) {
	p, err := r.Picker.Pick(req)
	if err == nil {
		r.picked.Store(p, struct{}{})
	} else if errors.Is(err, balancer.ErrNoLivePeer) {
		r.noLive.Add(1)
	}
	return p, err
}

// guarded is a picker with WithPanicThreshold.
type guarded interface {
	InPanic() bool
	PanicCount() uint64
}

// soakRoute is one picker under churn and the client that uses it.
type soakRoute struct {
	name    string
	rec     *recordingPicker
	set     func([]*balancer.Peer) error // the picker's Update, or its Subset's
	peers   map[string]*balancer.Peer    // one per address, reused when it comes back
	guard   guarded                      // a guarded picker; nil if none
	do      func(ctx context.Context, path string) (int, error)
	ok      atomic.Int64
	gaveUp  atomic.Int64
	other   atomic.Int64 // any other error or status, counted, not asserted
	panicAt int          // the tick its picker was first seen in panic mode; -1 before
	closer  []func()     // idle connections and servers, closed at the end
}

// update hands the route's picker the peers of bs.
func (r *soakRoute) update(bs []*soakBackend) error {
	list := make([]*balancer.Peer, len(bs))
	for i, b := range bs {
		p := r.peers[b.addr()]
		if p == nil {
			// Out for a second after a failure: a pick sees it out (and
			// the guarded pickers panic) however slow the clients run.
			p = balancer.NewPeer(b.addr(), balancer.FailTimeout(time.Second))
			r.peers[b.addr()] = p
		}
		list[i] = p
	}
	return r.set(list)
}

// guardOpts are the guards of the guarded routes: panic when fewer than
// 90% of the peers are eligible (one out of five is enough), at most 20%
// out, success-rate ejection over 100 ms intervals.
func guardOpts() []balancer.Option {
	return []balancer.Option{
		balancer.WithPanicThreshold(90), balancer.WithMaxEjectionPercent(20),
		balancer.WithSuccessRateEjection(balancer.SuccessRateEjection{Interval: 100 * time.Millisecond, RequestVolume: 5, MinimumHosts: 3}),
	}
}

func soakTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 16
	return t
}

// viaTransport is a route whose client is an http.Client over a Transport.
func viaTransport(name string, b balancer.Balancer, set func([]*balancer.Peer) error) *soakRoute {
	r := &soakRoute{name: name, rec: &recordingPicker{Picker: b}, set: set, peers: map[string]*balancer.Peer{}, panicAt: -1}
	base := soakTransport()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: r.rec, Base: base}}
	r.do = func(ctx context.Context, path string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://service"+path, nil)
		if err != nil {
			return 0, err
		}
		return readAll(client.Do(req))
	}
	r.closer = append(r.closer, base.CloseIdleConnections)
	return r
}

// viaProxy is a route whose client goes through a Proxy served on
// loopback.
func viaProxy(name string, b balancer.Balancer) *soakRoute {
	r := &soakRoute{name: name, rec: &recordingPicker{Picker: b}, set: b.Update, peers: map[string]*balancer.Peer{}, panicAt: -1}
	base := soakTransport()
	srv := httptest.NewServer(&balancerhttp.Proxy{Picker: r.rec, Transport: base, ErrorLog: quietLog})
	ct := soakTransport()
	client := &http.Client{Transport: ct}
	r.do = func(ctx context.Context, path string) (int, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
		if err != nil {
			return 0, err
		}
		return readAll(client.Do(req))
	}
	r.closer = append(r.closer, ct.CloseIdleConnections, srv.Close, base.CloseIdleConnections)
	return r
}

func readAll(resp *http.Response, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, err
}

// openFDs counts the process's open file descriptors, -1 where
// /proc/self/fd is not there.
func openFDs() int {
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(es)
}

// TestSoak_churn runs Transports, Proxies and a Subset under churn over
// five loopback backends for a bounded time (about 2 s; 5-8 s under -race
// beside two CPU hogs): every 2 ms each picker gets a new list (the live
// backends, one of them left out at random, or none); one backend answers
// 503 for part of the run, until every guarded picker (panic threshold,
// ejection cap, success-rate ejection) has been seen in panic mode; then
// another backend is replaced by a new one on a new port (listed first,
// the old one closed once unlisted). Each route has one client looping
// GETs; every 8th asks for /slow with a 10 ms deadline and gives up (the
// attempt Abandoned).
//
// What counts: a backend is up while its server runs and it does not
// answer 503 on purpose. Every list a picker is given holds at least
// three up (five, less the failing one, less the one left out), and an up
// backend fails no attempt over loopback (a client giving up is not a
// failure), so no pick may return ErrNoLivePeer: the route's
// recordingPicker counts each that does, and the count must be 0 (a
// Subset's three of a list of four or five hold at least one up). Once
// the clients have stopped and the Proxies' servers closed (Close waits
// for their handlers), every peer any pick gave, removed or not, has
// nothing in flight; after the backends close too, the goroutines and
// (on Linux) the open files come back to what they were before the run,
// within a bounded wait.
func TestSoak_churn(t *testing.T) {
	if testing.Short() {
		t.Skip("soak")
	}
	// The runtime's network poller holds two files from the first
	// connection on: opened before the count.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, ln.Close())
	baseG, baseFD := runtime.NumGoroutine(), openFDs()

	bs := make([]*soakBackend, 5)
	for i := range bs {
		bs[i] = newSoakBackend()
	}
	var routes []*soakRoute
	add := func(b balancer.Balancer, err error) balancer.Balancer {
		require.NoError(t, err)
		return b
	}
	for _, guarded := range []bool{false, true} {
		var opts []balancer.Option
		suffix := ""
		if guarded {
			opts, suffix = guardOpts(), "+guards"
		}
		rr := add(balancer.NewRoundRobin(nil, opts...)).(*balancer.RoundRobin)
		lc := add(balancer.NewLeastConn(nil, opts...)).(*balancer.LeastConn)
		p2c := add(balancer.NewP2CPeakEWMA(nil, append(opts, balancer.WithRand(rand.NewPCG(1, 2)))...)).(*balancer.P2CPeakEWMA)
		prr := add(balancer.NewRoundRobin(nil, opts...)).(*balancer.RoundRobin)
		rs := []*soakRoute{
			viaTransport("Transport/RoundRobin"+suffix, rr, rr.Update),
			viaTransport("Transport/LeastConn"+suffix, lc, lc.Update),
			viaTransport("Transport/P2CPeakEWMA"+suffix, p2c, p2c.Update),
			viaProxy("Proxy/RoundRobin"+suffix, prr),
		}
		if guarded {
			rs[0].guard, rs[1].guard, rs[2].guard, rs[3].guard = rr, lc, p2c, prr
		}
		routes = append(routes, rs...)
	}
	inner := add(balancer.NewLeastConn(nil, guardOpts()...)).(*balancer.LeastConn)
	by, err := subset.Rendezvous("client-1", 3)
	require.NoError(t, err)
	sub, err := subset.New(inner, nil, by)
	require.NoError(t, err)
	sr := viaTransport("Transport/Subset(LeastConn+guards)", sub, sub.Update)
	// Not asked to panic: its subset of three may not hold the failing
	// backend for long.
	routes = append(routes, sr)

	live := clone(bs)
	for _, r := range routes {
		require.NoError(t, r.update(live))
	}

	// The clients.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, r := range routes {
		// Two clients for a Proxy, whose requests take two hops.
		clients := 1
		if strings.HasPrefix(r.name, "Proxy/") {
			clients = 2
		}
		for range clients {
			wg.Add(1)
			go r.loop(&wg, stop)
		}
	}

	// The churn, on one goroutine: a new list every 2 ms. Phases by
	// tick, bounded in time: the failing backend from tick 10 until every
	// guarded picker has panicked (at least 25 ticks), the replacement 25
	// ticks later, the end 50 ticks after that.
	rng := rand.New(rand.NewPCG(3, 4))
	failing := bs[1]
	const (
		failFrom  = 10
		minFail   = 25
		afterFail = 25
		afterRepl = 50
	)
	failUntil, replaceAt, endAt := -1, -1, -1
	var replaced *soakBackend
	deadline := time.Now().Add(12 * time.Second)
	began := time.Now()
	tick := time.NewTicker(2 * time.Millisecond)
	for i := 0; endAt < 0 || i < endAt; i++ {
		if time.Now().After(deadline) {
			t.Errorf("the soak's phases did not end in 12 s (tick %d: failing until %d, replaced at %d)", i, failUntil, replaceAt)
			break
		}
		<-tick.C
		switch {
		case i == failFrom:
			failing.failing.Store(true)
		case i >= failFrom && failUntil < 0:
			for _, r := range routes {
				// InPanic counts, as a pick meeting the failing
				// peer out would: the picks are too few for the
				// phase to wait for them.
				if r.guard != nil && r.panicAt < 0 && r.guard.InPanic() {
					r.panicAt = i
				}
			}
			if i < failFrom+minFail || !allPanicked(routes) {
				break
			}
			failing.failing.Store(false)
			failUntil, replaceAt = i, i+afterFail
		case i == replaceAt:
			replaced = bs[0]
			bs[0] = newSoakBackend()
			endAt = i + afterRepl
		}
		list := clone(bs)
		if k := rng.IntN(len(list) + 1); k < len(list) {
			list = append(list[:k], list[k+1:]...)
		}
		for _, r := range routes {
			if err := r.update(list); err != nil {
				t.Errorf("%s: Update: %v", r.name, err)
			}
		}
		if i == replaceAt {
			replaced.srv.Close() // unlisted everywhere now
		}
	}
	tick.Stop()
	t.Logf("503s from tick %d to %d, replacement at %d, end at %d: %v", failFrom, failUntil, replaceAt, endAt, time.Since(began))
	close(stop)
	wg.Wait()

	// The Proxies' servers first: Close waits for their handlers, whose
	// attempts may outlive a client that gave up.
	for _, r := range routes {
		for _, c := range r.closer {
			c()
		}
	}
	for _, r := range routes {
		t.Logf("%-40s ok %5d, gave up %4d, other %3d, no live peer %d, panic from tick %d", r.name, r.ok.Load(), r.gaveUp.Load(), r.other.Load(), r.rec.noLive.Load(), r.panicAt)
		assert.Zero(t, r.rec.noLive.Load(), "%s: picks that found no live peer while at least one listed backend was up", r.name)
		assert.Positive(t, r.ok.Load(), "%s: no request succeeded", r.name)
		if r.guard != nil {
			assert.Positive(t, r.guard.PanicCount(), "%s: never in panic mode", r.name)
		}
		r.rec.picked.Range(func(k, _ any) bool {
			p := k.(*balancer.Peer)
			assert.Zero(t, p.InFlight(), "%s: peer %s has attempts in flight after the run", r.name, p)
			return true
		})
	}
	assert.Positive(t, failing.failed.Load(), "the failing backend answered no 503")

	for _, b := range bs {
		b.srv.Close()
	}
	waitBack(t, "goroutines", baseG, runtime.NumGoroutine)
	if baseFD >= 0 {
		waitBack(t, "open files", baseFD, openFDs)
	}
	t.Logf("whole run %v", time.Since(began))
}

// loop is one client of r: GETs until stop closes, every 8th on /slow with
// a 10 ms deadline that it gives up at.
func (r *soakRoute) loop(wg *sync.WaitGroup, stop <-chan struct{}) {
	defer wg.Done()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		path, d := "/", 5*time.Second
		if n%8 == 7 {
			path, d = "/slow", 10*time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		code, err := r.do(ctx, path)
		cancel()
		switch {
		case err == nil && code == http.StatusOK:
			r.ok.Add(1)
		case path == "/slow" && errors.Is(err, context.DeadlineExceeded):
			r.gaveUp.Add(1)
		default:
			r.other.Add(1)
		}
	}
}

// clone returns a copy of bs.
func clone(bs []*soakBackend) []*soakBackend { return append([]*soakBackend(nil), bs...) }

// allPanicked reports whether every guarded route's picker has been seen
// in panic mode.
func allPanicked(routes []*soakRoute) bool {
	for _, r := range routes {
		if r.guard != nil && r.panicAt < 0 {
			return false
		}
	}
	return true
}

// waitBack waits, at most 5 s, for count() to come back to at most base;
// it fails naming what stayed (with the goroutines' stacks for those).
func waitBack(t *testing.T, what string, base int, count func() int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	n := count()
	for n > base && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(5 * time.Millisecond)
		n = count()
	}
	if n > base {
		var stacks bytes.Buffer
		switch what {
		case "goroutines":
			_ = pprof.Lookup("goroutine").WriteTo(&stacks, 1)
		case "open files":
			es, _ := os.ReadDir("/proc/self/fd")
			for _, e := range es {
				l, _ := os.Readlink("/proc/self/fd/" + e.Name())
				fmt.Fprintf(&stacks, "%s -> %s\n", e.Name(), l)
			}
		}
		t.Errorf("%s: %d after Close, %d before the run\n%s", what, n, base, stacks.String())
	}
}
