//go:build unix

package balancer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lbgo/balancer/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// This file records what a real nginx does: it runs one nginx in the
// foreground as a reverse proxy in front of many upstream blocks at once,
// sends each block its requests one after another, and reads back the
// $upstream_addr nginx logged for each request.

// liveServer is one server line of an upstream block.
type liveServer struct {
	params string // nginx parameters, such as "weight=5 max_fails=2"
	dead   bool   // its port refuses every connection
	// same, if not 0, is 1 + the index of an earlier server whose address
	// this one repeats (a second server line with one address, which
	// nginx takes as a server of its own); dead must then be that one's.
	same int
}

// liveCase is one upstream configuration and how many requests to send it.
type liveCase struct {
	servers []liveServer
	n       int
	// method is the block's balancing-method directive without its ";",
	// such as "hash $arg_k consistent"; "" is round robin.
	method string
	// keys, if not nil, holds request i's query argument k, sent as
	// /...?k=KEY ($arg_k); the keys are sent unescaped, so they must be
	// URL-safe.
	keys []string
	// clients, if not nil, holds the loopback address request i is sent
	// from ($remote_addr), such as 127.1.2.3.
	clients []netip.Addr
}

// liveResult is what nginx did with one liveCase.
type liveResult struct {
	name   string   // the upstream block's name
	block  string   // the upstream block nginx ran, with its real addresses
	addrs  []string // addrs[i] is server i's address
	trace  []string // $upstream_addr of each request, in order
	status []int    // HTTP status of each request
}

// letters maps the addresses of a trace entry back to server letters (a, b,
// ...) and the upstream name to "back", the notation of the recorded
// vectors. An address two servers share maps to the first one's letter, as
// nginx logs the same address for both.
func (r *liveResult) letters(entry string) string {
	parts := strings.Split(entry, ", ")
	for i, p := range parts {
		switch p {
		case r.name:
			parts[i] = "back"
		default:
			if j := slices.Index(r.addrs, p); j >= 0 {
				parts[i] = string(rune('a' + j))
			}
		}
	}
	return strings.Join(parts, ", ")
}

// letterTrace applies letters to every entry of trace.
func (r *liveResult) letterTrace(trace []string) []string {
	out := make([]string, len(trace))
	for i, e := range trace {
		out[i] = r.letters(e)
	}
	return out
}

// findNginx returns the nginx binary on PATH or at its Debian location.
func findNginx() (string, bool) {
	if p, err := exec.LookPath("nginx"); err == nil {
		return p, true
	}
	const debian = "/usr/sbin/nginx"
	if fi, err := os.Stat(debian); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return debian, true
	}
	return "", false
}

