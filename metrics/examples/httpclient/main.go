// Command httpclient is the balancer's HTTP client (balancerhttp.Transport,
// as in the root module's examples/httpclient) with its picker's metrics
// served to Prometheus: it starts three backends on 127.0.0.1, the last of
// which answers 503 to every other request, serves
// http://METRICS-LISTEN/metrics (package metrics, labelled picker="client",
// in Prometheus' text exposition format), sends -requests GETs through a
// client whose Transport picks a backend per attempt with the picker named
// by -algo, and keeps serving the metrics until interrupted.
//
//	go run ./examples/httpclient -algo RoundRobin -requests 100 \
//	    -metrics-listen 127.0.0.1:9092     # in the metrics module
//	curl -s 127.0.0.1:9092/metrics | grep balancer_
//
// A 503 is a failure of its backend (nginx's max_fails=1 fail_timeout=10s,
// the defaults, take it out for 10 s) and the GET goes on to the next
// backend, so every request gets a 200 and the attempts add up to the
// requests plus the failures.
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
	"net/http/httptest"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/metrics"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout, nil)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flag package has printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpclient:", err)
		os.Exit(2)
	}
}

// run serves /metrics, sends the requests and, once they are done, calls
// done (if not nil) with the metrics listener's address and serves until
// ctx ends.
func run(ctx context.Context, args []string, out io.Writer, done func(metrics net.Addr)) error {
	fs := flag.NewFlagSet("httpclient", flag.ContinueOnError)
	algo := fs.String("algo", "FastestFirst", "balancing algorithm, any case (FastestFirst: the README's default for one client): "+algorithmNames())
	requests := fs.Int("requests", 300, "requests to send")
	metricsListen := fs.String("metrics-listen", "127.0.0.1:9092", "address to serve /metrics on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *requests < 0 {
		return fmt.Errorf("-requests %d: want no negative count", *requests)
	}
	a, err := balancer.AlgorithmNamed(*algo)
	if err != nil {
		return fmt.Errorf("-algo: %w", err)
	}

	var peers []*balancer.Peer
	fmt.Fprint(out, "backends:")
	for i := range 3 {
		srv := httptest.NewServer(backend(i == 2))
		defer srv.Close()
		peers = append(peers, balancer.NewPeer(srv.Listener.Addr().String()))
		fmt.Fprint(out, " ", srv.Listener.Addr())
	}
	fmt.Fprintln(out, " (the last answers 503 to every other request)")
	picker, err := a.New(peers, balancer.WithEvents(logBlind(log.New(out, "httpclient: ", 0), a.Name)))
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}, Timeout: 10 * time.Second}

	// The metrics: a registry with the picker's collector, on a listener.
	reg := prometheus.NewRegistry()
	if err := reg.Register(metrics.New("client", picker)); err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", *metricsListen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shut)
	}()

	for range *requests {
		resp, err := client.Get("http://backends/hello") // the host is replaced by a peer's address
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New("got " + resp.Status)
		}
	}
	fmt.Fprintf(out, "%s, %d requests, all 200; metrics on http://%s/metrics until interrupted\n", a.Name, *requests, ln.Addr())
	if done != nil {
		done(ln.Addr())
	}
	<-ctx.Done()
	return nil
}

// backend answers 200, or, if flaky, 503 to every other request (the
// 2nd, 4th, ...).
func backend(flaky bool) http.Handler {
	var n atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if flaky && n.Add(1)%2 == 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ok")
	})
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
