//go:build unix

package balancer_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
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

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// This file checks Connected against nginx's stream module: long-lived TCP
// sessions through a real nginx (proxy_pass to an upstream block), kept
// open across phases, with upstream servers that refuse connections and
// later accept them. nginx readmits a failed peer as soon as a connection to
// its probe is established (ngx_stream_upstream_notify_round_robin_peer);
// the library does when the caller reports Connected.

// errStreamTooSlow is runStream's error when the phases between two waits
// took longer than nginx's 1s fail window, which voids the run.
var errStreamTooSlow = errors.New("past nginx's 1s fail window: the machine is too slow for this run")

// streamFailTimeout is every server's fail_timeout in the stream cases:
// nginx counts it in whole seconds, so 1s is the shortest wait.
const streamFailTimeout = "1s"

// streamPhase is one step of a stream case: which servers accept from now
// on (the others refuse), how many open sessions to end first (the oldest),
// then how many new sessions to open, one after another, each kept open.
type streamPhase struct {
	up    string // letters of the accepting servers, such as "ab"
	close int
	open  int
}

// streamCase is one upstream block and its phases. Every case has one
// phase per entry of streamTimeline.
type streamCase struct {
	name    string
	method  string   // "" (round robin) or "least_conn"
	servers []string // each server's parameters
	phases  []streamPhase
	// differs: without Connected the library places these sessions
	// otherwise than nginx (the case needs the connect report).
	differs bool
}

// streamTimeline says, for each phase, whether it starts after a wait
// that ends every fail window of the phases before it (and advances the
// library's clock by streamEpoch); phases without a wait run within one
// window.
var streamTimeline = []bool{false, false, false, true, true}

// streamEpoch is how far the library's clock moves at a wait: more than
// the fail_timeout, as nginx's clock moves at least 2s at a wait.
const streamEpoch = 3 * time.Second

var streamCases = []streamCase{
	{
		// The issue's case: a fails, and after its fail_timeout 30
		// sessions are opened and kept open. nginx sends all 30 to a.
		name:    "backup, 30 sessions after the window",
		servers: []string{"max_fails=1", "backup"},
		phases: []streamPhase{
			{up: "b", open: 3}, {up: "b"}, {up: "b"},
			{up: "ab", open: 30},
			{up: "ab", close: 15, open: 5},
		},
		differs: true,
	},
	{
		name:    "weighted primaries and a backup",
		servers: []string{"weight=3 max_fails=2", "weight=1", "backup"},
		phases: []streamPhase{
			{up: "bc", open: 8}, {up: "bc"}, {up: "bc"},
			{up: "abc", open: 12},
			{up: "abc", close: 10, open: 8},
		},
		differs: true,
	},
	{
		// least_conn counts the open sessions, so readmitting a early
		// moves the following sessions to it.
		name:    "least_conn",
		method:  "least_conn",
		servers: []string{"max_fails=1", "", "backup"},
		phases: []streamPhase{
			{up: "bc", open: 4}, {up: "bc"}, {up: "bc"},
			{up: "abc", open: 10},
			{up: "abc", close: 6, open: 6},
		},
		differs: true,
	},
	{
		// The probe's connection is refused again: out for another
		// window; then it is readmitted.
		name:    "probe refused, then readmitted",
		servers: []string{"max_fails=1", ""},
		phases: []streamPhase{
			{up: "b", open: 3}, {up: "b"}, {up: "b"},
			{up: "b", open: 3},
			{up: "ab", open: 6},
		},
		differs: true,
	},
	{
		// Inside the window no probe was made (accessed == checked), so
		// the connections a accepts clear nothing and its next refusal
		// is its second failure: out. After the window, its probe's
		// connection readmits it.
		name:    "connections inside the window clear nothing",
		servers: []string{"max_fails=2", ""},
		phases: []streamPhase{
			{up: "b", open: 2}, {up: "ab", open: 4}, {up: "b", open: 4},
			{up: "ab", open: 6},
			{up: "ab", close: 4, open: 4},
		},
		differs: true,
	},
	{
		// Every server out: "no live upstreams"; then both readmitted.
		name:    "all out, then both back",
		servers: []string{"max_fails=1", "max_fails=1"},
		phases: []streamPhase{
			{up: "", open: 3}, {up: ""}, {up: ""},
			{up: "ab", open: 6},
			{up: "ab", close: 3, open: 3},
		},
		differs: true,
	},
	{
		// No failures: max_conns and the backup with sessions kept open.
		name:    "max_conns with open sessions",
		servers: []string{"max_conns=2", "max_conns=3", "backup"},
		phases: []streamPhase{
			{up: "abc", open: 7}, {up: "abc", close: 2, open: 4}, {up: "abc"},
			{up: "abc", close: 3, open: 3},
			{up: "abc"},
		},
	},
}