// refusingPort returns a loopback port that refuses connections: a socket
// bound to it but never listening. Holding the binding until the test ends,
// rather than binding and closing, keeps the port from being handed to
// anyone else, including as the local port of nginx's own connect to it
// (a self-connect would succeed and make the dead server live).
func refusingPort(t *testing.T) (int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return 0, fmt.Errorf("socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	t.Cleanup(func() { syscall.Close(fd) })
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		return 0, fmt.Errorf("bind 127.0.0.1:0: %w", err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		return 0, fmt.Errorf("getsockname: %w", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		return 0, fmt.Errorf("getsockname: unexpected %T", sa)
	}
	return in.Port, nil
}

// nginxBatch is one nginx process serving a batch of cases.
type nginxBatch struct {
	bin       string
	dir       string
	cases     []liveCase
	results   []liveResult
	proxy     string             // host:port of the proxy server
	listeners []*net.TCPListener // the proxy's, then the backends'
	cmd       *exec.Cmd
	done      chan struct{} // closed when cmd has exited
	waitErr   error
	output    strings.Builder // nginx's stdout and stderr
}

// runNginx records cases on one nginx started from bin and returns their
// results in order. Every case gets its own upstream block and location,
// so nginx's per-upstream state never mixes cases; the backends and refusing
// ports are shared, server i of every case using the i-th of each.
func runNginx(ctx context.Context, t *testing.T, bin string, cases []liveCase) ([]liveResult, error) {
	b := &nginxBatch{bin: bin, dir: t.TempDir(), cases: cases}
	if err := b.configure(t); err != nil {
		return nil, err
	}
	if err := b.start(t); err != nil {
		return nil, err
	}
	sendErr := b.send(ctx)
	stopErr := b.stop()
	if err := errors.Join(sendErr, stopErr); err != nil {
		return nil, fmt.Errorf("%w\nnginx error log:\n%s", err, b.errorLog())
	}
	if err := b.readLog(); err != nil {
		return nil, fmt.Errorf("%w\nnginx error log:\n%s", err, b.errorLog())
	}
	return b.results, nil
}

// configure takes the ports and writes nginx.conf. The listening sockets
// are opened here and handed to nginx already listening (see start), so no
// other process can take a port between its choice and nginx's bind, and a
// request that arrives before nginx is ready waits in the backlog.
func (b *nginxBatch) configure(t *testing.T) error {
	width := 0
	for _, c := range b.cases {
		width = max(width, len(c.servers))
	}
	t.Cleanup(func() {
		for _, l := range b.listeners {
			l.Close()
		}
	})
	listen := func() (string, error) {
		l, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return "", err
		}
		b.listeners = append(b.listeners, l)
		return l.Addr().String(), nil
	}
	var err error
	if b.proxy, err = listen(); err != nil {
		return err
	}
	liveAddrs := make([]string, width)
	deadAddrs := make([]string, width)
	for i := range width {
		if liveAddrs[i], err = listen(); err != nil {
			return err
		}
		port, err := refusingPort(t)
		if err != nil {
			return err
		}
		deadAddrs[i] = "127.0.0.1:" + strconv.Itoa(port)
	}

	var conf strings.Builder
	// Paths in the configuration are quoted, in case the temporary
	// directory's name has a space.
	path := func(name string) string { return strconv.Quote(filepath.Join(b.dir, name)) }
	// A master process, because nginx 1.22 without one crashes on
	// inherited sockets; one worker, so one smooth state per upstream.
	fmt.Fprintf(&conf, "master_process on;\nworker_processes 1;\npid %s;\nerror_log %s notice;\n",
		path("nginx.pid"), path("error.log"))
	conf.WriteString("events { worker_connections 512; }\n\nhttp {\n")
	// The package's compiled-in temp paths are outside the prefix; nothing
	// here buffers to disk, but nginx creates them at start.
	for _, tmp := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&conf, "    %s_temp_path %s;\n", tmp, path("tmp_"+tmp))
	}
	conf.WriteString("    access_log off;\n    log_format trace '$uri|$remote_addr|$arg_k|$upstream_addr';\n\n")
	b.results = make([]liveResult, len(b.cases))
	for k, c := range b.cases {
		r := &b.results[k]
		r.name = fmt.Sprintf("u%d", k)
		r.addrs = make([]string, len(c.servers))
		var blk strings.Builder
		fmt.Fprintf(&blk, "upstream %s {\n", r.name)
		if c.method != "" {
			fmt.Fprintf(&blk, "    %s;\n", c.method)
		}
		for i, s := range c.servers {
			switch {
			case s.same > 0:
				r.addrs[i] = r.addrs[s.same-1]
			case s.dead:
				r.addrs[i] = deadAddrs[i]
			default:
				r.addrs[i] = liveAddrs[i]
			}
			fmt.Fprintf(&blk, "    server %s", r.addrs[i])
			if s.params != "" {
				blk.WriteString(" " + s.params)
			}
			blk.WriteString(";\n")
		}
		blk.WriteString("}\n")
		r.block = blk.String()
		conf.WriteString(r.block)
	}
	fmt.Fprintf(&conf, "\n    server {\n        listen %s;\n        access_log %s trace;\n", b.proxy, path("trace.log"))
	conf.WriteString("        proxy_next_upstream error timeout http_502;\n")
	conf.WriteString("        location / { return 404; }\n")
	for _, r := range b.results {
		fmt.Fprintf(&conf, "        location /%s/ { proxy_pass http://%s; }\n", r.name, r.name)
	}
	conf.WriteString("    }\n")
	for _, a := range liveAddrs {
		fmt.Fprintf(&conf, "    server { listen %s; access_log off; return 200; }\n", a)
	}
	conf.WriteString("}\n")
	return os.WriteFile(filepath.Join(b.dir, "nginx.conf"), []byte(conf.String()), 0o644)
}

