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
// attempt, as nginx's proxy_connect_timeout and proxy_read_timeout.
// -hash-key is the key of Hash and ConsistentHash, nginx's hash key
// ($http_x_user, $cookie_session, $request_uri...); IPHash hashes the
// client's address. Each of the library's picker options is a flag
// (package balancerflag defines them, -algo and -hash-key too) whose
// value is the option's arguments (-reported-load 10s,16 is
// balancer.WithReportedLoad(10*time.Second, 16)); -h lists them, the
// pickers that take each, and what each picker needs from the servers:
// Prequal probes them (GET -probe-path, which loadreport's Middleware
// answers), ReportedWRR and -reported-load read their load reports (the
// Middleware again). At start the proxy logs the picker, its options and
// what it needs.
//
// The program imports only the library's public packages: copy this
// directory into a module of your own and `go get github.com/lbgo/balancer`.
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
	"syscall"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerflag"
	"github.com/lbgo/balancer/balancerhttp"
)

func main() {
	err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "reverseproxy:", err)
		os.Exit(2)
	}
}

// run serves until SIGINT or SIGTERM.
func run(args []string, stderr io.Writer) error {
	c, err := configure(args, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	srv := &http.Server{Addr: c.listen, Handler: c.proxy, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	c.log.Printf("reverseproxy: http://%s, %s", c.listen, c.summary)
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

// proxyConfig is the proxy that the flags describe, ready to serve.
type proxyConfig struct {
	listen  string
	proxy   *balancerhttp.Proxy
	picker  balancer.Balancer
	summary string // the picker, its options and what it needs, for the log
	log     *log.Logger
}

func (c *proxyConfig) close() {
	if cl, ok := c.picker.(io.Closer); ok {
		cl.Close()
	}
}

// configure reads the flags and builds the picker and the proxy; an error
// names the flag.
func configure(args []string, stderr io.Writer) (*proxyConfig, error) {
	fs := flag.NewFlagSet("reverseproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8080", "address to serve on")
	spec := fs.String("backends", "", "comma-separated backends, host:port[=weight]")
	// nginx's max_fails and fail_timeout defaults, as balancer.MaxFails
	// and balancer.FailTimeout state them.
	maxFails := fs.Int("max-fails", 1, "failures within -fail-timeout that take a backend out (0: never)")
	failTimeout := fs.Duration("fail-timeout", 10*time.Second, "how long a failing backend stays out")
	maxTries := fs.Int("max-tries", 0, "attempts per request at most (0: one per backend)")
	connectTimeout := fs.Duration("connect-timeout", 0, "per-attempt wait for a connection, nginx's proxy_connect_timeout; a backend past it has failed (0: the dialer's 30 s)")
	readTimeout := fs.Duration("read-timeout", 0, "per-attempt wait for the headers and for each read of the body, nginx's proxy_read_timeout; a backend past it has failed (0: 60 s for the headers)")
	pf := balancerflag.Register(fs, "SmoothWRR")
	quiet := fs.Bool("quiet", false, "do not log requests that end in 502")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: reverseproxy -backends host:port[=weight],... [-algo NAME] [flags]")
		fs.PrintDefaults()
		pf.PrintPickers(fs.Output())
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every setting is a flag; see -h)", fs.Arg(0))
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"-connect-timeout", *connectTimeout}, {"-read-timeout", *readTimeout}} {
		if f.d < 0 {
			return nil, fmt.Errorf("%s %v: want 0 or more", f.name, f.d)
		}
	}
	peers, err := parseBackends(*spec, balancer.MaxFails(*maxFails), balancer.FailTimeout(*failTimeout))
	if err != nil {
		return nil, err
	}
	logger := log.New(stderr, "", log.LstdFlags)
	picker, err := pf.New(peers, balancer.WithEvents(logBlind(logger, algorithmName(fs))))
	if err != nil {
		return nil, err
	}
	proxy := &balancerhttp.Proxy{MaxTries: *maxTries, ConnectTimeout: *connectTimeout, ReadTimeout: *readTimeout, Key: pf.Key()}
	proxy.Picker = picker
	if *quiet {
		proxy.ErrorLog = log.New(io.Discard, "", 0)
	} else {
		proxy.ErrorLog = logger
	}
	summary := fmt.Sprintf("%d backends, %s", len(peers), pf)
	return &proxyConfig{listen: *listen, proxy: proxy, picker: picker, summary: summary, log: logger}, nil
}

// logBlind returns a WithEvents hook that logs when the picker can no
// longer see a backend's load (balancer.EventPeerBlind: its probes fail,
// or its replies carry no usable load report, for a second and more) and
// when it can again (EventPeerSeen). The picker goes on serving by its
// fallback either way; without the log, nothing would show it.
func logBlind(l *log.Logger, picker string) func(balancer.Event) {
	return func(e balancer.Event) {
		switch e.Kind {
		case balancer.EventPeerBlind:
			hint := "run loadreport's Middleware there"
			if errors.Is(e.Err, balancer.ErrUnusableLoadReport) {
				hint = "ReportedWRR needs a utilization in them: loadreport.WithUtilization"
			}
			l.Printf("reverseproxy: %s is blind to backend %s: %d misses in a row, the last: %v; it balances it without its load (%s)",
				picker, e.Peer.Addr(), e.Misses, e.Err, hint)
		case balancer.EventPeerSeen:
			l.Printf("reverseproxy: %s sees backend %s's load again", picker, e.Peer.Addr())
		}
	}
}

// algorithmName is the canonical name of the picker -algo names, or the
// flag's text if it names none (the picker's constructor refuses it then).
func algorithmName(fs *flag.FlagSet) string {
	name := fs.Lookup("algo").Value.String()
	if a, err := balancer.AlgorithmNamed(name); err == nil {
		return a.Name
	}
	return name
}