// TestNginxLiveStream runs streamCases on nginx's stream module and checks
// that the library, told of each established connection with Connected,
// tries the same servers in the same order for every session, and that
// without Connected it does not for the cases that need it.
func TestNginxLiveStream(t *testing.T) {
	l := liveNginx(t)
	load := streamModule(t, l.bin)
	// A run on a machine too slow to keep its phases inside nginx's 1s
	// fail window proves nothing either way: run it again, up to three
	// times in all, before giving up.
	var run *streamRun
	var err error
	for try := 1; try <= 3; try++ {
		run, err = runStream(l.ctx, t, l.bin, load, streamCases)
		if !errors.Is(err, errStreamTooSlow) {
			break
		}
		t.Logf("run %d: %v", try, err)
	}
	require.NoError(t, err)
	for k, c := range streamCases {
		r := run.results[k]
		t.Run(c.name, func(t *testing.T) {
			t.Logf("nginx: %s", strings.Join(r.lettered(r.trace), " | "))
			with, err := libraryStream(r, c, true)
			require.NoError(t, err)
			assert.Equal(t, r.lettered(r.trace), r.lettered(with),
				"library with Connected differs from nginx's stream module\n%s", r.block)
			without, err := libraryStream(r, c, false)
			require.NoError(t, err)
			if c.differs {
				assert.NotEqual(t, r.lettered(r.trace), r.lettered(without),
					"without Connected the library should differ here: the case does not test the connect report")
			} else {
				assert.Equal(t, r.lettered(r.trace), r.lettered(without))
			}
		})
	}
	// The issue's claim, read from nginx alone: after a's fail_timeout,
	// all 30 sessions kept open reach a; without Connected the library
	// sends the probe to a and the 29 after it to the backup.
	issue := run.results[0]
	require.Len(t, issue.reached, 38)
	assert.Equal(t, slices.Repeat([]string{"a"}, 30), issue.lettered(issue.reached[3:33]),
		"nginx's placement of the 30 sessions after the window")
	without, err := libraryStream(issue, streamCases[0], false)
	require.NoError(t, err)
	assert.Equal(t, append([]string{"a"}, slices.Repeat([]string{"b"}, 29)...), issue.lettered(without[3:33]),
		"the library's placement without Connected")
	t.Logf("%d stream cases on %s, %d sessions", len(streamCases), l.bin, run.sessions)
}

// streamModule returns the directive that loads nginx's stream module, ""
// if it is built in; without one the test skips or fails (testenv.Missing).
func streamModule(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		testenv.Missing(t, fmt.Sprintf("%s -V: %v", bin, err))
	}
	load, missing := streamModuleLoad(string(out))
	if missing != "" {
		testenv.Missing(t, fmt.Sprintf("%s: %s", bin, missing))
	}
	return load
}

// streamModuleLoad reads nginx -V's output: the load_module directive the
// stream module needs ("" if it is built in), or why there is none. A
// dynamic module is looked for in --modules-path, or without one in the
// usual places.
func streamModuleLoad(version string) (load, missing string) {
	dynamic, static, dirs := false, false, []string{"/usr/lib/nginx/modules", "/usr/lib64/nginx/modules"}
	for _, arg := range strings.Fields(version) {
		switch {
		case arg == "--with-stream":
			static = true
		case arg == "--with-stream=dynamic":
			dynamic = true
		case strings.HasPrefix(arg, "--modules-path="):
			dirs = []string{strings.TrimPrefix(arg, "--modules-path=")}
		}
	}
	switch {
	case static:
		return "", ""
	case !dynamic:
		return "", "built without the stream module (--with-stream)"
	}
	for _, d := range dirs {
		path := filepath.Join(d, "ngx_stream_module.so")
		if _, err := os.Stat(path); err == nil {
			return "load_module " + strconv.Quote(path) + ";\n", ""
		}
	}
	return "", fmt.Sprintf("the stream module (ngx_stream_module.so) is not installed in %q: install libnginx-mod-stream to run the live stream test", dirs)
}

