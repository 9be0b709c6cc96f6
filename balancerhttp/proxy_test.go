package balancerhttp_test

import (
	"bytes"
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// backend is a test server on a fixed loopback address that can be stopped
// and started again on the same address. It answers with its name, the
// status it is set to, and the length of the body it read.
type backend struct {
	name   string
	addr   string
	status atomic.Int32 // 0: 200
	hits   atomic.Int64 // requests answered
	bodies sync.Map     // request body seen, by X-Req header
	srv    *httptest.Server
}

func newBackend(t *testing.T, name string) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	b := &backend{name: name, addr: ln.Addr().String()}
	b.serve(ln)
	t.Cleanup(b.stop)
	return b
}

func (b *backend) serve(ln net.Listener) {
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if id := r.Header.Get("X-Req"); id != "" {
			b.bodies.Store(id, string(body))
		}
		b.hits.Add(1)
		status := int(b.status.Load())
		if status == 0 {
			status = http.StatusOK
		}
		w.WriteHeader(status)
		fmt.Fprint(w, b.name)
	}))
	b.srv.Listener.Close()
	b.srv.Listener = ln
	b.srv.Start()
}

// stop closes the listener and every connection: the backend refuses
// connections from now on, and attempts in flight on it fail.
func (b *backend) stop() {
	if b.srv != nil {
		b.srv.CloseClientConnections()
		b.srv.Close()
		b.srv = nil
	}
}

// start listens again on the same address.
func (b *backend) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", b.addr)
	require.NoError(t, err)
	b.serve(ln)
}

// clock is the pickers' virtual clock: the tests move it past fail_timeout
// instead of sleeping.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Unix(1_700_000_000, 0)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// tally wraps a Picker and counts, per backend, the attempts picked, the
// reports and the failures among them.
type tally struct {
	balancer.Picker
	mu                    sync.Mutex
	picks, dones, failed  map[string]int
	abandoned             map[string]int
	slowest               map[string]time.Duration // the longest latency reported
	quickestAbandoned     map[string]time.Duration // the shortest latency of an abandoned attempt
	negativeOrZeroLatency int
}

func newTally(p balancer.Picker) *tally {
	return &tally{Picker: p, picks: map[string]int{}, dones: map[string]int{}, failed: map[string]int{}, abandoned: map[string]int{},
		slowest: map[string]time.Duration{}, quickestAbandoned: map[string]time.Duration{}}
}

func (t *tally) Pick(r *balancer.Request) (*balancer.Peer, error) {
	p, err := t.Picker.Pick(r)
	if err == nil {
		t.mu.Lock()
		t.picks[p.Addr()]++
		t.mu.Unlock()
	}
	return p, err
}

func (t *tally) Done(p *balancer.Peer, o balancer.Outcome) error {
	err := t.Picker.Done(p, o)
	if err == nil {
		t.mu.Lock()
		t.dones[p.Addr()]++
		if o.Failed {
			t.failed[p.Addr()]++
		}
		if o.Abandoned {
			t.abandoned[p.Addr()]++
			if q, ok := t.quickestAbandoned[p.Addr()]; !ok || o.Latency < q {
				t.quickestAbandoned[p.Addr()] = o.Latency
			}
		}
		t.slowest[p.Addr()] = max(t.slowest[p.Addr()], o.Latency)
		if o.Latency <= 0 {
			t.negativeOrZeroLatency++
		}
		t.mu.Unlock()
	}
	return err
}

// latencies returns the attempts reported Abandoned, the longest latency
// reported and the shortest latency of an abandoned attempt, per backend.
func (t *tally) latencies() (abandoned map[string]int, slowest, quickestAbandoned map[string]time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.abandoned), maps.Clone(t.slowest), maps.Clone(t.quickestAbandoned)
}

func (t *tally) snapshot() (picks, dones, failed map[string]int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cp := func(m map[string]int) map[string]int {
		c := map[string]int{}
		for k, v := range m {
			c[k] = v
		}
		return c
	}
	return cp(t.picks), cp(t.dones), cp(t.failed)
}

// totals returns the attempts picked and those reported failed, over all
// backends.
func (t *tally) totals() (attempts, failed int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for addr, n := range t.picks {
		attempts += n
		failed += t.failed[addr]
	}
	return attempts, failed
}

// onClock builds a's picker over peers on clock c, seeded where it draws
// random numbers.
func onClock(a balancer.Algorithm, peers []*balancer.Peer, c *clock) (balancer.Balancer, error) {
	if a.Random {
		return a.New(peers, balancer.WithClock(c.now), balancer.WithRand(rand.NewPCG(1, 2)))
	}
	return a.New(peers, balancer.WithClock(c.now))
}

