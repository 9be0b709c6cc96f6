// Command httpclient balances an http.Client's requests over local
// backends with balancerhttp.Transport: it starts -backends servers on
// 127.0.0.1, the last of which answers 503 to every other request, sends
// -requests GETs through a client whose Transport picks a backend per
// attempt with the picker named by -algo, and prints how many attempts
// each backend answered and for how many users. The 503s go on to the
// next backend, so every request gets a 200 (-flaky=false: no 503s).
//
//	go run ./examples/httpclient -algo FastestFirst -requests 1000
//	go run ./examples/httpclient -algo LeastConn -reported-load 10s,1
//	go run ./examples/httpclient -algo ConsistentHash -hash-key '$http_x_user'
//
// The picker's flags are the reverse proxy's (package balancerflag): each
// of the library's picker options is a flag whose value is the option's
// arguments, and -h lists them, the pickers that take each and what each
// picker needs from the servers. Prequal probes them, ReportedWRR and
// -reported-load read their load reports: the local backends run
// loadreport's Middleware, which answers both, unless -middleware=false,
// which shows such a picker without them: once it has lasted a second, the
// example logs each backend the picker cannot see (balancer.EventPeerBlind). Each request is one of -users
// users: it carries the header X-User: uN and the path /users/uN, so that
// -hash-key '$http_x_user' (or '$uri') keeps each user on one backend.
//
// The program imports only the library's public packages: copy this
// directory into a module of your own and `go get github.com/lbgo/balancer`.
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
	"strings"
	"sync"
	"sync/atomic"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerflag"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return // -h: the usage is printed
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpclient:", err)
		os.Exit(2)
	}
}

func run(args []string, out, stderr io.Writer) error {
	c, err := configure(args, stderr)
	if err != nil {
		return err
	}
	defer c.close()
	for i := range c.requests {
		user := fmt.Sprint("u", i%c.users)
		// The host is replaced by a peer's address.
		req, err := http.NewRequest(http.MethodGet, "http://backends/users/"+user, nil)
		if err != nil {
			return err
		}
		req.Header.Set("X-User", user)
		resp, err := c.client.Do(req)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return errors.New("got " + resp.Status)
		}
	}
	fmt.Fprintf(out, "%s\n%d requests over %d backends, all 200:\n", c.summary, c.requests, len(c.backends.addrs))
	c.backends.print(out)
	return nil
}

// clientConfig is the client that the flags describe, over its local
// backends, ready to send.
type clientConfig struct {
	client   *http.Client
	picker   balancer.Balancer
	backends *local
	stop     func() // stops the backends
	requests int
	users    int
	summary  string // the picker, its options and what it needs
}

func (c *clientConfig) close() {
	if cl, ok := c.picker.(io.Closer); ok {
		cl.Close()
	}
	c.stop()
}

// configure reads the flags, starts the backends and builds the picker and
// the client; an error names the flag, and leaves nothing running.
func configure(args []string, stderr io.Writer) (*clientConfig, error) {
	fs := flag.NewFlagSet("httpclient", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("backends", 3, "local backends to start")
	requests := fs.Int("requests", 300, "requests to send")
	users := fs.Int("users", 10, "users the requests come from in turn (header X-User: uN, path /users/uN)")
	middleware := fs.Bool("middleware", true, "the backends run loadreport's Middleware: load reports and probe answers")
	flaky := fs.Bool("flaky", true, "the last backend answers 503 to every other request")
	pf := balancerflag.Register(fs, "FastestFirst") // the README's default for one client
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: httpclient [-algo NAME] [-backends N] [-requests N] [flags]")
		fs.PrintDefaults()
		pf.PrintPickers(fs.Output())
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q (every setting is a flag; see -h)", fs.Arg(0))
	}
	switch {
	case *n < 1 || *n > 100:
		return nil, fmt.Errorf("-backends %d: want 1 to 100", *n)
	case *requests < 0:
		return nil, fmt.Errorf("-requests %d: want 0 or more", *requests)
	case *users < 1:
		return nil, fmt.Errorf("-users %d: want 1 or more", *users)
	}
	backends, stop, err := startBackends(*n, *middleware, *flaky)
	if err != nil {
		return nil, err
	}
	var peers []*balancer.Peer
	for _, addr := range backends.addrs {
		peers = append(peers, balancer.NewPeer(addr))
	}
	logger := log.New(stderr, "httpclient: ", 0)
	picker, err := pf.New(peers, balancer.WithEvents(logBlind(logger, algorithmName(fs))))
	if err != nil {
		stop()
		return nil, err
	}
	// The core: a client whose Transport picks a backend per attempt.
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker, Key: pf.Key()}}
	summary := pf.String()
	if !*middleware {
		summary += " (the backends run no middleware)"
	}
	return &clientConfig{
		client: client, picker: picker, backends: backends, stop: stop,
		requests: *requests, users: *users, summary: summary,
	}, nil
}

// local is the set of backends the example starts.
type local struct {
	addrs []string
	mu    sync.Mutex
	hits  map[string]map[int]int     // addr -> status -> answers
	users map[string]map[string]bool // addr -> the users it answered 200
}

// startBackends starts n servers on 127.0.0.1, behind loadreport's
// Middleware if middleware is set; if flaky is set, the last answers 503
// to every other request when there are several.
func startBackends(n int, middleware, flaky bool) (*local, func(), error) {
	l := &local{hits: map[string]map[int]int{}, users: map[string]map[string]bool{}}
	var srvs []*httptest.Server
	stop := func() {
		for _, s := range srvs {
			s.Close()
		}
	}
	for i := range n {
		var count atomic.Int64
		flaky := flaky && n > 1 && i == n-1
		var addr string
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !strings.HasPrefix(r.URL.Path, "/users/") {
				// Not the example's: a probe, when there is no
				// middleware to answer it.
				http.NotFound(w, r)
				return
			}
			status := http.StatusOK
			if flaky && count.Add(1)%2 == 0 {
				status = http.StatusServiceUnavailable
			}
			l.mu.Lock()
			l.hits[addr][status]++
			if status == http.StatusOK {
				l.users[addr][r.Header.Get("X-User")] = true
			}
			l.mu.Unlock()
			w.WriteHeader(status)
		})
		if middleware {
			m, err := loadreport.New()
			if err != nil {
				stop()
				return nil, nil, err
			}
			h = m.Handler(h)
		}
		srv := httptest.NewServer(h)
		addr = srv.Listener.Addr().(*net.TCPAddr).String()
		l.hits[addr] = map[int]int{}
		l.users[addr] = map[string]bool{}
		l.addrs = append(l.addrs, addr)
		srvs = append(srvs, srv)
	}
	return l, stop, nil
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
		fmt.Fprintf(out, ", %d users\n", len(l.users[addr]))
	}
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

// algorithmName is the canonical name of the picker -algo names, or the
// flag's text if it names none (the picker's constructor refuses it then).
func algorithmName(fs *flag.FlagSet) string {
	name := fs.Lookup("algo").Value.String()
	if a, err := balancer.AlgorithmNamed(name); err == nil {
		return a.Name
	}
	return name
}
