// Command grpc balances a gRPC client over three local servers with
// FastestFirst and nginx's failure accounting: one server is slow, one
// answers UNAVAILABLE. It starts the servers itself on 127.0.0.1, sends a
// few hundred RPCs and prints where they went; no RPC fails, since the
// retry policy retries UNAVAILABLE on another server.
//
//	go run ./examples/grpc
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer/grpcbalancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// dial is what a user writes: importing grpcbalancer registers the
// lbgo_* policies; the service config picks one and a retry policy.
func dial(addrs []string) (*grpc.ClientConn, error) {
	r := manual.NewBuilderWithScheme("backends")
	r.InitialState(resolver.State{Addresses: []resolver.Address{
		grpcbalancer.WithWeight(resolver.Address{Addr: addrs[0]}, 2),
		{Addr: addrs[1]},
		{Addr: addrs[2]},
	}})
	return grpc.NewClient("backends:///demo", grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(`{
		  "loadBalancingConfig": [{"lbgo_fastestfirst": {"maxFails": 1, "failTimeout": "1s"}}],
		  "methodConfig": [{"name": [{}], "retryPolicy": {"maxAttempts": 3,
		    "initialBackoff": "0.01s", "maxBackoff": "0.1s", "backoffMultiplier": 2,
		    "retryableStatusCodes": ["UNAVAILABLE"]}}]}`))
}

// server is a local health server that may be slow or failing.
type server struct {
	name    string
	addr    string
	delay   time.Duration
	failing bool
	served  atomic.Int64
	failed  atomic.Int64
	srv     *grpc.Server
}

func (s *server) start() error {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.addr = lis.Addr().String()
	s.srv = grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		time.Sleep(s.delay)
		if s.failing {
			s.failed.Add(1)
			return nil, status.Error(codes.Unavailable, "overloaded")
		}
		s.served.Add(1)
		return h(ctx, req)
	}))
	healthpb.RegisterHealthServer(s.srv, health.NewServer())
	go s.srv.Serve(lis)
	return nil
}

// run starts the servers, sends rpcs RPCs from 4 goroutines and reports.
func run(w io.Writer, rpcs int) (failed int64, err error) {
	servers := []*server{
		{name: "fast (weight 2)"},
		{name: "slow (+20ms)", delay: 20 * time.Millisecond},
		{name: "failing", failing: true},
	}
	var addrs []string
	for _, s := range servers {
		if err := s.start(); err != nil {
			return 0, err
		}
		defer s.srv.Stop()
		addrs = append(addrs, s.addr)
	}
	conn, err := dial(addrs)
	if err != nil {
		return 0, err
	}
	defer conn.Close()

	client := healthpb.NewHealthClient(conn)
	var next, errs atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for next.Add(1) <= int64(rpcs) {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					errs.Add(1)
				}
				cancel()
			}
		})
	}
	wg.Wait()
	fmt.Fprintf(w, "%d RPCs, %d failed\n", rpcs, errs.Load())
	for _, s := range servers {
		fmt.Fprintf(w, "%-16s %s  served %4d  answered UNAVAILABLE %d\n", s.name, s.addr, s.served.Load(), s.failed.Load())
	}
	return errs.Load(), nil
}

func main() {
	rpcs := flag.Int("rpcs", 500, "RPCs to send")
	flag.Parse()
	failed, err := run(os.Stdout, *rpcs)
	if err != nil {
		log.Fatal(err)
	}
	if failed > 0 {
		os.Exit(1)
	}
}