func (b *nginxBatch) errorLog() string {
	data, _ := os.ReadFile(filepath.Join(b.dir, "error.log"))
	return string(data) + b.output.String()
}

// start runs nginx in the foreground in its own process group. It passes
// the listening sockets as nginx passes them to a new binary on upgrade: as
// open descriptors named in the NGINX environment variable, which nginx
// matches to its listen directives by address instead of binding anew.
func (b *nginxBatch) start(t *testing.T) error {
	var files []*os.File
	var fds strings.Builder
	for i, l := range b.listeners {
		f, err := l.File()
		if err != nil {
			return err
		}
		files = append(files, f)
		fmt.Fprintf(&fds, "%d;", 3+i)
	}
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	b.cmd = exec.Command(b.bin, "-p", b.dir+string(filepath.Separator),
		"-c", filepath.Join(b.dir, "nginx.conf"),
		"-e", filepath.Join(b.dir, "error.log"),
		"-g", "daemon off;")
	b.cmd.Env = append(os.Environ(), "NGINX="+fds.String())
	b.cmd.ExtraFiles = files
	b.cmd.Stdout = &b.output
	b.cmd.Stderr = &b.output
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := b.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", b.bin, err)
	}
	b.done = make(chan struct{})
	go func() {
		b.waitErr = b.cmd.Wait()
		close(b.done)
	}()
	t.Cleanup(func() {
		b.kill(syscall.SIGKILL)
		<-b.done
	})
	// nginx owns the sockets now; the test's copies would only compete
	// with it for connections.
	for _, l := range b.listeners {
		l.Close()
	}
	return nil
}

// kill signals nginx's whole process group unless it has exited.
func (b *nginxBatch) kill(sig syscall.Signal) {
	select {
	case <-b.done:
	default:
		syscall.Kill(-b.cmd.Process.Pid, sig)
	}
}

// stop asks nginx to quit and waits for it, killing it if it lingers. It
// reports an nginx that exited before being asked, which means a bad
// configuration or a lost socket.
func (b *nginxBatch) stop() error {
	select {
	case <-b.done:
		return fmt.Errorf("nginx exited early: %v", b.waitErr)
	default:
	}
	b.kill(syscall.SIGTERM)
	select {
	case <-b.done:
		return nil
	case <-time.After(10 * time.Second):
		b.kill(syscall.SIGKILL)
		<-b.done
		return errors.New("nginx did not stop on SIGTERM")
	}
}

// send runs each case's requests one after another, a few cases at a time:
// the cases use separate upstream blocks, so only the order within a case
// matters.
func (b *nginxBatch) send(ctx context.Context) error {
	const workers = 4
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: workers, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	// Requests with a client address each dial from it on a new
	// connection: Linux delivers all of 127.0.0.0/8 to the loopback
	// interface, so any 127.x.y.z can be bound.
	bound := &http.Transport{Proxy: nil, DisableKeepAlives: true, DisableCompression: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := net.Dialer{Timeout: 5 * time.Second}
			if src, ok := ctx.Value(sourceAddr{}).(netip.Addr); ok {
				d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))
			}
			return d.DialContext(ctx, network, addr)
		}}
	boundClient := &http.Client{Transport: bound, Timeout: 10 * time.Second}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan int)
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for k := range next {
				if err := b.sendCase(ctx, client, boundClient, k); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		})
	}