// streamBackend is one upstream server of a stream case: a loopback port
// that refuses connections (bound, not listening) or accepts them, greeting
// each with its address on a line of its own and holding it open until
// nginx closes it.
type streamBackend struct {
	addr string
	port int
	fd   int // the bound socket while refusing; -1 while listening
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn // accepted, for cleanup
}

// reusableSocket returns a TCP socket with SO_REUSEADDR bound to
// 127.0.0.1:port (0: any). SO_REUSEADDR lets a refusing socket take the
// port back while connections accepted on it are still open.
func reusableSocket(port int) (int, int, error) {
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return -1, 0, fmt.Errorf("socket: %w", err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		syscall.Close(fd)
		return -1, 0, fmt.Errorf("SO_REUSEADDR: %w", err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, 0, fmt.Errorf("bind 127.0.0.1:%d: %w", port, err)
	}
	sa, err := syscall.Getsockname(fd)
	if err != nil {
		syscall.Close(fd)
		return -1, 0, fmt.Errorf("getsockname: %w", err)
	}
	in, ok := sa.(*syscall.SockaddrInet4)
	if !ok {
		syscall.Close(fd)
		return -1, 0, fmt.Errorf("getsockname: unexpected %T", sa)
	}
	return fd, in.Port, nil
}

func newStreamBackend(t *testing.T) (*streamBackend, error) {
	fd, port, err := reusableSocket(0)
	if err != nil {
		return nil, err
	}
	b := &streamBackend{fd: fd, port: port, addr: "127.0.0.1:" + strconv.Itoa(port)}
	t.Cleanup(b.close)
	return b, nil
}

// accept makes the port accept connections, if it refuses them.
func (b *streamBackend) accept() error {
	if b.ln != nil {
		return nil
	}
	if err := syscall.Listen(b.fd, 128); err != nil {
		return fmt.Errorf("listen %s: %w", b.addr, err)
	}
	f := os.NewFile(uintptr(b.fd), b.addr)
	ln, err := net.FileListener(f) // a duplicate of the descriptor
	f.Close()
	b.fd = -1
	if err != nil {
		return fmt.Errorf("listener %s: %w", b.addr, err)
	}
	b.ln = ln
	b.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			b.mu.Lock()
			b.conn = append(b.conn, c)
			b.mu.Unlock()
			b.wg.Go(func() {
				defer c.Close()
				if _, err := io.WriteString(c, b.addr+"\n"); err != nil {
					return
				}
				io.Copy(io.Discard, c) // until nginx ends the session
			})
		}
	})
	return nil
}

// refuse makes the port refuse connections again: the listener closes and
// a socket bound to the port, not listening, takes its place; connections
// already accepted stay open.
func (b *streamBackend) refuse() error {
	if b.ln == nil {
		return nil
	}
	b.ln.Close()
	b.ln = nil
	fd, _, err := reusableSocket(b.port)
	if err != nil {
		return err
	}
	b.fd = fd
	return nil
}

