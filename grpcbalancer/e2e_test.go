package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// backend is a real gRPC server on loopback serving the health service,
// behind an interceptor that can make it slow or answer UNAVAILABLE, and
// that counts what it served.
type backend struct {
	t     *testing.T
	addr  string
	mu    sync.Mutex
	srv   *grpc.Server
	hs    *health.Server // the health service of srv; guarded by mu
	delay atomic.Int64   // nanoseconds added to each reply
	fail  atomic.Bool    // answer UNAVAILABLE
	ok    atomic.Int64   // replies served
	bad   atomic.Int64   // UNAVAILABLE answers
	seen  sync.Map       // rpc-id metadata value → attempts seen
	dup   atomic.Int64   // attempts of an RPC this backend had seen before
}

func startBackend(t *testing.T) *backend {
	b := &backend{t: t, addr: "127.0.0.1:0"}
	b.start()
	t.Cleanup(b.stop)
	return b
}

// start serves on b.addr: a new port the first time, the same one after a
// stop.
func (b *backend) start() {
	lis, err := net.Listen("tcp", b.addr)
	if err != nil {
		b.t.Fatalf("listen %s: %v", b.addr, err)
	}
	b.addr = lis.Addr().String()
	srv := grpc.NewServer(grpc.UnaryInterceptor(b.intercept))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	b.mu.Lock()
	b.srv, b.hs = srv, hs
	b.mu.Unlock()
	go srv.Serve(lis)
}

func (b *backend) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.srv != nil {
		b.srv.Stop()
		b.srv = nil
	}
}

// setServing sets the health service's status of the server as a whole
// (service name ""), which the health service streams to its watchers.
func (b *backend) setServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.hs.SetServingStatus("", st)
}

func (b *backend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if id := md.Get("rpc-id"); len(id) > 0 {
			if _, loaded := b.seen.LoadOrStore(id[0], true); loaded {
				b.dup.Add(1)
			}
		}
	}
	if d := time.Duration(b.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if b.fail.Load() {
		b.bad.Add(1)
		return nil, status.Error(codes.Unavailable, "backend says: try another")
	}
	b.ok.Add(1)
	return h(ctx, req)
}

// serviceConfig is the client's service config: policy with lbConfig, and
// a retry policy on UNAVAILABLE with up to maxAttempts attempts.
func serviceConfig(policy, lbConfig string, maxAttempts int) string {
	return fmt.Sprintf(`{"loadBalancingConfig":[{%q:%s}],
	 "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],
	   "retryPolicy":{"maxAttempts":%d,"initialBackoff":"0.005s","maxBackoff":"0.02s","backoffMultiplier":2,"retryableStatusCodes":["UNAVAILABLE"]}}]}`,
		policy, lbConfig, maxAttempts)
}

// dial returns a client over the manual resolver r and the policy instance
// it built.
func dial(t testing.TB, r *manual.Resolver, sc string) (*grpc.ClientConn, *lbBalancer) {
	built := make(chan *lbBalancer, 1)
	testBuilt = func(b *lbBalancer) { built <- b }
	t.Cleanup(func() { testBuilt = nil })
	conn, err := grpc.NewClient(r.Scheme()+":///backends",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc),
		// Reconnect soon after a backend comes back.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 20 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 200 * time.Millisecond},
			MinConnectTimeout: time.Second,
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	select {
	case b := <-built:
		return conn, b
	case <-time.After(5 * time.Second):
		t.Fatal("the policy was not built")
	}
	return nil, nil
}

func addrs(bs ...*backend) []resolver.Address {
	out := make([]resolver.Address, len(bs))
	for i, b := range bs {
		out[i] = resolver.Address{Addr: b.addr}
	}
	return out
}