feed:
	for k := range b.cases {
		select {
		case next <- k:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errs)
	err := <-errs
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// sourceAddr is the context key of the address a request is sent from.
type sourceAddr struct{}

func (b *nginxBatch) sendCase(ctx context.Context, client, boundClient *http.Client, k int) error {
	r := &b.results[k]
	c := b.cases[k]
	r.status = make([]int, c.n)
	for i := range r.status {
		u := fmt.Sprintf("http://%s/%s/%d", b.proxy, r.name, i)
		if c.keys != nil {
			u += "?k=" + c.keys[i]
		}
		reqCtx, cl := ctx, client
		if c.clients != nil {
			reqCtx, cl = context.WithValue(ctx, sourceAddr{}, c.clients[i]), boundClient
		}
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, u, nil)
		if err != nil {
			return err
		}
		resp, err := cl.Do(req)
		if err != nil {
			return fmt.Errorf("%s: %w", u, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		r.status[i] = resp.StatusCode
	}
	return nil
}

// readLog fills each result's trace from the access log, checking that
// every request was logged once and in the order it was sent.
func (b *nginxBatch) readLog() error {
	f, err := os.Open(filepath.Join(b.dir, "trace.log"))
	if err != nil {
		return err
	}
	defer f.Close()
	index := make(map[string]int, len(b.results))
	for k, r := range b.results {
		index[r.name] = k
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.SplitN(line, "|", 4) // uri, remote addr, $arg_k, upstream addr
		if len(fields) != 4 {
			return fmt.Errorf("unexpected log line %q", line)
		}
		uri, remote, arg, addr := fields[0], fields[1], fields[2], fields[3]
		parts := strings.Split(uri, "/") // "", name, request number
		if len(parts) != 3 {
			return fmt.Errorf("unexpected log line %q", line)
		}
		k, found := index[parts[1]]
		seq, err := strconv.Atoi(parts[2])
		if !found || err != nil {
			return fmt.Errorf("unexpected log line %q", line)
		}
		r := &b.results[k]
		if seq != len(r.trace) {
			return fmt.Errorf("log line %q: want request %d of %s next", line, len(r.trace), r.name)
		}
		// nginx saw the key and the client address the case sent.
		c := b.cases[k]
		if c.keys != nil && arg != c.keys[seq] {
			return fmt.Errorf("log line %q: $arg_k %q, want %q", line, arg, c.keys[seq])
		}
		if c.clients != nil && remote != c.clients[seq].String() {
			return fmt.Errorf("log line %q: $remote_addr %q, want %q", line, remote, c.clients[seq])
		}
		r.trace = append(r.trace, addr)
	}
	if err := sc.Err(); err != nil {
		return err
	}
	for k, r := range b.results {
		if len(r.trace) != b.cases[k].n {
			return fmt.Errorf("%s: %d requests logged, want %d", r.name, len(r.trace), b.cases[k].n)
		}
		// A request ends well exactly when the last server it tried is
		// live: a dead server that answered would mean a lost port.
		for i, entry := range r.trace {
			want := http.StatusBadGateway
			tried := strings.Split(entry, ", ")
			for j, a := range r.addrs {
				if a == tried[len(tried)-1] && !b.cases[k].servers[j].dead {
					want = http.StatusOK
				}
			}
			if r.status[i] != want {
				return fmt.Errorf("%s request %d: status %d after %q, want %d", r.name, i, r.status[i], entry, want)
			}
		}
	}
	return nil
}

// liveRun is one live test: the nginx binary, the test's deadline, and for
// a test of random configurations its seed and the mismatches so far.
type liveRun struct {
	t          *testing.T
	ctx        context.Context
	bin        string
	seed       uint64
	mismatches int
}

// liveNginx skips the test in -short mode or without nginx, and otherwise
// gives it liveTimeLimit.
func liveNginx(t *testing.T) *liveRun {
	t.Helper()
	if testing.Short() {
		t.Skip("live nginx test skipped in -short mode")
	}
	bin, ok := findNginx()
	if !ok {
		testenv.Missing(t, "nginx not found on PATH or at /usr/sbin/nginx: install nginx (Debian package nginx-core) to run the live differential test")
	}
	ctx, cancel := context.WithTimeout(t.Context(), liveTimeLimit)
	t.Cleanup(cancel)
	return &liveRun{t: t, ctx: ctx, bin: bin}
}

// drawSeed takes the seed of -nginx.seed, or draws one, and logs how to
// rerun the test with it.
func (l *liveRun) drawSeed() {
	l.seed = *nginxSeed
	if l.seed == 0 {
		l.seed = rand.Uint64()
	}
	l.t.Logf("%s, seed %d (rerun: go test -run '%s$' . -nginx.seed=%d)", l.bin, l.seed, l.t.Name(), l.seed)
}

// batches runs n batches of perBatch random configurations, each batch on
// one nginx. Configuration id = batch*perBatch+k is drawn by draw(rng, k)
// from its own stream, so that each can be regenerated from the seed and
// its number alone; check gets what nginx did with it and the library's
// trace (libraryTrace, random pickers seeded with seed^id).
func (l *liveRun) batches(n, perBatch int, draw func(rng *rand.Rand, k int) liveCase, check func(id int, r liveResult, c liveCase, got []string)) {
	for batch := range n {
		cases := make([]liveCase, perBatch)
		for k := range cases {
			cases[k] = draw(rand.New(rand.NewPCG(l.seed, uint64(batch*perBatch+k))), k)
		}
		results, err := runNginx(l.ctx, l.t, l.bin, cases)
		require.NoError(l.t, err, "seed %d, batch %d", l.seed, batch)
		for k, r := range results {
			id := batch*perBatch + k
			got, err := libraryTrace(r, cases[k], l.seed^uint64(id))
			require.NoError(l.t, err, "seed %d, configuration %d:\n%s", l.seed, id, r.block)
			check(id, r, cases[k], got)
		}
	}
}

// compare checks that the library tried the servers nginx tried, request
// for request, reporting the first liveMismatches configurations that
// differ in full and counting the rest.
func (l *liveRun) compare(id int, r liveResult, c liveCase, got []string) {
	if slices.Equal(r.trace, got) {
		return
	}
	l.mismatches++
	if l.mismatches <= liveMismatches {
		// One line per trace, requests separated by "|": the expected
		// one is nginx's.
		assert.Equal(l.t, strings.Join(r.letterTrace(r.trace), " | "), strings.Join(r.letterTrace(got), " | "),
			"seed %d, configuration %d: library differs from nginx\n%s", l.seed, id, describeMismatch(r, c, got))
	}
}

// reportHidden fails the test for the mismatches compare counted but did
// not show.
func (l *liveRun) reportHidden() {
	if l.mismatches > liveMismatches {
		l.t.Errorf("%d more mismatching configurations not shown", l.mismatches-liveMismatches)
	}
}

// replay runs recorded cases on the live nginx and checks that each gives
// back its recorded trace, want[k] in letters.
func (l *liveRun) replay(cases []liveCase, want [][]string) {
	results, err := runNginx(l.ctx, l.t, l.bin, cases)
	require.NoError(l.t, err)
	for k, r := range results {
		assert.Equal(l.t, want[k], r.letterTrace(r.trace), "vector %d: %s",
			k+1, strings.TrimSpace(cases[k].method+" "+specs(cases[k])))
	}
}

// liveServers reads the servers of a recorded vector.
func liveServers(specs []string) []liveServer {
	servers := make([]liveServer, len(specs))
	for i, spec := range specs {
		servers[i].params, servers[i].dead = vectorServer(spec)
	}
	return servers
}

// specs writes a case in the notation of the recorded vectors, the servers
// named a, b, ... in order.
func specs(c liveCase) string {
	parts := make([]string, len(c.servers))
	for i, s := range c.servers {
		spec := s.params
		if s.dead {
			spec = strings.TrimSpace("dead " + spec)
		}
		if s.same > 0 {
			spec = strings.TrimSpace(fmt.Sprintf("at %c's address %s", 'a'+s.same-1, spec))
		}
		parts[i] = fmt.Sprintf("%c: %q", 'a'+i, spec)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// describeMismatch shows a failing case in both notations, its keys and
// client addresses if any, and where its traces part.
func describeMismatch(r liveResult, c liveCase, got []string) string {
	first := len(r.trace)
	for i := range r.trace {
		if i >= len(got) || r.trace[i] != got[i] {
			first = i
			break
		}
	}
	var extra strings.Builder
	if c.keys != nil {
		fmt.Fprintf(&extra, "keys %q\n", c.keys)
	}
	if c.clients != nil {
		fmt.Fprintf(&extra, "clients %v\n", c.clients)
	}
	return fmt.Sprintf("servers %s, %d requests, first difference at request %d\n%s%s",
		specs(c), c.n, first+1, extra.String(), r.block)
}