func (b *streamBackend) close() {
	if b.ln != nil {
		b.ln.Close()
	}
	if b.fd >= 0 {
		syscall.Close(b.fd)
	}
	b.mu.Lock()
	for _, c := range b.conn {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// streamResult is what nginx did with one stream case.
type streamResult struct {
	name    string   // the upstream block's name
	block   string   // the block nginx ran, with its real addresses
	addrs   []string // server i's address
	trace   []string // $upstream_addr of each session, in the order opened
	reached []string // the server whose greeting each session read, "" if none
}

// lettered maps the addresses of trace entries to server letters and the
// upstream name to "back", as liveResult.letters does.
func (r *streamResult) lettered(trace []string) []string {
	lr := liveResult{name: r.name, addrs: r.addrs}
	return lr.letterTrace(trace)
}

// streamRun is one nginx serving every stream case.
type streamRun struct {
	results  []streamResult
	sessions int
}

// streamSession is one client connection through nginx.
type streamSession struct {
	conn *net.TCPConn
	port int // the client's port, nginx's $remote_port
	idx  int // its number in the case, in the order opened
}

// runStream starts one nginx with a stream server and upstream block per
// case and runs the cases' phases in step, waiting at streamTimeline's
// waits until nginx's whole-second clock has moved past every fail window.
func runStream(ctx context.Context, t *testing.T, bin, load string, cases []streamCase) (*streamRun, error) {
	b := &nginxBatch{bin: bin, dir: t.TempDir()}
	t.Cleanup(func() {
		for _, l := range b.listeners {
			l.Close()
		}
	})
	backends := make([][]*streamBackend, len(cases))
	run := &streamRun{results: make([]streamResult, len(cases))}
	path := func(name string) string { return strconv.Quote(filepath.Join(b.dir, name)) }
	var conf strings.Builder
	conf.WriteString(load)
	fmt.Fprintf(&conf, "master_process on;\nworker_processes 1;\npid %s;\nerror_log %s notice;\n",
		path("nginx.pid"), path("error.log"))
	conf.WriteString("events { worker_connections 512; }\n\nstream {\n")
	conf.WriteString("    log_format trace '$remote_port|$upstream_addr|$status';\n")
	proxies := make([]string, len(cases))
	for k, c := range cases {
		if len(c.phases) != len(streamTimeline) {
			return nil, fmt.Errorf("case %q: %d phases, want %d", c.name, len(c.phases), len(streamTimeline))
		}
		r := &run.results[k]
		r.name = fmt.Sprintf("s%d", k)
		var blk strings.Builder
		fmt.Fprintf(&blk, "upstream %s {\n", r.name)
		if c.method != "" {
			fmt.Fprintf(&blk, "    %s;\n", c.method)
		}
		for _, params := range c.servers {
			be, err := newStreamBackend(t)
			if err != nil {
				return nil, err
			}
			backends[k] = append(backends[k], be)
			r.addrs = append(r.addrs, be.addr)
			fmt.Fprintf(&blk, "    server %s fail_timeout=%s", be.addr, streamFailTimeout)
			if params != "" {
				blk.WriteString(" " + params)
			}
			blk.WriteString(";\n")
		}
		blk.WriteString("}\n")
		r.block = blk.String()
		conf.WriteString(r.block)
		ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			return nil, err
		}
		b.listeners = append(b.listeners, ln)
		proxies[k] = ln.Addr().String()
		fmt.Fprintf(&conf, "server {\n    listen %s;\n    proxy_pass %s;\n    access_log %s trace;\n}\n",
			proxies[k], r.name, path(r.name+".log"))
	}
	conf.WriteString("}\n")
	if err := os.WriteFile(filepath.Join(b.dir, "nginx.conf"), []byte(conf.String()), 0o644); err != nil {
		return nil, err
	}
	if err := b.start(t); err != nil {
		return nil, err
	}
	sessions := make([][]*streamSession, len(cases)) // every session opened
	open := make([][]*streamSession, len(cases))     // those still open
	ports := make([]map[int]int, len(cases))
	for k := range cases {
		ports[k] = map[int]int{}
	}
	var epochStart time.Time
	fail := func(err error) (*streamRun, error) {
		b.stop()
		return nil, fmt.Errorf("%w\nnginx error log:\n%s", err, b.errorLog())
	}
	for ph, wait := range streamTimeline {
		if wait || ph == 0 {
			if ph > 0 {
				// The phases since the last wait must fall within two
				// whole seconds of nginx's clock, so that no fail window
				// of 1s can have passed inside them.
				end := time.Now()
				if end.Unix()-epochStart.Unix() > 1 {
					return fail(fmt.Errorf("phases %v..%v took from %v to %v: %w", ph-1, ph, epochStart, end, errStreamTooSlow))
				}
				// Wait until nginx's clock has moved 2s past the last
				// failure or probe: now - checked > fail_timeout.
				until := time.Unix(end.Unix()+2, 50*int64(time.Millisecond))
				select {
				case <-time.After(time.Until(until)):
				case <-ctx.Done():
					return fail(ctx.Err())
				}
			}
			epochStart = time.Now()
		}
		for k, c := range cases {
			p := c.phases[ph]
			for i, be := range backends[k] {
				var err error
				if strings.ContainsRune(p.up, rune('a'+i)) {
					err = be.accept()
				} else {
					err = be.refuse()
				}
				if err != nil {
					return fail(err)
				}
			}
			for range p.close {
				if len(open[k]) == 0 {
					return fail(fmt.Errorf("case %q phase %d: no session left to close", c.name, ph))
				}
				if err := endSession(open[k][0]); err != nil {
					return fail(fmt.Errorf("case %q phase %d: %w", c.name, ph, err))
				}
				open[k] = open[k][1:]
			}
			for range p.open {
				s, reached, err := openSession(proxies[k], len(sessions[k]))
				if err != nil {
					return fail(fmt.Errorf("case %q phase %d: %w", c.name, ph, err))
				}
				sessions[k] = append(sessions[k], s)
				run.results[k].reached = append(run.results[k].reached, reached)
				ports[k][s.port] = s.idx
				if reached != "" {
					open[k] = append(open[k], s)
				}
			}
		}
	}
	// The last phases must have kept to one window too.
	if end := time.Now(); end.Unix()-epochStart.Unix() > 1 {
		return fail(fmt.Errorf("the last phases took from %v to %v: past nginx's 1s fail window", epochStart, end))
	}
	for k := range cases {
		for _, s := range open[k] {
			if err := endSession(s); err != nil {
				return fail(err)
			}
		}
	}
	if err := b.stop(); err != nil {
		return nil, fmt.Errorf("%w\nnginx error log:\n%s", err, b.errorLog())
	}
	for k := range cases {
		r := &run.results[k]
		trace, status, err := readStreamLog(filepath.Join(b.dir, r.name+".log"), ports[k], len(sessions[k]))
		if err != nil {
			return nil, fmt.Errorf("case %q: %w\nnginx error log:\n%s", cases[k].name, err, b.errorLog())
		}
		r.trace = trace
		run.sessions += len(trace)
		// A session nginx placed (200) reached the server nginx tried
		// last; one it could not (502) reached none.
		for i, entry := range trace {
			tried := strings.Split(entry, ", ")
			placed := r.reached[i] != ""
			if placed && r.reached[i] != tried[len(tried)-1] || placed != (status[i] == 200) {
				return nil, fmt.Errorf("case %q session %d reached %q, nginx logged %q, status %d", cases[k].name, i, r.reached[i], entry, status[i])
			}
		}
	}
	return run, nil
}

// openSession connects to nginx and reads the upstream server's greeting:
// once it arrives, nginx has connected to that server and notified its
// balancer (ngx_stream_proxy_init_upstream notifies before it proxies a
// byte). A session nginx could not place ends without a greeting.
func openSession(proxy string, idx int) (*streamSession, string, error) {
	c, err := net.DialTimeout("tcp4", proxy, 5*time.Second)
	if err != nil {
		return nil, "", err
	}
	conn := c.(*net.TCPConn)
	s := &streamSession{conn: conn, port: conn.LocalAddr().(*net.TCPAddr).Port, idx: idx}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	switch {
	case err == nil:
		conn.SetReadDeadline(time.Time{})
		return s, strings.TrimSuffix(line, "\n"), nil
	case errors.Is(err, io.EOF) && line == "":
		conn.Close() // nginx found no server: 502
		return s, "", nil
	default:
		conn.Close()
		return nil, "", fmt.Errorf("session %d: greeting: %q, %w", idx, line, err)
	}
}

// endSession half-closes the client's side and waits for nginx to close
// the connection: nginx ends the session on the client's EOF, calling the
// balancer's free before it closes the client connection.
func endSession(s *streamSession) error {
	defer s.conn.Close()
	if err := s.conn.CloseWrite(); err != nil {
		return fmt.Errorf("session %d: %w", s.idx, err)
	}
	s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, s.conn); err != nil {
		return fmt.Errorf("session %d: waiting for nginx to end it: %w", s.idx, err)
	}
	return nil
}

