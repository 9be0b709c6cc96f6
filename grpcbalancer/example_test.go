package grpcbalancer_test

import (
	"context"
	"fmt"
	"net"
	"strings"
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

// A client balancing over three servers on loopback with lbgo_smoothwrr,
// nginx's weighted round robin, weights 2:1:1 from the resolver, and
// client-side health checking: server c says NOT_SERVING, so it gets
// nothing until it says SERVING.
//
// The sequences are nginx's smooth weighted round robin, derived by hand:
// each pick adds every live peer's weight to its current weight, takes the
// largest (the first on a tie) and subtracts the live total from it. Over
// a:2 b:1 (c down) the current weights go (2,1) → a (-1,1), (1,2) → b
// (1,-1), (3,0) → a (0,0): a b a, twice. Then over a:2 b:1 c:1 from (0,0,0):
// (2,1,1) → a (-2,1,1), (0,2,2) → b (0,-2,2), (2,-1,3) → c (2,-1,-1),
// (4,0,0) → a (0,0,0): a b c a.
func Example() {
	names := map[string]string{} // server address → name
	servers := map[string]*health.Server{}
	var addrs []resolver.Address
	for _, name := range []string{"a", "b", "c"} {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println(err)
			return
		}
		srv, hs := grpc.NewServer(), health.NewServer()
		healthpb.RegisterHealthServer(srv, hs)
		go srv.Serve(lis)
		defer srv.Stop()
		names[lis.Addr().String()], servers[name] = name, hs
		weight := 1
		if name == "a" {
			weight = 2
		}
		addrs = append(addrs, grpcbalancer.WithWeight(resolver.Address{Addr: lis.Addr().String()}, weight))
	}
	servers["c"].SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)

	r := manual.NewBuilderWithScheme("example")
	r.InitialState(resolver.State{Addresses: addrs})
	conn, err := grpc.NewClient("example:///backends", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{
		  "loadBalancingConfig": [{"lbgo_smoothwrr": {"maxFails": 1, "failTimeout": "10s"}}],
		  "healthCheckConfig": {"serviceName": ""}}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	conn.Connect()
	client := healthpb.NewHealthClient(conn)
	channel := grpcbalancer.Channel("example:///backends")

	// up waits until the peers that are not down are exactly want.
	up := func(want string) {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			var got []string
			for _, p := range channel.Peers() {
				if !p.State().Down {
					got = append(got, names[p.Addr()])
				}
			}
			if strings.Join(got, " ") == want {
				return
			}
		}
		fmt.Println("peers up: not", want)
	}
	rpcs := func(n int) {
		var answered []string
		for range n {
			var from peer.Peer
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&from))
			cancel()
			if err != nil {
				fmt.Println(err)
				return
			}
			answered = append(answered, names[from.Addr.String()])
		}
		fmt.Println(strings.Join(answered, " "))
	}

	up("a b")
	rpcs(6)
	servers["c"].SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	up("a b c")
	rpcs(4)
	// Output:
	// a b a a b a
	// a b c a
}

// A bad value in the policy's config: gRPC refuses the service config, and
// the error names the field and the value as written.
func Example_badConfig() {
	_, err := grpc.NewClient("passthrough:///127.0.0.1:1",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig": [{"lbgo_fastestfirst": {"maxFails": -1}}]}`))
	fmt.Println(err)
	// Output:
	// grpc: the provided default service config is invalid: error parsing config for policy "lbgo_fastestfirst": grpcbalancer: bad load-balancing config: maxFails -1: negative
}

// lbgo_prequal's probe fields are checked like every other: a value out of
// range, and a probe field on a policy that does not probe, are refused,
// naming the field and the value as written.
func Example_prequalConfig() {
	for _, sc := range []string{
		`{"loadBalancingConfig": [{"lbgo_prequal": {"probeTimeout": "250ms", "probePool": {"size": 4}}}]}`,
		`{"loadBalancingConfig": [{"lbgo_prequal": {"probeTimeout": "0s"}}]}`,
		`{"loadBalancingConfig": [{"lbgo_prequal": {"hotQuantile": 1.5}}]}`,
		`{"loadBalancingConfig": [{"lbgo_p2cpeakewma": {"probeWorkers": 8}}]}`,
	} {
		conn, err := grpc.NewClient("passthrough:///127.0.0.1:1",
			grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultServiceConfig(sc))
		if err != nil {
			fmt.Println(strings.TrimPrefix(err.Error(), "grpc: the provided default service config is invalid: "))
			continue
		}
		fmt.Println("accepted")
		conn.Close()
	}
	// Output:
	// accepted
	// error parsing config for policy "lbgo_prequal": grpcbalancer: bad load-balancing config: probeTimeout "0s": out of (0, 1h0m0s]
	// error parsing config for policy "lbgo_prequal": grpcbalancer: bad load-balancing config: hotQuantile 1.5: out of (0, 1]
	// error parsing config for policy "lbgo_p2cpeakewma": grpcbalancer: bad load-balancing config: probeWorkers 8: the picker P2CPeakEWMA does not probe
}
