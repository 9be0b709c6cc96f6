package grpcbalancer

import (
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// openFDs counts the process's open file descriptors, or -1 where
// /proc/self/fd is not there.
func openFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return -1
	}
	return len(ents)
}

// settled polls, for up to 10 s, until the goroutines and file
// descriptors are back to at most the baseline, and reports the last
// counts.
func settled(goroutines, fds int) (g, f int, ok bool) {
	ok = waitFor(10*time.Second, func() bool {
		runtime.GC() // finalizers close what an unreachable object held
		g, f = runtime.NumGoroutine(), openFDs()
		return g <= goroutines && f <= fds
	})
	return g, f, ok
}

// warmGRPC makes one call through a client and server and closes both,
// so that what gRPC starts once per process (its global goroutines, the
// health-check codec) is in the baseline.
func warmGRPC(t *testing.T) {
	f := newChurnFleet(t, "warm", 1, 0, 0)
	conn := dialAny(t, f.r, "lbgo_prequal", "{}")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
	f.live[0].srv.Stop()
}

// TestChurnSoak is the churn of TestChurn_noPickFailsWhileReady for 8 s a
// policy, with one server answering UNAVAILABLE from the 2nd second to the
// 5th (max_fails 1, fail_timeout 0.5 s: it is ejected, probed every half
// second, and readmitted). It fails on a pick that finds no peer while a
// SubConn is READY and healthy, on an RPC that fails (but for a call a
// stopped server cut that gRPC did not retry), on the failing
// server keeping more than a tenth of the calls of its window, on an
// attempt still counted in flight on any peer the policy ever reported on
// (those that left included) or on any server, and on a goroutine or file
// descriptor not back to the baseline once the client is closed and the
// servers stopped.
func TestChurnSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("8 s per policy")
	}
	for _, policy := range []string{"lbgo_leastconn", "lbgo_prequal", "lbgo_roundrobin"} {
		t.Run(policy, func(t *testing.T) { soak(t, policy) })
	}
}

func soak(t *testing.T, policy string) {
	warmGRPC(t)
	goroutines, fds := runtime.NumGoroutine(), openFDs()

	var c noPeerCounter
	c.install(t, "soak:///backends")
	var seen sync.Map // every peer an outcome was reported on
	var mu sync.Mutex
	var failing *probeServer
	var failedOutcomes int
	report := func(p *lbgo.Peer, o lbgo.Outcome) {
		seen.Store(p, true)
		if o.Failed {
			mu.Lock()
			failedOutcomes++
			mu.Unlock()
		}
	}
	testDone.Store(&report)
	t.Cleanup(func() { testDone.Store(nil) })

	f := newChurnFleet(t, "soak", 6, 34, churnService)
	// The newest server fails from tick 10 (2 s) to tick 25 (5 s): with a
	// replacement every 5 ticks it stays in the fleet throughout.
	var windowStart, windowEnd int64
	rpcsAt := func() int64 {
		var n int64
		for _, s := range append(append([]*probeServer(nil), f.live...), f.gone...) {
			n += s.served.Load() + s.failed.Load()
		}
		return n
	}
	f.onTick = func(i int) {
		switch i {
		case 10:
			mu.Lock()
			failing = f.live[len(f.live)-1]
			mu.Unlock()
			windowStart = rpcsAt()
			failing.fail.Store(true)
		case 25:
			failing.fail.Store(false)
			windowEnd = rpcsAt()
		}
	}
	conn := dialAny(t, f.r, policy, `{"maxFails": 1, "failTimeout": "0.5s"}`)

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.churn(ctx, 5)
	}()
	res := pace(ctx, conn, churnWorkers, churnThink)
	<-done

	require.Empty(t, res.failures(), "RPCs failed")
	require.Zero(t, c.ready.Load(), c.String())
	require.NotNil(t, failing, "no server failed")
	window := windowEnd - windowStart
	t.Logf("%s: %d RPCs (%d cut by a stop), p99 %.1f ms; the failing server answered %d UNAVAILABLE of the window's %d calls (%d failed outcomes reported)",
		policy, len(res.all), len(res.errs)-len(res.failures()), ms(res.quantile(0.99)), failing.failed.Load(), window, failedOutcomes)
	require.Positive(t, failing.failed.Load(), "the failing server was never tried")
	require.Less(t, failing.failed.Load()*10, window, "the failing server was not ejected")

	// Nothing left in flight, on any peer or server (but the client's
	// health-check stream, one on each server it is connected to).
	var peers, servers int
	inFlight := func() bool {
		peers, servers = 0, 0
		seen.Range(func(k, _ any) bool {
			peers += k.(*lbgo.Peer).Stats().InFlight
			return true
		})
		for _, s := range f.live {
			servers += int(s.tr.InFlight()) - 1
		}
		return peers == 0 && servers == 0
	}
	require.True(t, waitFor(5*time.Second, inFlight), "left in flight: %d attempts on the peers, %d calls on the servers", peers, servers)

	require.NoError(t, conn.Close())
	for _, s := range append(f.live, f.gone...) {
		s.srv.Stop()
	}
	g, fd, ok := settled(goroutines, fds)
	require.True(t, ok, "after Close: %d goroutines (baseline %d), %d fds (baseline %d)", g, goroutines, fd, fds)
}