// peersOf returns one peer for each backend, with opts.
func peersOf(bs []*backend, opts ...balancer.PeerOption) []*balancer.Peer {
	peers := make([]*balancer.Peer, len(bs))
	for i, b := range bs {
		peers[i] = balancer.NewPeer(b.addr, opts...)
	}
	return peers
}

// statusBackends starts backends a, b, ..., backend i answering
// statuses[i] (-1: stopped), and returns them with one peer each.
func statusBackends(t *testing.T, statuses []int) ([]*backend, []*balancer.Peer) {
	t.Helper()
	bs := make([]*backend, len(statuses))
	for i, st := range statuses {
		bs[i] = newBackend(t, string(rune('a'+i)))
		if st < 0 {
			bs[i].stop()
		} else {
			bs[i].status.Store(int32(st))
		}
	}
	return bs, peersOf(bs)
}

// newRequest builds a request with body (none if ""), the fields of header,
// and X-Req: id, under which the backends record the body they read.
func newRequest(t *testing.T, method, url, body string, header http.Header, id string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	if body == "" {
		req.Body, req.ContentLength, req.GetBody = http.NoBody, 0, nil
	}
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("X-Req", id)
	return req
}

// assertBodies checks that every backend that read request id's body (a
// HEAD has none) read all of body.
func assertBodies(t *testing.T, bs []*backend, id, method, body string) {
	t.Helper()
	for _, b := range bs {
		if v, ok := b.bodies.Load(id); ok && method != "HEAD" {
			assert.Equal(t, body, v, "body seen by %s", b.name)
		}
	}
}

// quietLog discards the proxy's 502 lines.
var quietLog = log.New(io.Discard, "", 0)

// run sends n GET requests from `clients` goroutines through the proxy and
// returns the status codes seen, counted. halfway, if not nil, runs once
// when half of the requests have been answered, while the others go on.
func run(t *testing.T, url string, clients, n int, halfway func()) map[int]int {
	t.Helper()
	var mu sync.Mutex
	codes := map[int]int{}
	var done atomic.Int64
	var once sync.Once
	clientLoop(n, clients, func() error {
		code := -1
		resp, err := http.Get(url)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code = resp.StatusCode
		}
		mu.Lock()
		codes[code]++
		mu.Unlock()
		if done.Add(1) == int64(n/2) && halfway != nil {
			once.Do(halfway)
		}
		return nil
	})
	return codes
}

// TestProxy_backendDiesAndRecovers stops one of three backends in the middle
// of a concurrent run and checks, for every picker: no request is lost
// (every one gets a 200, the dead backend's attempts going to the next
// peer), traffic moves away from the dead backend (with max_fails 1 it gets
// no attempt once a failure is reported, until fail_timeout passes on the
// picker's clock), and comes back once the backend is up again and the
// fail window has passed. Every attempt is reported exactly once.
func TestProxy_backendDiesAndRecovers(t *testing.T) {
	const clients = 4
	for _, algo := range balancer.Algorithms() {
		t.Run(algo.Name, func(t *testing.T) {
			bs := []*backend{newBackend(t, "a"), newBackend(t, "b"), newBackend(t, "c")}
			dead := bs[1]
			clk := newClock()
			peers := peersOf(bs, balancer.MaxFails(1), balancer.FailTimeout(10*time.Second))
			p, err := onClock(algo, peers, clk)
			require.NoError(t, err)
			tl := newTally(p)
			front := httptest.NewServer(&balancerhttp.Proxy{Picker: tl, ErrorLog: quietLog})
			defer front.Close()

			// Healthy: every backend serves, except with IPHash, which
			// sends every client of 127.0.0.1 to one: that one dies.
			spreads := algo.Name != "IPHash"
			codes := run(t, front.URL, clients, 90, nil)
			assert.Equal(t, map[int]int{200: 90}, codes)
			for _, b := range bs {
				if spreads {
					assert.Positive(t, b.hits.Load(), "backend %s while healthy", b.name)
				} else if b.hits.Load() > 0 {
					dead = b // the one that serves 127.0.0.1
				}
			}

			// b dies halfway through a run: no request is lost.
			var picksAtStop int
			codes = run(t, front.URL, clients, 200, func() {
				dead.stop()
				picks, _, _ := tl.snapshot()
				picksAtStop = picks[dead.addr]
			})
			assert.Equal(t, map[int]int{200: 200}, codes, "requests while b dies")
			picks, _, failed := tl.snapshot()
			assert.Positive(t, failed[dead.addr], "b's failures were reported")
			// Once its first failure is reported b is out; only attempts
			// picked before that report (at most one per client) reach it.
			assert.LessOrEqual(t, picks[dead.addr]-picksAtStop, 2*clients, "attempts on b after it died")

			// While the fail window lasts, b gets nothing.
			before := picks[dead.addr]
			codes = run(t, front.URL, clients, 100, nil)
			assert.Equal(t, map[int]int{200: 100}, codes)
			picks, _, _ = tl.snapshot()
			assert.Equal(t, before, picks[dead.addr], "attempts on b inside its fail window")

			// The window passes with b still dead: the probe fails, the
			// request goes on to the next peer, still no loss.
			clk.add(11 * time.Second)
			codes = run(t, front.URL, clients, 100, nil)
			assert.Equal(t, map[int]int{200: 100}, codes, "requests after the window, b still dead")

			// b comes back; once the window has passed (long enough for
			// the latency-aware pickers to forget its failure penalty), it
			// gets traffic again.
			dead.start(t)
			hits := dead.hits.Load()
			clk.add(10 * time.Minute)
			codes = run(t, front.URL, clients, 200, nil)
			assert.Equal(t, map[int]int{200: 200}, codes, "requests after b recovered")
			assert.Greater(t, dead.hits.Load(), hits, "b serves again after it recovered")

			// Every attempt was reported once, nothing is left in flight.
			picks, dones, _ := tl.snapshot()
			assert.Equal(t, picks, dones, "attempts picked = attempts reported")
			for _, q := range peers {
				assert.Zero(t, q.InFlight(), "in flight on %s", q)
			}
			assert.Zero(t, tl.negativeOrZeroLatency, "reports without a latency")
		})
	}
}

