package grpcbalancer

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
)

// TestHedging_noBackendGivesTokenBack: one backend, and each RPC sends its
// two attempts at once (hedgingDelay 0s): one lands on the backend, which
// holds it; the other finds no backend the RPC has not tried and is not
// sent. Its budget token goes back, as the root loop's retry whose pick
// finds no peer does. The budget's clock is frozen and it holds 2 tokens
// (no ratio, 0.2 a second over 10 s), so 5 RPCs spend them all and refuse
// the last 3 hedges unless the tokens come back: with them back, no hedge
// is refused, each RPC counts one NoBackend and no hedge sent nor won (one
// attempt reached a backend), and the budget shows no retry kept. The backend
// answers only once the test has seen the unsent attempt end (an
// interceptor under the hedging one tells it) or the hedge refused (its
// event), so that every hedge picks before its RPC ends.
func TestHedging_noBackendGivesTokenBack(t *testing.T) {
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := retrybudget.New(0, 0.2, 10*time.Second, retrybudget.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	settled := make(chan struct{}, 4) // an attempt ended unsent, or a hedge refused
	h, err := NewHedging(`{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0s"}}]}`,
		WithHedgeBudget(b), WithHedgeEvents(func(e lbgo.Event) {
			if e.Kind == lbgo.EventHedgeRefused {
				settled <- struct{}{}
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	backend := startHedgeBackend(t)
	ended := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if err != nil { // the held attempt answers OK: this is the unsent one
			settled <- struct{}{}
		}
		return err
	}
	client, _ := dialPolicy(t, []resolver.Address{{Addr: backend.addr}}, append(h.DialOptions(), grpc.WithChainUnaryInterceptor(ended))...)

	const rpcs = 5
	for i := range rpcs {
		backend.stall()
		done := make(chan error, 1)
		go func() {
			ctx, cancel := rpcCtx(i)
			defer cancel()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			done <- err
		}()
		select {
		case <-settled:
		case err := <-done:
			t.Fatalf("RPC %d ended before its second attempt settled: %v", i, err)
		}
		backend.release()
		if err := <-done; err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
	st := h.Stats()
	if want := (HedgingStats{RPCs: rpcs, NoBackend: rpcs}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := b.Stats(); got.Retries != 0 || got.Refused != 0 {
		t.Errorf("budget %+v: want no retry kept nor refused", got)
	}
	if backend.seen.Load() != rpcs {
		t.Errorf("the backend saw %d attempts, want %d", backend.seen.Load(), rpcs)
	}
}

// TestHedging_countsMatchEvents: Stats' Hedges, Won and Refused grow
// exactly with EventHedgeSent, EventHedgeWon and EventHedgeRefused, on a
// run with hedges sent, won, refused and without a backend. Two backends;
// each RPC, one after another, asks for its two hedges at once
// (maxAttempts 3, hedgingDelay 0s). The budget's clock is frozen, so its
// rule is exact: the RPC k (from 1) may take a hedge while the tokens kept
// so far, that one included, are at most reserve + ratio × k = 4 + 0.25k;
// it stops at the first refusal. With both hedges, one of the three
// attempts finds no backend and its token goes back; of the two that reach
// a backend, the second is a hedge sent. The test derives sent, refused
// and no backend from that rule; won is the RPCs answered by an attempt
// after the first, by the servers' header. Each server holds an attempt
// until every attempt of its RPC has reached a server or, without a
// backend, come back to an interceptor under the hedging one, so no
// attempt is cancelled before its pick.
func TestHedging_countsMatchEvents(t *testing.T) {
	const ratio, minPerSecond, window = 0.25, 0.5, 8 * time.Second // reserve 4
	const rpcs = 24
	kept, sent, refused, noBackend := 0, 0, 0, 0
	var reach [rpcs]int32 // attempts of each RPC that reach a server or find no backend
	for k := 1; k <= rpcs; k++ {
		granted := 0
		for granted < 2 {
			if float64(kept+1) > minPerSecond*window.Seconds()+ratio*float64(k) {
				refused++
				break
			}
			kept++
			granted++
		}
		if granted == 2 {
			noBackend++ // three attempts, two backends
			kept--      // its token back
		}
		if granted > 0 {
			sent++ // the second attempt to reach a backend
		}
		reach[k-1] = int32(1 + granted)
	}

	var arrived [rpcs]atomic.Int32
	var all [rpcs]chan struct{}
	for i := range all {
		all[i] = make(chan struct{})
	}
	arrive := func(md metadata.MD) int {
		id, _ := strconv.Atoi(md.Get("rpc-id")[0])
		if arrived[id].Add(1) == reach[id] {
			close(all[id])
		}
		return id
	}
	hold := func(ctx context.Context, attempt int) error {
		md, _ := metadata.FromIncomingContext(ctx)
		id := arrive(md)
		select {
		case <-all[id]:
		case <-ctx.Done():
			return ctx.Err()
		}
		return grpc.SetHeader(ctx, metadata.Pairs("attempt", strconv.Itoa(attempt)))
	}
	inner := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		md, _ := metadata.FromOutgoingContext(ctx)
		arrive(md) // before the barrier, only an attempt without a backend returns
		return err
	}
	var addrs []resolver.Address
	for range 2 {
		b := startHedgeBackend(t)
		b.script.Store(&hold)
		addrs = append(addrs, resolver.Address{Addr: b.addr})
	}

	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	budget, err := retrybudget.New(ratio, minPerSecond, window, retrybudget.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	events := map[lbgo.EventKind]uint64{}
	h, err := NewHedging(`{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":3,"hedgingDelay":"0s"}}]}`,
		WithHedgeBudget(budget), WithHedgeEvents(func(e lbgo.Event) {
			mu.Lock()
			defer mu.Unlock()
			events[e.Kind]++
		}))
	if err != nil {
		t.Fatal(err)
	}
	client, _ := dialPolicy(t, addrs, append(h.DialOptions(), grpc.WithChainUnaryInterceptor(inner))...)

	won := 0
	for i := range rpcs {
		ctx, cancel := rpcCtx(i)
		var md metadata.MD
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		cancel()
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		if n, _ := strconv.Atoi(md.Get("attempt")[0]); n > 0 {
			won++
		}
	}
	if refused == 0 || noBackend == 0 || sent == 0 {
		t.Fatalf("the run derives %d sent, %d refused, %d without a backend: want each at least once", sent, refused, noBackend)
	}
	st := h.Stats()
	want := HedgingStats{RPCs: rpcs, Hedges: uint64(sent), Won: uint64(won), Refused: uint64(refused), NoBackend: uint64(noBackend)}
	if st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if events[lbgo.EventHedgeSent] != st.Hedges || events[lbgo.EventHedgeWon] != st.Won || events[lbgo.EventHedgeRefused] != st.Refused {
		t.Errorf("events %d sent, %d won, %d refused; stats %+v", events[lbgo.EventHedgeSent], events[lbgo.EventHedgeWon], events[lbgo.EventHedgeRefused], st)
	}
	if got := budget.Stats(); got.Retries != uint64(kept) || got.Refused != uint64(refused) {
		t.Errorf("budget %+v: want %d retries kept, %d refused", got, kept, refused)
	}
}

// TestHedging_wonNeedsAHedge: an RPC none of whose attempts reached a
// backend after another did sent no hedge (Hedges 0), so no hedge won it
// either: Won never exceeds Hedges, and no EventHedgeWon comes without an
// EventHedgeSent. One backend; the RPC's two attempts go at once
// (hedgingDelay 0s), and an interceptor under the hedging one holds the
// first attempt until the second has reached the backend, so the first
// finds no backend the RPC has not tried and is not sent; the backend
// answers the second, the RPC's only attempt sent, once the first has
// come back.
func TestHedging_wonNeedsAHedge(t *testing.T) {
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := retrybudget.New(0, 0.2, 10*time.Second, retrybudget.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	events := map[lbgo.EventKind]uint64{}
	h, err := NewHedging(`{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0s"}}]}`,
		WithHedgeBudget(b), WithHedgeEvents(func(e lbgo.Event) {
			mu.Lock()
			defer mu.Unlock()
			events[e.Kind]++
		}))
	if err != nil {
		t.Fatal(err)
	}
	arrived, unsent := make(chan struct{}), make(chan struct{})
	backend := startHedgeBackend(t)
	hold := func(ctx context.Context, attempt int) error {
		if attempt != 1 {
			t.Errorf("attempt %d reached the backend, want only attempt 1", attempt)
			return nil
		}
		close(arrived)
		select {
		case <-unsent:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	backend.script.Store(&hold)
	first := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		if len(md.Get("grpc-previous-rpc-attempts")) > 0 {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		select {
		case <-arrived:
		case <-ctx.Done():
			return ctx.Err()
		}
		err := invoker(ctx, method, req, reply, cc, opts...)
		close(unsent)
		return err
	}
	client, _ := dialPolicy(t, []resolver.Address{{Addr: backend.addr}}, append(h.DialOptions(), grpc.WithChainUnaryInterceptor(first))...)

	ctx, cancel := rpcCtx(0)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	// One attempt reached a backend, and none after it: no hedge sent,
	// none won; the other attempt found no backend.
	if st, want := h.Stats(), (HedgingStats{RPCs: 1, NoBackend: 1}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	mu.Lock()
	defer mu.Unlock()
	if events[lbgo.EventHedgeSent] != 0 || events[lbgo.EventHedgeWon] != 0 {
		t.Errorf("events: %d sent, %d won; want none", events[lbgo.EventHedgeSent], events[lbgo.EventHedgeWon])
	}
	if got := b.Stats(); got.Retries != 0 {
		t.Errorf("budget %+v: want no retry kept (the unsent attempt's token back)", got)
	}
}
