package grpcbalancer

import (
	"context"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
)

// TestHedging_noBackendGivesTokenBack: one backend, and each RPC sends its
// two attempts at once (hedgingDelay 0s): one lands on the backend, which
// holds it; the other finds no backend the RPC has not tried and is not
// sent. Its budget token goes back, as the root loop's retry whose pick
// finds no peer does. The budget's clock is frozen and it holds 2 tokens
// (no ratio, 0.2 a second over 10 s), so 5 RPCs spend them all and refuse
// the last 3 hedges unless the tokens come back: with them back, no hedge
// is refused, each RPC counts one hedge and one NoBackend, and the budget
// shows no retry made. The backend answers only once the test has seen
// the unsent attempt end (an interceptor under the hedging one tells it)
// or the hedge refused (its event), so that every hedge picks before its
// RPC ends.
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
	if want := (HedgingStats{RPCs: rpcs, Hedges: rpcs, Won: st.Won /* either attempt may answer */, NoBackend: rpcs}); st != want {
		t.Errorf("stats %+v, want %+v", st, want)
	}
	if got := b.Stats(); got.Retries != 0 || got.Refused != 0 {
		t.Errorf("budget %+v: want no retry made nor refused", got)
	}
	if backend.seen.Load() != rpcs {
		t.Errorf("the backend saw %d attempts, want %d", backend.seen.Load(), rpcs)
	}
}
