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
// client's address. Each of the library's picker options is a flag whose
// value is the option's arguments (-reported-load 10s,16 is
// balancer.WithReportedLoad(10*time.Second, 16)); -h lists them, the
// pickers that take each, and what each picker needs from the servers:
// Prequal probes them (GET -probe-path, which loadreport's Middleware
// answers), ReportedWRR and -reported-load read their load reports (the
// Middleware again). At start the proxy logs the picker, its options and
// what it needs; while it serves, it logs each backend whose load such a
// picker cannot see (its probes fail, its replies carry no usable report,
// for a second and more: the picker then balances it by its fallback) and
// each it sees again.
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
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
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
	c.log.Printf("reverseproxy: %s on http://%s", c.summary, c.listen)
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
	algo := fs.String("algo", "SmoothWRR", "balancing algorithm, any case: "+balancer.AlgorithmNames())
	maxFails := fs.Int("max-fails", balancer.DefaultMaxFails, "failures within -fail-timeout that take a backend out (0: never)")
	failTimeout := fs.Duration("fail-timeout", balancer.DefaultFailTimeout, "how long a failing backend stays out")
	maxTries := fs.Int("max-tries", 0, "attempts per request at most (0: one per backend)")
	connectTimeout := fs.Duration("connect-timeout", 0, "per-attempt wait for a connection, nginx's proxy_connect_timeout; a backend past it has failed (0: the dialer's 30 s)")
	readTimeout := fs.Duration("read-timeout", 0, "per-attempt wait for the headers and for each read of the body, nginx's proxy_read_timeout; a backend past it has failed (0: 60 s for the headers)")
	hashKey := fs.String("hash-key", "", "Hash and ConsistentHash: each request's key, nginx's hash key ($http_x_user, $cookie_session, $arg_id, $remote_addr, $host, $uri, $request_uri, $args, and text)")
	probePath := fs.String("probe-path", loadreport.DefaultProbePath, "Prequal: the path each probe GETs")
	probeTimeout := fs.Duration("probe-timeout", balancerhttp.DefaultProbeTimeout, "Prequal: each probe's bound")
	quiet := fs.Bool("quiet", false, "do not log requests that end in 502")
	for _, f := range optionFlags {
		fs.String(f.name, "", fmt.Sprintf("`%s` of balancer.%s: %s (%s)", f.args, f.option, f.usage, pickersOf(f.option)))
	}
	fs.Usage = func() { usage(fs) }
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every setting is a flag; see -h)", fs.Arg(0))
	}
	set := map[string]string{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = f.Value.String() })

	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"-connect-timeout", *connectTimeout}, {"-read-timeout", *readTimeout}} {
		if f.d < 0 {
			return nil, fmt.Errorf("%s %v: want 0 or more", f.name, f.d)
		}
	}
	a, err := balancer.AlgorithmNamed(*algo)
	if err != nil {
		return nil, fmt.Errorf("-algo: %w", err)
	}
	peers, err := parseBackends(*spec, balancer.MaxFails(*maxFails), balancer.FailTimeout(*failTimeout))
	if err != nil {
		return nil, err
	}
	opts, err := options(a, set)
	if err != nil {
		return nil, err
	}
	proxy := &balancerhttp.Proxy{MaxTries: *maxTries, ConnectTimeout: *connectTimeout, ReadTimeout: *readTimeout}
	switch keyed := slices.Contains([]string{"Hash", "ConsistentHash"}, a.Name); {
	case keyed && *hashKey == "":
		return nil, fmt.Errorf("-hash-key is required with -algo %s (nginx's hash takes a key: $http_x_user, say)", a.Name)
	case !keyed && *hashKey != "":
		return nil, fmt.Errorf("-hash-key: -algo %s takes no key (Hash and ConsistentHash do; IPHash hashes the client's address)", a.Name)
	case keyed:
		if proxy.Key, err = parseKey(*hashKey); err != nil {
			return nil, err
		}
	}
	_, probeFlags := set["probe-path"]
	if _, ok := set["probe-timeout"]; ok {
		probeFlags = true
	}
	switch probing := slices.Contains(a.Options, "WithProber"); {
	case probing:
		prober, err := balancerhttp.NewProber(balancerhttp.WithProbePath(*probePath), balancerhttp.WithProbeTimeout(*probeTimeout))
		if err != nil {
			return nil, fmt.Errorf("-probe-path, -probe-timeout: %w", err)
		}
		opts = append(opts, balancer.WithProber(prober)) // the picker closes it
	case probeFlags:
		return nil, fmt.Errorf("-probe-path, -probe-timeout: -algo %s sends no probes (%s does)", a.Name, pickersOf("WithProber"))
	}
	logger := log.New(stderr, "", log.LstdFlags)
	opts = append(opts, balancer.WithEvents(logBlind(logger, a.Name)))
	picker, err := a.New(peers, opts...)
	if err != nil {
		return nil, err
	}
	proxy.Picker = picker
	if *quiet {
		proxy.ErrorLog = log.New(io.Discard, "", 0)
	} else {
		proxy.ErrorLog = logger
	}
	summary := fmt.Sprintf("%s over %d backends", a.Name, len(peers))
	var given []string
	for _, f := range optionFlags {
		if v, ok := set[f.name]; ok {
			given = append(given, "-"+f.name+" "+v)
		}
	}
	if len(given) > 0 {
		summary += " (" + strings.Join(given, ", ") + ")"
	}
	if n := needs(a, set); n != "" {
		summary += "; it needs " + n
	}
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

// pickersOf names the pickers that take the option.
func pickersOf(option string) string {
	if t := takers(option); strings.Count(t, ",") < len(balancer.Algorithms())-1 {
		return t
	}
	return "every picker"
}

// usage prints the flags, then each picker with its flags and what it needs
// from the servers.
func usage(fs *flag.FlagSet) {
	w := fs.Output()
	fmt.Fprintln(w, "Usage: reverseproxy -backends host:port[=weight],... [-algo NAME] [flags]")
	fs.PrintDefaults()
	fmt.Fprintln(w, "\nPickers, the option flags each takes besides the guards, and what each needs from the servers:")
	for _, a := range balancer.Algorithms() {
		var own []string
		for _, f := range optionFlags {
			if slices.Contains(a.Options, f.option) {
				own = append(own, "-"+f.name)
			}
		}
		if slices.Contains([]string{"Hash", "ConsistentHash"}, a.Name) {
			own = append(own, "-hash-key (required)")
		}
		if slices.Contains(a.Options, "WithProber") {
			own = append(own, "-probe-path", "-probe-timeout")
		}
		line := "  " + a.Name
		if len(own) > 0 {
			line += ": " + strings.Join(own, " ")
		}
		if n := needs(a, map[string]string{"reported-load": ""}); n != "" {
			line += "\n      needs " + n
		}
		fmt.Fprintln(w, line)
	}
}