// load sends health checks from workers goroutines for d, each with a 3 s
// deadline, and returns how many were sent and the errors.
func load(conn *grpc.ClientConn, workers int, d time.Duration, opts ...grpc.CallOption) (n int64, errs []error) {
	client := healthpb.NewHealthClient(conn)
	var mu sync.Mutex
	var count atomic.Int64
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := 0; time.Now().Before(end) && i < 100000; i++ {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				var last peer.Peer
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, append(opts, grpc.Peer(&last))...)
				cancel()
				count.Add(1)
				if err != nil {
					addr := ""
					if last.Addr != nil {
						addr = last.Addr.String()
					}
					mu.Lock()
					errs = append(errs, &callError{err: err, peer: addr})
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	return count.Load(), errs
}

// callError is a failed RPC of load and the backend its last attempt went
// to ("" if it reached none).
type callError struct {
	err  error
	peer string
}

func (e *callError) Error() string { return fmt.Sprintf("%v (last attempt on %q)", e.err, e.peer) }
func (e *callError) Unwrap() error { return e.err }

// waitFor polls cond every 10 ms for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

// peersOf returns the policy's peers by address.
func peersOf(b *lbBalancer) map[string]*lbgo.Peer {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := map[string]*lbgo.Peer{}
	if b.picker != nil {
		for _, p := range b.picker.Peers() {
			m[p.Addr()] = p
		}
	}
	return m
}

func served(bs ...*backend) []int64 {
	out := make([]int64, len(bs))
	for i, b := range bs {
		out[i] = b.ok.Load()
	}
	return out
}

// TestEndToEnd runs a client with a retry policy against four backends, one
// slow, one answering UNAVAILABLE for a while, one stopped and restarted on
// the same port, and then a resolver update that drops one and adds a
// fifth. No RPC may fail; traffic must leave the failing and (for the
// latency-aware pickers) the slow backend and come back to them.
func TestEndToEnd(t *testing.T) {
	const failTimeout = 500 * time.Millisecond
	for _, tc := range []struct {
		algorithm   string
		config      string
		latencyWise bool // moves traffic off a slow backend
	}{
		{"FastestFirst", `{"maxFails":1,"failTimeout":"0.5s","decay":"0.2s"}`, true},
		{"P2CPeakEWMA", `{"maxFails":1,"failTimeout":"0.5s","decay":"0.2s"}`, true},
		{"SmoothWRR", `{"maxFails":1,"failTimeout":"0.5s"}`, false},
	} {
		t.Run(tc.algorithm, func(t *testing.T) {
			fast, slow, flaky, restarted := startBackend(t), startBackend(t), startBackend(t), startBackend(t)
			slow.delay.Store(int64(30 * time.Millisecond))
			flaky.fail.Store(true)
			r := manual.NewBuilderWithScheme("e2e")
			r.InitialState(resolver.State{Addresses: addrs(fast, slow, flaky, restarted)})
			conn, lb := dial(t, r, serviceConfig(PolicyName(tc.algorithm), tc.config, 5))
			const workers = 4

			// Phase 1: the flaky backend fails every answer. With max_fails
			// 1 each failure takes it out for fail_timeout, after which
			// nginx lets one probe through: at most one failure per
			// fail_timeout, plus one per worker racing a probe.
			n, errs := load(conn, workers, 1200*time.Millisecond)
			if len(errs) > 0 {
				t.Fatalf("phase 1: %d of %d RPCs failed, first: %v", len(errs), n, errs[0])
			}
			maxBad := int64(1 + 1200*time.Millisecond/failTimeout + workers)
			if got := flaky.bad.Load(); got > maxBad || got == 0 {
				t.Errorf("phase 1: the failing backend answered %d attempts, want 1..%d (one probe per fail_timeout)", got, maxBad)
			}
			if tc.latencyWise && 2*slow.ok.Load() >= fast.ok.Load() {
				t.Errorf("phase 1: slow backend served %d, fast one %d: want less than half", slow.ok.Load(), fast.ok.Load())
			}
			t.Logf("phase 1: %d RPCs; served fast %d slow %d flaky %d (failed %d) restarted %d",
				n, fast.ok.Load(), slow.ok.Load(), flaky.ok.Load(), flaky.bad.Load(), restarted.ok.Load())

			// Phase 2: both recover. Within fail_timeout the flaky one is
			// probed and back; the slow one's estimate decays (τ 0.2 s)
			// toward the fastest, so after 1.2 s (6 τ: 0.25% of the old
			// 30 ms excess left, 75 µs) it gets its share again. Half a
			// second (8% left, 2.4 ms) was not enough where a loopback call
			// takes 0.4 ms: in a CI run whose calls came that fast (1524 in
			// 0.6 s), the fast backend still took 1362 of them.
			flaky.fail.Store(false)
			slow.delay.Store(0)
			if _, errs := load(conn, workers, 1200*time.Millisecond); len(errs) > 0 {
				t.Fatalf("phase 2: %d RPCs failed, first: %v", len(errs), errs[0])
			}
			before := served(fast, slow, flaky)
			n, errs = load(conn, workers, 600*time.Millisecond)
			if len(errs) > 0 {
				t.Fatalf("phase 2: %d RPCs failed, first: %v", len(errs), errs[0])
			}
			after := served(fast, slow, flaky)
			f, s, fl := after[0]-before[0], after[1]-before[1], after[2]-before[2]
			t.Logf("phase 2 (second half): %d RPCs; served fast %d slow %d flaky %d", n, f, s, fl)
			if 4*s < f || 4*fl < f {
				t.Errorf("phase 2: recovered backends served slow %d, flaky %d against fast %d: want each at least a quarter", s, fl, f)
			}

			// Phase 3: a backend stops mid-run and comes back on the
			// same port. Its SubConn leaves READY, its peer is marked
			// down; RPCs caught on it are retried elsewhere.
			var wg sync.WaitGroup
			var restartedAt time.Time
			wg.Go(func() {
				time.Sleep(200 * time.Millisecond)
				restarted.stop()
				time.Sleep(300 * time.Millisecond)
				restarted.start()
				restartedAt = time.Now()
			})
			beforeRestart := restarted.ok.Load()
			n, errs = load(conn, workers, 700*time.Millisecond)
			wg.Wait()
			// grpc-go retries an attempt the stop cut only if its answer
			// had not begun: once the response headers are in, the RPC is
			// committed (gRFC A6) and the cut fails it. So an RPC whose
			// last attempt was on the stopped backend may fail UNAVAILABLE,
			// at most one per worker (each has one RPC in flight); any
			// other failure is the policy's.
			var cut int
			for _, err := range errs {
				var ce *callError
				if errors.As(err, &ce) && ce.peer == restarted.addr && status.Code(ce.err) == codes.Unavailable {
					cut++
					continue
				}
				t.Fatalf("phase 3: %d of %d RPCs failed, one not cut by the stop: %v", len(errs), n, err)
			}
			if cut > workers {
				t.Fatalf("phase 3: %d of %d RPCs cut by the stop failed, want at most one per worker (%d): first %v", cut, n, workers, errs[0])
			}
			if cut > 0 {
				t.Logf("phase 3: %d of %d RPCs cut by the stop after their answer began: %v", cut, n, errs[0])
			}
			// Back within the reconnect backoff (at most 200 ms) plus a margin.
			if !waitFor(2*time.Second, func() bool {
				load(conn, workers, 50*time.Millisecond)
				return restarted.ok.Load() > beforeRestart+1
			}) {
				t.Fatalf("phase 3: the restarted backend got no traffic")
			}
			t.Logf("phase 3: restarted backend serving again %v after its restart", time.Since(restartedAt).Round(time.Millisecond))

			// Phase 4: the resolver drops the slow backend and adds a new
			// one. The kept peers are the same Peer values with the same
			// state (the flaky backend's last failure time shows it),
			// up as their SubConns are.
			kept := peersOf(lb)
			flakyState := kept[flaky.addr].State()
			if flakyState.Accessed.IsZero() {
				t.Fatalf("phase 4: the flaky peer has no failure on record: %+v", flakyState)
			}
			added := startBackend(t)
			r.UpdateState(resolver.State{Addresses: addrs(fast, flaky, restarted, added)})
			if !waitFor(2*time.Second, func() bool {
				m := peersOf(lb)
				return m[slow.addr] == nil && m[added.addr] != nil
			}) {
				t.Fatalf("phase 4: the resolver update did not reach the picker: %v", peersOf(lb))
			}
			now := peersOf(lb)
			for _, b := range []*backend{fast, flaky, restarted} {
				if now[b.addr] != kept[b.addr] {
					t.Errorf("phase 4: peer %s was replaced by the update", b.addr)
				}
				// Up if its SubConn is: the push leaves the peer's down
				// flag to the SubConn's state (a kept SubConn may drop
				// its connection for reasons of its own).
				lb.mu.Lock()
				e := lb.ends[b.addr]
				if e.up() == now[b.addr].State().Down {
					t.Errorf("phase 4: kept peer %s down %v after the update, its SubConn %v, health %v",
						b.addr, now[b.addr].State().Down, e.state, e.health)
				}
				lb.mu.Unlock()
			}
			if got := now[flaky.addr].State().Accessed; !got.Equal(flakyState.Accessed) {
				t.Errorf("phase 4: flaky peer's last failure %v became %v across the update", flakyState.Accessed, got)
			}
			slowBefore := slow.ok.Load()
			n, errs = load(conn, workers, 400*time.Millisecond)
			if len(errs) > 0 {
				t.Fatalf("phase 4: %d of %d RPCs failed, first: %v", len(errs), n, errs[0])
			}
			if slow.ok.Load() != slowBefore {
				t.Errorf("phase 4: the dropped backend served %d RPCs after the update", slow.ok.Load()-slowBefore)
			}
			if added.ok.Load() == 0 {
				t.Errorf("phase 4: the added backend served nothing")
			}
			t.Logf("phase 4: %d RPCs; added backend served %d", n, added.ok.Load())
		})
	}
}

// TestWaitForReady takes every backend out by failures, then lets them
// recover: a wait-for-ready RPC started then must wait (the picker has no
// eligible peer) and succeed once the first fail window ends, within
// fail_timeout plus a margin.
func TestWaitForReady(t *testing.T) {
	const failTimeout = 500 * time.Millisecond
	a, b := startBackend(t), startBackend(t)
	r := manual.NewBuilderWithScheme("wfr")
	r.InitialState(resolver.State{Addresses: addrs(a, b)})
	conn, lb := dial(t, r, serviceConfig("lbgo_smoothwrr", `{"maxFails":1,"failTimeout":"0.5s"}`, 2))
	client := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
		t.Fatal(err)
	}

	a.fail.Store(true)
	b.fail.Store(true)
	// Each RPC tries both (two attempts, each peer once) and fails.
	for i := 0; i < 4 && !allOut(lb); i++ {
		c, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		_, err := client.Check(c, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			t.Fatal("an RPC succeeded against failing backends")
		}
	}
	if !allOut(lb) {
		t.Fatalf("the backends are not both in their fail window: %v", peersOf(lb))
	}
	a.fail.Store(false)
	b.fail.Store(false)
	recovered := time.Now()
	next, ok := lb.picker.NextEligible()
	if !ok {
		t.Fatal("NextEligible: no peer in a fail window")
	}

	c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := client.Check(c, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
	took := time.Since(recovered)
	if err != nil {
		t.Fatalf("wait-for-ready RPC failed after %v: %v", took, err)
	}
	const margin = 300 * time.Millisecond
	if took > failTimeout+margin {
		t.Errorf("wait-for-ready RPC took %v after recovery, want at most fail_timeout %v + %v", took, failTimeout, margin)
	}
	if finished := time.Now(); finished.Before(next) {
		t.Errorf("RPC finished at %v, before the first peer was eligible again at %v: it did not wait", finished, next)
	}
	t.Logf("wait-for-ready RPC succeeded %v after recovery (next eligible in %v)", took.Round(time.Millisecond), next.Sub(recovered).Round(time.Millisecond))
}

// allOut reports whether every peer is inside its fail window.
func allOut(b *lbBalancer) bool {
	now := time.Now()
	for _, p := range peersOf(b) {
		s := p.State()
		if s.Fails < p.MaxFails() || now.Sub(s.Checked) > p.FailTimeout() {
			return false
		}
	}
	return true
}

// TestRetriesSkipTriedPeers: with two of three backends always failing and
// failure accounting off (max_fails 0, so only the tried set steers), a
// retry policy of three attempts must land every RPC, each attempt on a
// backend the RPC has not tried. Without the tried set, Random sends all
// three attempts of an RPC to the failing two with probability (2/3)³ =
// 8/27, so 60 RPCs all succeed with probability (19/27)⁶⁰ < 10⁻⁹. The
// retry state of the RPCs is gone once they end.
func TestRetriesSkipTriedPeers(t *testing.T) {
	bs := []*backend{startBackend(t), startBackend(t), startBackend(t)}
	bs[0].fail.Store(true)
	bs[1].fail.Store(true)
	r := manual.NewBuilderWithScheme("skip")
	r.InitialState(resolver.State{Addresses: addrs(bs...)})
	conn, lb := dial(t, r, serviceConfig("lbgo_random", `{"maxFails":0}`, 3))
	// A peer list change between two attempts (here: a SubConn becoming
	// READY) starts the tried set afresh (see the README), so start once
	// every backend is connected.
	if !waitFor(3*time.Second, func() bool { return allReady(lb) }) {
		t.Fatal("the backends did not all connect")
	}
	client := healthpb.NewHealthClient(conn)
	const rpcs = 60
	for i := range rpcs {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		ctx = metadata.AppendToOutgoingContext(ctx, "rpc-id", fmt.Sprint(i))
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("RPC %d failed: %v", i, err)
		}
	}
	for i, b := range bs {
		if d := b.dup.Load(); d > 0 {
			t.Errorf("backend %d saw %d retries of an RPC it had already answered", i, d)
		}
	}
	if got := bs[2].ok.Load(); got != rpcs {
		t.Errorf("the healthy backend served %d, want %d", got, rpcs)
	}
	if bs[0].bad.Load()+bs[1].bad.Load() == 0 {
		t.Errorf("no RPC was retried: the test shows nothing")
	}
	if !waitFor(2*time.Second, func() bool { return rpcEntries(lb) == 0 }) {
		t.Errorf("%d RPCs' retry state left after they ended", rpcEntries(lb))
	}
}

func rpcEntries(b *lbBalancer) int {
	n := 0
	b.rpcs.Range(func(any, any) bool { n++; return true })
	return n
}

// allReady reports whether every endpoint's SubConn is READY.
func allReady(b *lbBalancer) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.ends {
		if e.state != connectivity.Ready {
			return false
		}
	}
	return len(b.ends) > 0
}
