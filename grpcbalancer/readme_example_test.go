package grpcbalancer_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/lbgo/balancer/grpcbalancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// The README's gRPC example, as printed there: a client of three servers
// on loopback balanced by lbgo_leastconn. In a program the target is a
// name (dns:///api.internal:8080, every address of the name); here a
// manual resolver names the three servers.
//
// The expected counts: requests made one at a time leave every peer with
// nothing in flight, so LeastConn's every pick is a tie among three peers
// of weight 1, broken by smooth weighted round robin, a rotation over
// equal weights: 30 RPCs are 10 on each server.
func Example_readme() {
	served := map[string]int{}
	var addrs []resolver.Address
	for range 3 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		srv := grpc.NewServer()
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		defer srv.Stop()
		addrs = append(addrs, resolver.Address{Addr: lis.Addr().String()})
	}
	r := manual.NewBuilderWithScheme("readme")
	r.InitialState(resolver.State{Addresses: addrs})
	resolver.Register(r) // the scheme readme: this example's alone
	target := "readme:///api"

	conn, err := grpc.NewClient(target, // "dns:///api.internal:8080": every address of the name
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"lbgo_leastconn": {"maxFails": 1, "failTimeout": "10s"}}]}`))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn) // your service's client

	// Wait until the three connections are READY (not down), so that the
	// counts do not depend on which connected first.
	conn.Connect()
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		up := 0
		for _, p := range grpcbalancer.Channel(target).Peers() {
			if !p.State().Down {
				up++
			}
		}
		if up == 3 {
			break
		}
		if time.Now().After(end) {
			fmt.Println("peers up:", up)
			return
		}
	}
	for range 30 {
		var from peer.Peer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&from))
		cancel()
		if err != nil {
			fmt.Println(err)
			return
		}
		served[from.Addr.String()]++
	}
	for _, a := range addrs {
		fmt.Println(served[a.Addr])
	}
	// Output:
	// 10
	// 10
	// 10
}
