package grpcbalancer_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// Hedged health checks over three servers on loopback, balanced by
// lbgo_smoothwrr (a rotation), one of which holds every RPC until the
// client cancels it: each RPC whose first attempt it holds is answered by
// a hedge sent 10 ms later to another server, and the held attempt is
// cancelled. No RPC fails and the holding server answers none, however
// long the calls take.
func ExampleNewHedging() {
	var hold atomic.Bool       // server 0 holds every RPC
	var served [3]atomic.Int64 // answers, by server
	var held atomic.Int64      // attempts server 0 held
	stop := make(chan struct{})
	defer close(stop)
	var addrs []resolver.Address
	for i := range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			if i == 0 && hold.Load() {
				held.Add(1)
				select {
				case <-ctx.Done():
				case <-stop:
				}
				return nil, ctx.Err()
			}
			served[i].Add(1)
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		defer srv.Stop()
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	r := manual.NewBuilderWithScheme("hedged")
	r.InitialState(resolver.State{Addresses: addrs})

	// A budget of one hedge per RPC (ratio 1) for the demonstration; the
	// default allows 5% more attempts than RPCs.
	budget, err := retrybudget.New(1, 0, retrybudget.DefaultWindow)
	if err != nil {
		fmt.Println(err)
		return
	}
	hedging, err := grpcbalancer.NewHedging(`{
	  "loadBalancingConfig": [{"lbgo_smoothwrr": {}}],
	  "methodConfig": [{"name": [{"service": "grpc.health.v1.Health"}],
	    "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s",
	      "nonFatalStatusCodes": ["UNAVAILABLE"]}}]}`, grpcbalancer.WithHedgeBudget(budget))
	if err != nil {
		fmt.Println(err)
		return
	}
	conn, err := grpc.NewClient("hedged:///demo", append(hedging.DialOptions(),
		grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	client := healthpb.NewHealthClient(conn)
	// Until every server has answered (all three connected), nothing is
	// held; then server 0 holds.
	for n := 0; n < 1000 && (served[0].Load() == 0 || served[1].Load() == 0 || served[2].Load() == 0); n++ {
		_, _ = client.Check(context.Background(), &healthpb.HealthCheckRequest{})
	}
	hold.Store(true)
	before := served[0].Load()
	failed := 0
	for range 20 {
		if _, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
			failed++
		}
	}
	fmt.Printf("20 RPCs, %d failed, %d answered by the holding server\n", failed, served[0].Load()-before)
	fmt.Println("server 0 held", held.Load() > 0)
	// Output:
	// 20 RPCs, 0 failed, 0 answered by the holding server
	// server 0 held true
}
