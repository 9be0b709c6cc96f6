package grpcbalancer

import (
	"context"
	"sync"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// TestWake_doneBeforeWait: one backend, max_conns 1. A call holds the one
// slot; a second call's pick finds no live peer, and the first call ends
// (its Done frees the slot) before the policy notes that a pick waits.
// Nothing else happens on the channel (no push, no state change, no fail
// window), so the second call proceeds only if the policy saw the slot
// freed: it must end well within its 3 s deadline, not wait through it.
func TestWake_doneBeforeWait(t *testing.T) {
	a := startBackend(t)
	r := manual.NewBuilderWithScheme("wake")
	r.InitialState(resolver.State{Addresses: addrs(a)})
	conn, lb := dial(t, r, serviceConfig("lbgo_roundrobin", `{"maxConns": 1}`, 2))
	client := healthpb.NewHealthClient(conn)
	require.True(t, waitFor(5*time.Second, func() bool { return allReady(lb) }), "the backend is not READY")

	// Done of the first call, seen by the hook below.
	first := make(chan struct{})
	var once sync.Once
	report := func(*lbgo.Peer, lbgo.Outcome) { once.Do(func() { close(first) }) }
	testDone.Store(&report)
	t.Cleanup(func() { testDone.Store(nil) })
	var hooked sync.Once
	wait := func() {
		hooked.Do(func() {
			select {
			case <-first:
			case <-time.After(5 * time.Second):
			}
		})
	}
	testBeforeWait.Store(&wait)
	t.Cleanup(func() { testBeforeWait.Store(nil) })

	a.delay.Store(int64(300 * time.Millisecond))
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		errs <- err
	}()
	var held *lbgo.Peer
	require.True(t, waitFor(2*time.Second, func() bool {
		for _, p := range peersOf(lb) {
			if p.Stats().InFlight == 1 {
				held = p
			}
		}
		return held != nil
	}), "the first call is not in flight")
	a.delay.Store(0)

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	took := time.Since(start)
	require.NoError(t, <-errs, "the first call")
	require.NoError(t, err, "the second call, after %v", took)
	require.Less(t, took, 2*time.Second, "the second call waited past the first one's end")
	t.Logf("the second call took %v (the first held the slot for 300 ms)", took.Round(time.Millisecond))
}

// TestWake_slotFreed: one backend, max_conns 1, a call holding the slot
// for 300 ms. A second call's pick finds no live peer twice (the pick and
// the one made after noting that it waits) and waits; the first call's
// Done hands gRPC a new picker, on which it proceeds: it ends within the
// first call's 300 ms plus a margin, and NoLivePeerCount reads 2.
func TestWake_slotFreed(t *testing.T) {
	a := startBackend(t)
	r := manual.NewBuilderWithScheme("wakeslot")
	r.InitialState(resolver.State{Addresses: addrs(a)})
	conn, lb := dial(t, r, serviceConfig("lbgo_roundrobin", `{"maxConns": 1}`, 2))
	client := healthpb.NewHealthClient(conn)
	require.True(t, waitFor(5*time.Second, func() bool { return allReady(lb) }), "the backend is not READY")

	a.delay.Store(int64(300 * time.Millisecond))
	errs := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		errs <- err
	}()
	require.True(t, waitFor(2*time.Second, func() bool { return a.delay.Load() > 0 && inFlight(lb) == 1 }), "the first call is not in flight")
	a.delay.Store(0)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	took := time.Since(start)
	require.NoError(t, <-errs, "the first call")
	require.NoError(t, err, "the second call, after %v", took)
	require.Less(t, took, 2*time.Second, "the second call waited past the first one's end")
	require.Equal(t, uint64(2), Channel("wakeslot:///backends").Stats().NoLivePeer)
	require.Equal(t, uint64(2), Channel("wakeslot:///backends").NoLivePeerCount(), "the deprecated reader agrees")
}

// inFlight sums the policy's attempts in flight.
func inFlight(lb *lbBalancer) (n int) {
	for _, p := range peersOf(lb) {
		n += p.Stats().InFlight
	}
	return n
}

// TestWake_windowEndsBeforeWake: two backends, both out for their
// failures (max_fails 1, fail_timeout 0.5 s), then healthy again. A
// wait-for-ready call's pick finds no live peer, and both fail windows
// end before the policy sets its wake-up (the hook waits past them).
// Nothing else happens on the channel, so the call proceeds only if the
// policy wakes for a window that ended meanwhile: it must succeed well
// within its 3 s deadline.
func TestWake_windowEndsBeforeWake(t *testing.T) {
	a, b := startBackend(t), startBackend(t)
	r := manual.NewBuilderWithScheme("wakewin")
	r.InitialState(resolver.State{Addresses: addrs(a, b)})
	conn, lb := dial(t, r, serviceConfig("lbgo_smoothwrr", `{"maxFails": 1, "failTimeout": "0.5s"}`, 2))
	client := healthpb.NewHealthClient(conn)
	require.True(t, waitFor(5*time.Second, func() bool { return allReady(lb) }), "the backends are not READY")

	a.fail.Store(true)
	b.fail.Store(true)
	for i := 0; i < 4 && !allOut(lb); i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, _ = client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
	}
	require.True(t, allOut(lb), "the backends are not both in their fail window")
	a.fail.Store(false)
	b.fail.Store(false)
	last, ok := lb.picker.NextEligible()
	for _, p := range peersOf(lb) {
		if end := p.State().Checked.Add(p.FailTimeout()); end.After(last) {
			last = end
		}
	}
	require.True(t, ok, "no fail window")

	var hooked sync.Once
	wait := func() { hooked.Do(func() { time.Sleep(time.Until(last) + 50*time.Millisecond) }) }
	testBeforeWake.Store(&wait)
	t.Cleanup(func() { testBeforeWake.Store(nil) })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	took := time.Since(start)
	require.NoError(t, err, "after %v", took)
	require.Less(t, took, 2*time.Second, "the call waited past the fail windows' end (%v after it started)", time.Until(last)+took)
	t.Logf("the call took %v; the windows ended %v after it started", took.Round(time.Millisecond), last.Sub(start).Round(time.Millisecond))
}
