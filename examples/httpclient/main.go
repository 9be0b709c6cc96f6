// Command httpclient balances an http.Client's requests over local
// backends with balancerhttp.Transport: it starts -backends servers on
// 127.0.0.1, the last of which answers 503 to every other request, sends
// -requests GETs through a client whose Transport picks a backend per
// attempt with the picker named by -algo, and prints how many attempts
// each backend answered. The 503s go on to the next backend, so every
// request gets a 200. The backends run no load-reporting middleware: a
// picker that balances by their load reports (ReportedWRR, or one given
// balancer.WithReportedLoad) cannot see their load, and once that has
// lasted a second the example logs it (balancer.EventPeerBlind).
//
//	go run ./examples/httpclient -algo FastestFirst -requests 1000
//
// The same client with its picker's metrics served to Prometheus on
// -metrics-listen is metrics/examples/httpclient, in the metrics module,
// so that this module does not depend on Prometheus.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

func main() {
	err := run(os.Args[1:], os.Stdout)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the flag package has printed the usage
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpclient:", err)
		os.Exit(2)
	}
}

func run(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("httpclient", flag.ContinueOnError)
	algo := fs.String("algo", "FastestFirst", "balancing algorithm, any case (FastestFirst: the README's default for one client): "+balancer.AlgorithmNames())
	n := fs.Int("backends", 3, "local backends to start")
	requests := fs.Int("requests", 300, "requests to send")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n < 1 || *requests < 0 {
		return fmt.Errorf("-backends %d, -requests %d: want at least 1 backend and no negative count", *n, *requests)
	}
	backends, stop := startBackends(*n)
	defer stop()

	// The core: a picker from the registry, a client with the Transport.
	a, err := balancer.AlgorithmNamed(*algo)
	if err != nil {
		return fmt.Errorf("-algo: %w", err)
	}
	var peers []*balancer.Peer
	for _, addr := range backends.addrs {
		peers = append(peers, balancer.NewPeer(addr))
	}
	picker, err := a.New(peers, balancer.WithEvents(logBlind(log.New(out, "httpclient: ", 0), a.Name)))
	if err != nil {
		return err
	}
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}}

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
	fmt.Fprintf(out, "%s, %d requests, all 200:\n", a.Name, *requests)
	backends.print(out)
	return nil
}

// logBlind returns a WithEvents hook that logs when the picker can no
// longer see a backend's load (balancer.EventPeerBlind: its probes fail,
// or its replies carry no usable load report, for a second and more) and
// when it can again (EventPeerSeen). The picker goes on by its fallback;
// without the log, nothing would show it.
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

// local is the set of backends the example starts.
type local struct {
	addrs []string
	mu    sync.Mutex
	hits  map[string]map[int]int // addr -> status -> answers
}

// startBackends starts n servers on 127.0.0.1; the last answers 503 to
// every other request when there are several.
func startBackends(n int) (*local, func()) {
	l := &local{hits: map[string]map[int]int{}}
	var srvs []*httptest.Server
	for i := range n {
		var count atomic.Int64
		flaky := n > 1 && i == n-1
		var addr string
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			status := http.StatusOK
			if flaky && count.Add(1)%2 == 0 {
				status = http.StatusServiceUnavailable
			}
			l.mu.Lock()
			l.hits[addr][status]++
			l.mu.Unlock()
			w.WriteHeader(status)
		}))
		addr = srv.Listener.Addr().(*net.TCPAddr).String()
		l.hits[addr] = map[int]int{}
		l.addrs = append(l.addrs, addr)
		srvs = append(srvs, srv)
	}
	return l, func() {
		for _, s := range srvs {
			s.Close()
		}
	}
}

func (l *local) print(out io.Writer) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, addr := range l.addrs {
		var codes []int
		for c := range l.hits[addr] {
			codes = append(codes, c)
		}
		sort.Ints(codes)
		fmt.Fprintf(out, "  backend %d (%s):", i+1, addr)
		for _, c := range codes {
			fmt.Fprintf(out, " %d×%d", l.hits[addr][c], c)
		}
		fmt.Fprintln(out)
	}
}
