package main

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/metrics"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// TestHedgeCounterCollector scrapes metrics.NewHedgeCounter over a
// grpcbalancer.Hedging that hedged real RPCs: 40 health checks, one after
// another, over two grpc-go servers on loopback that say in a header which
// attempt they answered. Each RPC sends its three attempts at once
// (maxAttempts 3, hedgingDelay 0s) as far as the budget allows; the two
// backends take two of them, and a third finds no backend the RPC has not
// tried, is not sent and gives its budget token back. The budget's clock
// is frozen, so its rule is exact: the RPC k (from 1) may take a hedge
// while the tokens kept so far, that one included, are at most reserve +
// ratio × k = 4 + 0.25k, and stops at the first refusal. The test derives
// sent (the second attempt of an RPC to reach a backend), refused and no
// backend from that rule, and so how many attempts of each RPC reach a
// server, which holds them until all have (none is cancelled on its way);
// won is the RPCs whose answer came from an attempt after the first, by
// the servers' header; the servers' own count of attempts checks RPCs +
// sent. Each counter with an event (sent, won, refused) must equal the
// events the Hedging emitted (WithHedgeEvents). A balancer.Hedging's
// HedgingCollector shares the registry and the names of three series.
func TestHedgeCounterCollector(t *testing.T) {
	const ratio, minPerSecond, window = 0.25, 0.5, 8 * time.Second // reserve 4
	const rpcs = 40
	// The budget's rule, RPC by RPC, and the attempts that reach a
	// server: the first and, if granted, one hedge (two backends).
	kept, sent, refused, noBackend := 0, 0, 0, 0
	var reach [rpcs]int32
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
			kept--      // the unsent one's token back
		}
		if granted > 0 {
			sent++ // two attempts reach a backend: the second is a hedge sent
		}
		reach[k-1] = int32(1 + granted)
	}
	if sent == 0 || refused == 0 || noBackend == 0 {
		t.Fatalf("the run derives %d sent, %d refused, %d without a backend: want each at least once", sent, refused, noBackend)
	}

	// A server holds each attempt until every attempt of its RPC has
	// reached a server or, without a backend, returned to the hedging
	// interceptor (seen by the interceptor it calls, inner; the others
	// return only once released): no attempt is cancelled before it has
	// reached its server or found none.
	var seen atomic.Int64
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
	inner := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		md, _ := metadata.FromOutgoingContext(ctx)
		arrive(md) // before the barrier, only an attempt without a backend returns
		return err
	}
	var addrs []resolver.Address
	for range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			seen.Add(1)
			md, _ := metadata.FromIncomingContext(ctx)
			id := arrive(md)
			select {
			case <-all[id]:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			attempt := "0"
			if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
				attempt = v[0]
			}
			_ = grpc.SetHeader(ctx, metadata.Pairs("attempt", attempt))
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}

	var sentEvents, wonEvents, refusedEvents atomic.Uint64
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	budget, err := retrybudget.New(ratio, minPerSecond, window, retrybudget.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	const target = "hedgemetrics:///demo"
	h, err := grpcbalancer.NewHedging(`{
	  "loadBalancingConfig": [{"lbgo_random": {"maxFails": 0}}],
	  "methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	    "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "0s"}}]}`, grpcbalancer.WithHedgeBudget(budget),
		grpcbalancer.WithHedgeEvents(func(e lbgo.Event) {
			switch e.Kind {
			case lbgo.EventHedgeSent:
				sentEvents.Add(1)
			case lbgo.EventHedgeWon:
				wonEvents.Add(1)
			case lbgo.EventHedgeRefused:
				refusedEvents.Add(1)
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	r := manual.NewBuilderWithScheme("hedgemetrics")
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient(target, append(h.DialOptions(), grpc.WithChainUnaryInterceptor(inner),
		grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := connected(context.Background(), conn, target, len(addrs)); err != nil {
		t.Fatal(err)
	}

	client := healthpb.NewHealthClient(conn)
	won := 0
	for i := range rpcs {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "rpc-id", strconv.Itoa(i))
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

	t.Logf("%d RPCs: %d hedges sent, %d refused, %d found no backend, %d won; servers saw %d attempts", rpcs, sent, refused, noBackend, won, seen.Load())
	if got, want := seen.Load(), int64(rpcs+sent); got != want {
		t.Errorf("the servers saw %d attempts, want %d RPCs + %d hedges sent = %d", got, rpcs, sent, want)
	}
	if got := budget.Stats(); got.Retries != uint64(kept) || got.Refused != uint64(refused) {
		t.Errorf("budget %+v: want %d retries kept, %d refused", got, kept, refused)
	}
	_, hSent, hWon, hRefused, _ := h.HedgeCounts()
	if hSent != sentEvents.Load() || hWon != wonEvents.Load() || hRefused != refusedEvents.Load() {
		t.Errorf("counts (sent %d, won %d, refused %d) vs events (%d, %d, %d)", hSent, hWon, hRefused, sentEvents.Load(), wonEvents.Load(), refusedEvents.Load())
	}

	plain, err := lbgo.NewHedging(lbgo.HedgePolicy{MaxAttempts: 2, Budget: budget})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(metrics.NewHedgeCounter("grpc", h), metrics.NewHedging("http", plain))
	want := fmt.Sprintf(`
# HELP balancer_hedged_requests_total Requests of a method that hedges.
# TYPE balancer_hedged_requests_total counter
balancer_hedged_requests_total{hedging="grpc"} %d
# HELP balancer_hedges_no_backend_total Attempts not sent: no backend the request's other attempts had not tried.
# TYPE balancer_hedges_no_backend_total counter
balancer_hedges_no_backend_total{hedging="grpc"} %d
# HELP balancer_hedges_refused_total Hedges the hedge budget refused.
# TYPE balancer_hedges_refused_total counter
balancer_hedges_refused_total{hedging="grpc"} %d
balancer_hedges_refused_total{hedging="http"} 0
# HELP balancer_hedges_sent_total Hedged attempts sent.
# TYPE balancer_hedges_sent_total counter
balancer_hedges_sent_total{hedging="grpc"} %d
balancer_hedges_sent_total{hedging="http"} 0
# HELP balancer_hedges_won_total Requests a hedge answered first.
# TYPE balancer_hedges_won_total counter
balancer_hedges_won_total{hedging="grpc"} %d
balancer_hedges_won_total{hedging="http"} 0
`, rpcs, noBackend, refused, sent, won)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		metrics.HedgedRequestsName, metrics.HedgesNoBackendName, metrics.HedgesRefusedName, metrics.HedgesSentName, metrics.HedgesWonName); err != nil {
		t.Error(err)
	}
}
