// Command reverseproxy is the balancer's HTTP reverse proxy (see package
// balancerhttp) with its picker's metrics served to Prometheus: the proxy
// forwards every request to one of its backends, chosen by the picker named
// by -algo, retrying as nginx's proxy_next_upstream does, and
// http://METRICS-LISTEN/metrics serves the metrics of package metrics, in
// Prometheus' text exposition format, labelled picker="proxy".
//
//	go run ./examples/reverseproxy -listen 127.0.0.1:8080 \
//	    -metrics-listen 127.0.0.1:9091 \
//	    -backends 127.0.0.1:9001,127.0.0.1:9002=3 -algo SmoothWRR
//
// The metrics have a listener of their own: the proxy forwards every path
// of its own listener, a backend's /metrics included, so it cannot take a
// path there without hiding one of the backends'; and a metrics port can
// stay private while the proxy's is public.
//
// A backend is host:port, optionally followed by =weight. -max-fails and
// -fail-timeout apply to every backend, as nginx's server parameters
// max_fails and fail_timeout. A picker that balances by what the backends
// say of their load (Prequal, ReportedWRR) and hears nothing usable from
// one logs it, and balancer_peer_blind shows it.
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
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/backends"
	"github.com/lbgo/balancer/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], func(proxy, metrics net.Addr) {
		log.Printf("reverseproxy: serving on http://%s, metrics on http://%s/metrics", proxy, metrics)
	})
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flag package has printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy:", err)
		os.Exit(2)
	}
}

// run serves until ctx ends, calling ready with the two listeners'
// addresses once both accept connections.
func run(ctx context.Context, args []string, ready func(proxy, metrics net.Addr)) error {
	fs := flag.NewFlagSet("reverseproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve the proxy on")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9091", "address to serve /metrics on")
	spec := fs.String("backends", "", "comma-separated backends, host:port[=weight]")
	algo := fs.String("algo", "SmoothWRR", "balancing algorithm, any case: "+algorithmNames())
	// nginx's max_fails and fail_timeout defaults, as balancer.MaxFails
	// and balancer.FailTimeout state them.
	maxFails := fs.Int("max-fails", 1, "failures within -fail-timeout that take a backend out (0: never)")
	failTimeout := fs.Duration("fail-timeout", 10*time.Second, "how long a failing backend stays out")
	quiet := fs.Bool("quiet", false, "do not log requests that end in 502")
	if err := fs.Parse(args); err != nil {
		return err
	}
	a, err := balancer.AlgorithmNamed(*algo)
	if err != nil {
		return fmt.Errorf("-algo: %w", err)
	}
	peers, err := backends.Parse(*spec, balancer.MaxFails(*maxFails), balancer.FailTimeout(*failTimeout))
	if err != nil {
		return err
	}
	picker, err := a.New(peers, balancer.WithEvents(logBlind(log.New(os.Stderr, "reverseproxy: ", log.LstdFlags), a.Name)))
	if err != nil {
		return err
	}

	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.New("proxy", picker)); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	proxy := &balancerhttp.Proxy{Picker: picker}
	if *quiet {
		proxy.ErrorLog = log.New(io.Discard, "", 0)
	}
	servers := []*http.Server{
		{Handler: proxy, ReadHeaderTimeout: 10 * time.Second},
		{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
	}
	var lns []net.Listener
	for _, addr := range []string{*listen, *metricsListen} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return err
		}
		lns = append(lns, ln)
	}
	errc := make(chan error, len(servers))
	for i, srv := range servers {
		go func() { errc <- srv.Serve(lns[i]) }()
	}
	if ready != nil {
		ready(lns[0].Addr(), lns[1].Addr())
	}
	var served error
	select {
	case served = <-errc:
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) && served == nil {
			served = err
		}
	}
	return served
}

// logBlind returns a WithEvents hook that logs when the picker can no
// longer see a backend's load (balancer.EventPeerBlind: its probes fail,
// or its replies carry no usable load report, for a second and more; the
// metric balancer_peer_blind is then 1) and when it can again
// (EventPeerSeen). The picker goes on by its fallback either way.
func logBlind(l *log.Logger, picker string) func(balancer.Event) {
	return func(e balancer.Event) {
		switch e.Kind {
		case balancer.EventPeerBlind:
			l.Printf("%s is blind to backend %s: %d misses in a row, the last: %v", picker, e.Peer.Addr(), e.Misses, e.Err)
		case balancer.EventPeerSeen:
			l.Printf("%s sees backend %s's load again", picker, e.Peer.Addr())
		}
	}
}

// algorithmNames returns the pickers' names, comma-separated, for -algo's
// help.
func algorithmNames() string {
	var names []string
	for _, a := range balancer.Algorithms() {
		names = append(names, a.Name)
	}
	return strings.Join(names, ", ")
}