// TestProxy_nextUpstream checks when a failed attempt goes on to the next
// peer, and what the client gets when none is left, as nginx's
// proxy_next_upstream error timeout http_500 http_502 http_503 http_504
// behaves, without per-attempt timeouts and with timeouts that do not
// expire. SmoothWRR over equal weights tries the backends in order, a
// first.
func TestProxy_nextUpstream(t *testing.T) {
	big := strings.Repeat("x", 2048)
	tests := []struct {
		name     string
		method   string
		body     string
		header   http.Header
		statuses []int // per backend; -1: stopped
		maxTries int
		maxBody  int64
		want     int
		wantFrom string // the backend that answered; "" for none
		attempts int
	}{
		{"GET 503 goes to the next", "GET", "", nil, []int{503, 200}, 0, 0, 200, "b", 2},
		{"GET connection refused goes to the next", "GET", "", nil, []int{-1, 200}, 0, 0, 200, "b", 2},
		{"GET 404 is an answer", "GET", "", nil, []int{404, 200}, 0, 0, 404, "a", 1},
		{"GET 501 is an answer", "GET", "", nil, []int{501, 200}, 0, 0, 501, "a", 1},
		{"GET every backend 503: the last response", "GET", "", nil, []int{503, 500, 502}, 0, 0, 502, "c", 3},
		{"GET every backend refuses: 502", "GET", "", nil, []int{-1, -1}, 0, 0, 502, "", 2},
		{"GET refused then 503: the last response", "GET", "", nil, []int{-1, 503}, 0, 0, 503, "b", 2},
		{"GET 503 then refused: 502", "GET", "", nil, []int{503, -1}, 0, 0, 502, "", 2},
		{"HEAD 503 goes to the next", "HEAD", "", nil, []int{503, 200}, 0, 0, 200, "", 2},
		{"MaxTries 1: the first response", "GET", "", nil, []int{503, 200}, 1, 0, 503, "a", 1},
		{"MaxTries 2 of 3", "GET", "", nil, []int{503, 503, 200}, 2, 0, 503, "b", 2},
		{"PUT with a body is replayed", "PUT", "payload", nil, []int{503, 200}, 0, 0, 200, "b", 2},
		{"DELETE goes to the next", "DELETE", "", nil, []int{502, 200}, 0, 0, 200, "b", 2},
		{"POST 503 is not retried", "POST", "payload", nil, []int{503, 200}, 0, 0, 503, "a", 1},
		{"POST refused goes to the next with its body", "POST", "payload", nil, []int{-1, 200}, 0, 0, 200, "b", 2},
		{"POST with Idempotency-Key is retried", "POST", "payload", http.Header{"Idempotency-Key": {"k1"}}, []int{503, 200}, 0, 0, 200, "b", 2},
		{"PATCH 500 is not retried", "PATCH", "", nil, []int{500, 200}, 0, 0, 500, "a", 1},
		{"PUT body over MaxReplayBody is not retried", "PUT", big, nil, []int{503, 200}, 0, 1024, 503, "a", 1},
		{"PUT body at MaxReplayBody is replayed", "PUT", big[:1024], nil, []int{503, 200}, 0, 1024, 200, "b", 2},
		{"MaxReplayBody -1 keeps no body", "PUT", "payload", nil, []int{503, 200}, 0, -1, 503, "a", 1},
		{"a body-less PUT with MaxReplayBody -1 is retried", "PUT", "", nil, []int{503, 200}, 0, -1, 200, "b", 2},
	}
	for _, to := range timeoutsOrNot {
		for _, tt := range tests {
			t.Run(to.name+"/"+tt.name, func(t *testing.T) {
				bs, peers := statusBackends(t, tt.statuses)
				p, err := balancer.NewSmoothWRR(peers)
				require.NoError(t, err)
				tl := newTally(p)
				front := httptest.NewServer(&balancerhttp.Proxy{
					Picker: tl, MaxTries: tt.maxTries, MaxReplayBody: tt.maxBody, ErrorLog: quietLog,
					ConnectTimeout: to.connect, ReadTimeout: to.read,
				})
				defer front.Close()

				req := newRequest(t, tt.method, front.URL+"/x", tt.body, tt.header, tt.name)
				resp, err := http.DefaultClient.Do(req)
				require.NoError(t, err)
				got, _ := io.ReadAll(resp.Body)
				resp.Body.Close()

				assert.Equal(t, tt.want, resp.StatusCode)
				if tt.wantFrom != "" {
					assert.Equal(t, tt.wantFrom, string(got), "answered by")
				}
				n, f := tl.totals()
				picks, dones, _ := tl.snapshot()
				assert.Equal(t, tt.attempts, n, "attempts")
				assert.Equal(t, picks, dones, "every attempt reported")
				wantFailed := tt.attempts
				if tt.want < 500 || tt.want == 501 {
					wantFailed-- // the last attempt answered
				}
				assert.Equal(t, wantFailed, f, "attempts reported failed")
				// Every backend that answered saw the whole body.
				assertBodies(t, bs, tt.name, tt.method, tt.body)
			})
		}
	}
}