// readStreamLog reads a case's access log (one line per ended session:
// client port, $upstream_addr, $status) and returns $upstream_addr and
// $status by session number.
func readStreamLog(path string, ports map[int]int, n int) (trace []string, status []int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	trace, status = make([]string, n), make([]int, n)
	seen := make([]bool, n)
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		f := strings.Split(line, "|")
		if len(f) != 3 {
			return nil, nil, fmt.Errorf("unexpected log line %q", line)
		}
		port, err := strconv.Atoi(f[0])
		idx, found := ports[port]
		if err != nil || !found || seen[idx] {
			return nil, nil, fmt.Errorf("log line %q: unknown or repeated client port", line)
		}
		code, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, nil, fmt.Errorf("log line %q: status: %w", line, err)
		}
		seen[idx], trace[idx], status[idx] = true, f[1], code
	}
	for i, ok := range seen {
		if !ok {
			return nil, nil, fmt.Errorf("session %d not logged", i)
		}
	}
	return trace, status, nil
}

// libraryStream replays a stream case on the library: the block nginx ran
// through upstream.Parse, SmoothWRR for round robin or LeastConn, a clock
// that moves only at the timeline's waits, each session a Request whose
// attempts on a refusing server fail, the session kept in flight until
// its phase closes it (Done, a success, as nginx's stream module ends a
// TCP session). With connected, each established connection is reported
// with Connected, as nginx's stream module notifies its balancer.
func libraryStream(r streamResult, c streamCase, connected bool) ([]string, error) {
	blk, err := upstream.Parse(r.name+".conf", []byte(r.block))
	if err != nil {
		return nil, err
	}
	now := time.Unix(1_700_000_000, 0)
	clock := balancer.WithClock(func() time.Time { return now })
	var p balancer.Balancer
	switch c.method {
	case "":
		p, err = balancer.NewSmoothWRR(blk.Peers(), clock)
	case "least_conn":
		p, err = balancer.NewLeastConn(blk.Peers(), clock)
	default:
		err = fmt.Errorf("no picker for method %q", c.method)
	}
	if err != nil {
		return nil, err
	}
	conn := p.(balancer.Connector)
	index := map[string]int{}
	for i, a := range r.addrs {
		index[a] = i
	}
	var trace []string
	var open []*balancer.Peer
	for ph, wait := range streamTimeline {
		if wait {
			now = now.Add(streamEpoch)
		}
		phase := c.phases[ph]
		// nginx ends its oldest open sessions; while the traces agree
		// those are the library's oldest (without Connected they may not:
		// then the traces differ already).
		for range min(phase.close, len(open)) {
			if err := p.Done(open[0], balancer.Outcome{}); err != nil {
				return nil, err
			}
			open = open[1:]
		}
		for range phase.open {
			var req balancer.Request
			var tried []string
			for {
				peer, err := p.Pick(&req)
				if errors.Is(err, balancer.ErrNoLivePeer) {
					tried = append(tried, r.name)
					break
				}
				if errors.Is(err, balancer.ErrTriesExhausted) {
					break
				}
				if err != nil {
					return nil, err
				}
				tried = append(tried, peer.Addr())
				if !strings.ContainsRune(phase.up, rune('a'+index[peer.Addr()])) {
					if err := p.Done(peer, balancer.Outcome{Failed: true}); err != nil {
						return nil, err
					}
					continue
				}
				if connected {
					if err := conn.Connected(peer); err != nil {
						return nil, err
					}
				}
				open = append(open, peer)
				break
			}
			trace = append(trace, strings.Join(tried, ", "))
		}
	}
	return trace, nil
}

// TestStreamModuleLoad checks how the live stream test finds the stream
// module, and that it says what to install when there is none.
func TestStreamModuleLoad(t *testing.T) {
	dir := t.TempDir()
	empty := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ngx_stream_module.so"), nil, 0o644))
	tests := []struct {
		name, version, load, missing string
	}{
		{"built in", "configure arguments: --with-stream --with-stream_ssl_module", "", ""},
		{"dynamic", "configure arguments: --modules-path=" + dir + " --with-stream=dynamic",
			"load_module " + strconv.Quote(filepath.Join(dir, "ngx_stream_module.so")) + ";\n", ""},
		{"dynamic, not installed", "configure arguments: --modules-path=" + empty + " --with-stream=dynamic", "", "install libnginx-mod-stream"},
		{"none", "configure arguments: --with-http_ssl_module --with-stream_ssl_module", "", "built without the stream module"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			load, missing := streamModuleLoad(tt.version)
			assert.Equal(t, tt.load, load)
			if tt.missing == "" {
				assert.Empty(t, missing)
			} else {
				assert.Contains(t, missing, tt.missing)
			}
		})
	}
}
