package dnsdiscovery

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/discovery"
)

// backendsOnOnePort starts n HTTP servers on 127.0.0.2, 127.0.0.3, ...
// all on one port, as a DNS name's addresses are, each counting the
// requests it served.
func backendsOnOnePort(t *testing.T, n int) (string, []*atomic.Int64) {
	t.Helper()
	port, lns := listenOnOnePort(t, n)
	served := make([]*atomic.Int64, n)
	for i, l := range lns {
		c := new(atomic.Int64)
		served[i] = c
		serveOn(t, l, func(w http.ResponseWriter, r *http.Request) {
			c.Add(1)
			fmt.Fprint(w, "ok")
		})
	}
	return port, served
}

// listenOnOnePort listens on one port of 127.0.0.2 to 127.0.0.(n+1),
// trying ports until one is free on every address.
func listenOnOnePort(t *testing.T, n int) (string, []net.Listener) {
	t.Helper()
	for try := 0; try < 20; try++ {
		ln, err := net.Listen("tcp", "127.0.0.2:0")
		require.NoError(t, err)
		_, port, _ := net.SplitHostPort(ln.Addr().String())
		lns := []net.Listener{ln}
		for i := 1; i < n; i++ {
			l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.%d:%s", i+2, port))
			if err != nil {
				break
			}
			lns = append(lns, l)
		}
		if len(lns) == n {
			return port, lns
		}
		for _, l := range lns {
			l.Close()
		}
	}
	t.Fatalf("no port free on 127.0.0.2 to 127.0.0.%d", n+1)
	return "", nil
}

// serveOn serves h on l until the test ends.
func serveOn(t *testing.T, l net.Listener, h http.HandlerFunc) {
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
}

// TestWatch_churnUnderLoad: a DNS name whose addresses change every 20 ms
// (TTL 0, so the Watcher looks again at its 20 ms minimum, and 20 ms after
// a failure), with SERVFAIL
// and NXDOMAIN answers among the changes, under eight clients sending GETs
// through a balancerhttp.Transport: every request gets its 200, the
// backends served each one once, no peer is left with an attempt in
// flight, the list never goes empty, and after Close the Watcher's
// goroutine is gone.
func TestWatch_churnUnderLoad(t *testing.T) {
	const n = 6
	port, served := backendsOnOnePort(t, n)
	z := newZone(t)
	records := func(step int) []string {
		var rrs []string
		for i := range n {
			if (step+i)%3 != 0 { // two thirds of the backends, rotating
				rrs = append(rrs, fmt.Sprintf("api.test. 0 IN A 127.0.0.%d", i+2))
			}
		}
		return rrs
	}
	z.set(t, records(0)...)
	base := runtime.NumGoroutine()

	var mu sync.Mutex
	var made []*balancer.Peer
	lb, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	var failures atomic.Int64
	w, err := discovery.Watch(context.Background(), lb, Host{Name: "api.test", Port: port, Server: z.addr, Network: "ip4"}, discovery.Config{
		MinInterval: 20 * time.Millisecond, RetryInterval: 20 * time.Millisecond, MaxInterval: 100 * time.Millisecond,
		Peer: func(t discovery.Target) *balancer.Peer {
			p := balancer.NewPeer(t.Addr)
			mu.Lock()
			made = append(made, p)
			mu.Unlock()
			return p
		},
		OnError: func(error) { failures.Add(1) },
	})
	require.NoError(t, err)

	client := &http.Client{Transport: &balancerhttp.Transport{Picker: lb}, Timeout: 10 * time.Second}
	stop := make(chan struct{})
	var sent, ok atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				sent.Add(1)
				resp, err := client.Get("http://api.test/")
				if err != nil {
					t.Error(err)
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					ok.Add(1)
				}
			}
		}()
	}
	for step := 1; step <= 60; step++ {
		switch step % 10 {
		case 4:
			z.fail("api.test", dns.RcodeServerFailure)
		case 7:
			z.fail("api.test", 0)
			z.drop("api.test") // NXDOMAIN
		default:
			z.fail("api.test", 0)
			z.set(t, records(step)...)
		}
		time.Sleep(25 * time.Millisecond) // the test's pace, not the library's
		assert.NotEmpty(t, lb.Peers(), "step %d: the list went empty", step)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, w.Close())

	var total int64
	for _, c := range served {
		total += c.Load()
	}
	assert.Positive(t, sent.Load())
	assert.Equal(t, sent.Load(), ok.Load(), "a request did not get its 200")
	assert.Equal(t, ok.Load(), total, "the backends served each request once")
	mu.Lock()
	for _, p := range made {
		assert.Zero(t, p.InFlight(), "%s left in flight", p.Addr())
	}
	mu.Unlock()
	st := w.Stats()
	assert.Greater(t, st.Updates, uint64(10), "the list changed with the records")
	assert.Positive(t, failures.Load(), "the SERVFAIL and NXDOMAIN answers were reported")
	t.Logf("%d requests, %d lookups, %d updates, %d failed lookups kept the list", sent.Load(), st.Lookups, st.Updates, st.Failures)

	client.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines left after Close")
}
