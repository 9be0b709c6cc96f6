// Command grpc balances a gRPC client over three local servers with
// FastestFirst and nginx's failure accounting: one server is slow, one
// answers UNAVAILABLE. It starts the servers itself on 127.0.0.1, waits
// until the channel's picker has all three connected, sends a few hundred
// RPCs and prints where they went; no RPC fails, since the retry policy
// retries UNAVAILABLE on another server.
//
//	go run .                                      # in this directory
//	go run . -metrics-listen 127.0.0.1:9092       # then curl 127.0.0.1:9092/metrics
//
// With -metrics-listen, http://METRICS-LISTEN/metrics serves the picker's
// metrics (package metrics, labelled picker="demo", in Prometheus' text
// exposition format) from the start, and the command keeps serving them
// after the RPCs until interrupted. The collector reads the channel's
// picker through grpcbalancer.Channel, by the channel's target.
//
// This directory is a module of its own, so that the grpcbalancer module
// does not depend on Prometheus: its go.mod requires grpcbalancer, metrics
// and the balancer module from this repository (replace directives).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/lbgo/balancer/metrics"
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

// target is dial's target: grpcbalancer.Channel finds the channel's
// picker by it.
const target = "backends:///demo"

// run starts the servers, waits until all three are connected, sends rpcs
// RPCs from 4 goroutines and reports. With metricsListen set it serves
// /metrics there from the start and, once the RPCs are done, calls done
// (if not nil) with the listener's address and serves until ctx ends.
func run(ctx context.Context, w io.Writer, rpcs int, metricsListen string, done func(metrics net.Addr)) (failed int64, err error) {
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
	var stopMetrics func()
	var metricsAddr net.Addr
	if metricsListen != "" {
		if metricsAddr, stopMetrics, err = serveMetrics(metricsListen); err != nil {
			return 0, err
		}
		defer stopMetrics()
	}
	conn, err := dial(addrs)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	if err := connected(ctx, conn, target, len(addrs)); err != nil {
		return 0, err
	}

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
	if metricsAddr != nil {
		fmt.Fprintf(w, "metrics on http://%s/metrics until interrupted\n", metricsAddr)
		if done != nil {
			done(metricsAddr)
		}
		<-ctx.Done()
	}
	return errs.Load(), nil
}

// connected makes conn, the channel of target, connect and waits, for up
// to 10 s, until its picker holds n peers and none is down (gRPC marks a peer down until its
// connection is READY), so that the first RPCs are balanced over all the
// servers rather than over the first to connect.
func connected(ctx context.Context, conn *grpc.ClientConn, target string, n int) error {
	conn.Connect()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		peers := grpcbalancer.Channel(target).Peers()
		up := 0
		for _, p := range peers {
			if p.Stats().Health != lbgo.HealthDown {
				up++
			}
		}
		if len(peers) == n && up == n {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d servers connected: %w", up, n, ctx.Err())
		case <-tick.C:
		}
	}
}

// serveMetrics serves the channel's picker metrics on addr at /metrics.
func serveMetrics(addr string) (net.Addr, func(), error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.New("demo", grpcbalancer.Channel(target))); err != nil {
		return nil, nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln.Addr(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

func main() {
	rpcs := flag.Int("rpcs", 500, "RPCs to send")
	metricsListen := flag.String("metrics-listen", "", "address to serve /metrics on, during the RPCs and after them until interrupted (default: none)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	failed, err := run(ctx, os.Stdout, *rpcs, *metricsListen, nil)
	if err != nil && !errors.Is(err, context.Canceled) {
		log.Fatal(err)
	}
	if failed > 0 {
		os.Exit(1)
	}
}