// TestProxy_noPeers: a Picker with nothing to give answers 502.
func TestProxy_noPeers(t *testing.T) {
	p, err := balancer.NewSmoothWRR(nil)
	require.NoError(t, err)
	var logged bytes.Buffer
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: p, ErrorLog: log.New(&logged, "", 0)})
	defer front.Close()
	resp, err := http.Get(front.URL)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
	assert.Contains(t, logged.String(), balancer.ErrNoPeers.Error())
}

// TestProxy_chunkedBodyReplayed: a body of unknown length, kept whole, is
// replayed with its length on the retry.
func TestProxy_chunkedBodyReplayed(t *testing.T) {
	a, b := newBackend(t, "a"), newBackend(t, "b")
	a.status.Store(503)
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(a.addr), balancer.NewPeer(b.addr)})
	require.NoError(t, err)
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: p, ErrorLog: quietLog})
	defer front.Close()
	pr, pw := io.Pipe()
	go func() {
		_, _ = io.WriteString(pw, "chunk one, ")
		_, _ = io.WriteString(pw, "chunk two")
		pw.Close()
	}()
	req, err := http.NewRequest("PUT", front.URL, pr)
	require.NoError(t, err)
	req.Header.Set("X-Req", "chunked")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	got, ok := b.bodies.Load("chunked")
	require.True(t, ok)
	assert.Equal(t, "chunk one, chunk two", got)
}

// TestProxy_upgrade: a connection upgrade passes through, and its attempt
// is reported when the switch succeeds; with per-attempt timeouts too,
// which end with the attempt, not with the upgraded connection.
func TestProxy_upgrade(t *testing.T) {
	for _, to := range timeoutsOrNot {
		t.Run(to.name, func(t *testing.T) { testUpgrade(t, to.timeouts) })
	}
}

func testUpgrade(t *testing.T, to timeouts) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, rw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = rw.Flush()
		line, _ := rw.ReadString('\n')
		_, _ = rw.WriteString("echo: " + line)
		_ = rw.Flush()
	}))
	defer up.Close()
	p, err := balancer.NewSmoothWRR([]*balancer.Peer{balancer.NewPeer(up.Listener.Addr().String())})
	require.NoError(t, err)
	tl := newTally(p)
	front := httptest.NewServer(&balancerhttp.Proxy{Picker: tl, ErrorLog: quietLog, ConnectTimeout: to.connect, ReadTimeout: to.read})
	defer front.Close()

	conn, err := net.Dial("tcp", front.Listener.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	_, err = io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	require.NoError(t, err)
	buf := make([]byte, 4096)
	var got strings.Builder
	for !strings.Contains(got.String(), "\r\n\r\n") {
		n, err := conn.Read(buf)
		require.NoError(t, err)
		got.Write(buf[:n])
	}
	assert.True(t, strings.HasPrefix(got.String(), "HTTP/1.1 101 "), got.String())
	_, err = io.WriteString(conn, "hello\n")
	require.NoError(t, err)
	n, err := conn.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "echo: hello\n", string(buf[:n]))
	picks, dones, failed := tl.snapshot()
	assert.Equal(t, picks, dones)
	assert.Empty(t, failed)
}
