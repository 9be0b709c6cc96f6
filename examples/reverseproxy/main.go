// Command reverseproxy is an HTTP reverse proxy on the balancer library:
// it forwards every request to one of its backends, chosen by the picker
// named by -algo, and retries the next backend as nginx's
// proxy_next_upstream does (see package balancerhttp).
//
//	go run ./examples/reverseproxy -listen 127.0.0.1:8080 \
//	    -backends 127.0.0.1:9001,127.0.0.1:9002=3 -algo SmoothWRR
//
// A backend is host:port, optionally followed by =weight. -max-fails and
// -fail-timeout apply to every backend, as nginx's server parameters
// max_fails and fail_timeout; -connect-timeout and -read-timeout to every
// attempt, as nginx's proxy_connect_timeout and proxy_read_timeout. A
// probing picker (-algo Prequal) probes the backends with GET -probe-path,
// which loadreport's Middleware answers, each bounded by -probe-timeout.
//
// The same proxy serving its picker's Prometheus metrics on /metrics is
// the reverseproxy example of the metrics module (metrics/examples), which
// keeps this module free of the Prometheus client.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/backends"
	"github.com/lbgo/balancer/loadreport"
)

func main() {
	err := run(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flag package has printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy:", err)
		os.Exit(2)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("reverseproxy", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	spec := fs.String("backends", "", "comma-separated backends, host:port[=weight]")
	algo := fs.String("algo", "SmoothWRR", "balancing algorithm, any case: "+balancer.AlgorithmNames())
	maxFails := fs.Int("max-fails", balancer.DefaultMaxFails, "failures within -fail-timeout that take a backend out (0: never)")
	failTimeout := fs.Duration("fail-timeout", balancer.DefaultFailTimeout, "how long a failing backend stays out")
	maxTries := fs.Int("max-tries", 0, "attempts per request at most (0: one per backend)")
	connectTimeout := fs.Duration("connect-timeout", 0, "per-attempt wait for a connection, nginx's proxy_connect_timeout; a backend past it has failed (0: the dialer's 30 s)")
	readTimeout := fs.Duration("read-timeout", 0, "per-attempt wait for the headers and for each read of the body, nginx's proxy_read_timeout; a backend past it has failed (0: 60 s for the headers)")
	probePath := fs.String("probe-path", loadreport.DefaultProbePath, "probing pickers (Prequal): the path each probe GETs")
	probeTimeout := fs.Duration("probe-timeout", balancerhttp.DefaultProbeTimeout, "probing pickers (Prequal): each probe's bound")
	quiet := fs.Bool("quiet", false, "do not log requests that end in 502")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"-connect-timeout", *connectTimeout}, {"-read-timeout", *readTimeout}} {
		if f.d < 0 {
			return fmt.Errorf("%s %v: want 0 or more", f.name, f.d)
		}
	}
	a, err := balancer.AlgorithmNamed(*algo)
	if err != nil {
		return fmt.Errorf("-algo: %w", err)
	}
	peers, err := backends.Parse(*spec, balancer.MaxFails(*maxFails), balancer.FailTimeout(*failTimeout))
	if err != nil {
		return err
	}
	var opts []balancer.Option
	if slices.Contains(a.Options, "WithProber") {
		prober, err := balancerhttp.NewProber(balancerhttp.WithProbePath(*probePath), balancerhttp.WithProbeTimeout(*probeTimeout))
		if err != nil {
			return fmt.Errorf("-probe-path, -probe-timeout: %w", err)
		}
		opts = append(opts, balancer.WithProber(prober)) // the picker closes it
	}
	picker, err := a.New(peers, opts...)
	if err != nil {
		return err
	}
	if c, ok := picker.(io.Closer); ok {
		defer c.Close()
	}
	proxy := &balancerhttp.Proxy{Picker: picker, MaxTries: *maxTries, ConnectTimeout: *connectTimeout, ReadTimeout: *readTimeout}
	if *quiet {
		proxy.ErrorLog = log.New(io.Discard, "", 0)
	}
	srv := &http.Server{Addr: *listen, Handler: proxy, ReadHeaderTimeout: 10 * time.Second}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Printf("reverseproxy: %s over %d backends on http://%s", *algo, len(peers), *listen)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
