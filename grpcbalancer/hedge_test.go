package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// TestHedgedPick_sharedTriedSet: the attempts of one hedged RPC, each with
// a context of its own as the interceptor makes them, share the RPC's
// tried set in the picker: over 8 peers the first 8 attempts land on 8
// distinct peers, whatever the picker (Random draws with repeats on its
// own: 8 draws all distinct has probability 8!/8^8 < 0.3%), and a ninth is
// refused with a status (so gRPC ends it at once) and marked. The attempts
// of another RPC start afresh. A hedged attempt's pick allocates what an
// unhedged one does (the attempt and its Done).
func TestHedgedPick_sharedTriedSet(t *testing.T) {
	hedgingUsed.Store(true)
	for _, alg := range []string{"Random", "SmoothWRR", "P2CPeakEWMA"} {
		t.Run(alg, func(t *testing.T) {
			p := testPicker(t, alg, 8)
			for rpcN := range 3 {
				call := &hedgeCall{}
				seen := map[string]bool{}
				var dones []func(balancer.DoneInfo)
				for i := range 9 {
					a := &hedgeAttempt{call: call}
					ctx, cancel := context.WithCancel(context.WithValue(context.Background(), hedgeKey{}, a))
					res, err := p.Pick(balancer.PickInfo{Ctx: ctx})
					if i == 8 {
						if status.Code(err) != codes.Unavailable || !a.noPeer.Load() {
							t.Fatalf("RPC %d, attempt 9 of 8 peers: err %v, marked %v; want UNAVAILABLE, marked", rpcN, err, a.noPeer.Load())
						}
						cancel()
						continue
					}
					if err != nil {
						t.Fatalf("RPC %d, attempt %d: %v", rpcN, i, err)
					}
					addr := p.lb.Peers()[indexOfSubConn(p, res.SubConn)].Addr()
					if seen[addr] {
						t.Fatalf("RPC %d, attempt %d: %s again, after %v", rpcN, i, addr, seen)
					}
					seen[addr] = true
					dones = append(dones, res.Done)
					defer cancel()
				}
				for _, d := range dones { // in flight together, then done
					d(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
				}
			}
			if n := rpcEntries(p.b); n != 0 {
				t.Errorf("%d RPCs in the retry map: hedged attempts must leave it alone", n)
			}

			plain, cancel := context.WithCancel(context.Background())
			defer cancel()
			unhedged := testing.AllocsPerRun(200, func() {
				res, err := p.Pick(balancer.PickInfo{Ctx: plain})
				if err != nil {
					t.Fatal(err)
				}
				res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			})
			call := &hedgeCall{}
			hctx, hcancel := context.WithCancel(context.WithValue(context.Background(), hedgeKey{}, &hedgeAttempt{call: call}))
			defer hcancel()
			hedged := testing.AllocsPerRun(200, func() {
				call.rpc.req.Reset()
				res, err := p.Pick(balancer.PickInfo{Ctx: hctx})
				if err != nil {
					t.Fatal(err)
				}
				res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			})
			if hedged != unhedged {
				t.Errorf("allocations per pick and done: hedged %v, unhedged %v; want the same", hedged, unhedged)
			}
		})
	}
}

// testPicker is a policy's picker over n peers with fake SubConns and
// failure accounting off, as BenchmarkPickDone builds it.
func testPicker(t *testing.T, alg string, n int) *picker {
	a, err := lbgo.AlgorithmNamed(alg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := defaultConfig()
	cfg.maxFails = 0
	peers := make([]*lbgo.Peer, n)
	for i := range peers {
		peers[i] = cfg.newPeer(fmt.Sprintf("10.0.0.%d:443", i), 1, false, &fakeSubConn{})
	}
	lb, err := a.New(peers, cfg.opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &picker{b: &lbBalancer{name: PolicyName(alg)}, lb: lb, cfg: cfg}
}

func indexOfSubConn(p *picker, sc balancer.SubConn) int {
	for i, q := range p.lb.Peers() {
		if q.Value() == sc {
			return i
		}
	}
	return -1
}

// hedgeBackend is a real gRPC server on loopback, serving the health
// service behind an interceptor that can stall (hold every RPC until
// released or cancelled) or answer a status code, and that counts what it
// saw: attempts, first attempts (no grpc-previous-rpc-attempts), the
// rpc-id values (an RPC's second attempt here is a dup), replies, and the
// stalled attempts whose context the client cancelled.
type hedgeBackend struct {
	addr      string
	srv       *grpc.Server
	mu        sync.Mutex
	gate      chan struct{} // nil: answer at once; else wait for its close
	code      atomic.Int32  // a status code to answer instead of OK
	seen      atomic.Int64
	first     atomic.Int64
	dup       atomic.Int64
	ok        atomic.Int64
	failed    atomic.Int64
	cancelled atomic.Int64
	ids       sync.Map
	// script, if set, answers instead: OK for nil, else its error; it
	// gets the attempt's index (grpc-previous-rpc-attempts).
	script atomic.Pointer[func(ctx context.Context, attempt int) error]
}

func startHedgeBackend(t *testing.T) *hedgeBackend {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &hedgeBackend{addr: lis.Addr().String()}
	b.srv = grpc.NewServer(grpc.UnaryInterceptor(b.intercept))
	healthpb.RegisterHealthServer(b.srv, health.NewServer())
	go b.srv.Serve(lis)
	t.Cleanup(func() { b.release(); b.srv.Stop() })
	return b
}

// stall makes the backend hold every RPC until release.
func (b *hedgeBackend) stall() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate == nil {
		b.gate = make(chan struct{})
	}
}

func (b *hedgeBackend) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.gate != nil {
		close(b.gate)
		b.gate = nil
	}
}

func (b *hedgeBackend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	b.seen.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	if len(md.Get("grpc-previous-rpc-attempts")) == 0 {
		b.first.Add(1)
	}
	if id := md.Get("rpc-id"); len(id) > 0 {
		if _, loaded := b.ids.LoadOrStore(id[0], true); loaded {
			b.dup.Add(1)
		}
	}
	if f := b.script.Load(); f != nil {
		attempt := 0
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			attempt, _ = strconv.Atoi(v[0])
		}
		if err := (*f)(ctx, attempt); err != nil {
			b.failed.Add(1)
			return nil, err
		}
		b.ok.Add(1)
		return h(ctx, req)
	}
	b.mu.Lock()
	gate := b.gate
	b.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			b.cancelled.Add(1)
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	if c := codes.Code(b.code.Load()); c != codes.OK {
		b.failed.Add(1)
		return nil, status.Error(c, "backend says no")
	}
	attempt := "0"
	if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
		attempt = v[0]
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("served-by", b.addr, "attempt", attempt))
	b.ok.Add(1)
	return h(ctx, req)
}

func sumOf(bs []*hedgeBackend, f func(*hedgeBackend) int64) int64 {
	var n int64
	for _, b := range bs {
		n += f(b)
	}
	return n
}

// hedgeSetup starts n backends and a client whose service config picks
// with lbgo_random (failure accounting off, so only the tried set steers)
// and hedges the health service with policy hp, budget b; it returns once
// every SubConn is READY.
func hedgeSetup(t *testing.T, n int, hp string, b *retrybudget.Budget) ([]*hedgeBackend, healthpb.HealthClient, *Hedging) {
	bs := make([]*hedgeBackend, n)
	addrs := make([]resolver.Address, n)
	for i := range bs {
		bs[i] = startHedgeBackend(t)
		addrs[i] = resolver.Address{Addr: bs[i].addr}
	}
	sc := `{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":` + hp + `}]}`
	h, err := NewHedging(sc, WithHedgeBudget(b))
	if err != nil {
		t.Fatal(err)
	}
	return bs, dialHedged(t, h, addrs), h
}

// bigBudget never refuses in these tests.
func bigBudget(t *testing.T) *retrybudget.Budget {
	b, err := retrybudget.New(retrybudget.MaxRatio, 1000, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func rpcCtx(i int) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	return metadata.AppendToOutgoingContext(ctx, "rpc-id", fmt.Sprint(i)), cancel
}

// TestHedging_stalledBackend: one of three backends holds every RPC until
// the end. With a hedge 5 ms after the first attempt, every RPC completes,
// through another backend; the stalled one answers nothing, sees each of
// its attempts cancelled by the client, and sees no RPC twice. Each RPC
// whose first attempt the stalled backend holds is won by a hedge, so Won
// is at least that count. The winner's header and peer reach the caller
// (grpc.Header, grpc.Peer): a healthy backend's, its own. Nothing here
// depends on how long a call takes: the stalled backend never answers.
func TestHedging_stalledBackend(t *testing.T) {
	bs, client, h := hedgeSetup(t, 3, `{"maxAttempts":2,"hedgingDelay":"0.005s"}`, bigBudget(t))
	stalled := bs[0]
	stalled.stall()
	const rpcs = 40
	for i := range rpcs {
		ctx, cancel := rpcCtx(i)
		var md metadata.MD
		var p peer.Peer
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md), grpc.Peer(&p))
		cancel()
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		if got := md.Get("served-by"); len(got) != 1 || p.Addr == nil || got[0] != p.Addr.String() || got[0] == stalled.addr {
			t.Fatalf("RPC %d: header served-by %v, peer %v: want one healthy backend's, the same", i, got, p.Addr)
		}
	}
	if !waitFor(10*time.Second, func() bool { return stalled.cancelled.Load() == stalled.seen.Load() }) {
		t.Errorf("the stalled backend saw %d attempts, %d cancelled: want all", stalled.seen.Load(), stalled.cancelled.Load())
	}
	st := h.Stats()
	t.Logf("stats %+v; stalled backend saw %d (%d first attempts); healthy served %d, %d", st, stalled.seen.Load(), stalled.first.Load(), bs[1].ok.Load(), bs[2].ok.Load())
	if stalled.seen.Load() == 0 {
		t.Fatalf("the stalled backend saw no attempt: the test shows nothing (chance (2/3)^%d)", rpcs)
	}
	if stalled.ok.Load() != 0 {
		t.Errorf("the stalled backend answered %d", stalled.ok.Load())
	}
	if got := bs[1].ok.Load() + bs[2].ok.Load(); got < rpcs || got > rpcs+int64(st.Hedges) {
		t.Errorf("healthy backends served %d; want %d RPCs plus at most %d hedges", got, rpcs, st.Hedges)
	}
	if st.RPCs != rpcs || st.Won < uint64(stalled.first.Load()) || st.Hedges < st.Won || st.Refused != 0 {
		t.Errorf("stats %+v: want %d RPCs, Won at least the %d first attempts the stalled backend held, Hedges >= Won, none refused", st, rpcs, stalled.first.Load())
	}
	for i, b := range bs {
		if b.dup.Load() != 0 {
			t.Errorf("backend %d saw %d RPCs twice", i, b.dup.Load())
		}
	}
	if all := sumOf(bs, func(b *hedgeBackend) int64 { return b.seen.Load() }); all > rpcs+int64(st.Hedges) {
		t.Errorf("the backends saw %d attempts: more than %d RPCs and %d hedges", all, rpcs, st.Hedges)
	}
}

// TestHedging_distinctBackends: three backends hold every RPC, and each RPC
// sends all five attempts at once (hedgingDelay 0s). Three of them land on
// three distinct backends, one each (independent draws by Random would
// put two on one backend with chance 7/9 an RPC); the other two find no
// backend left and are not sent (NoBackend, not Hedges). Then one backend answers: every RPC
// succeeds through it, and the other two see every attempt cancelled.
func TestHedging_distinctBackends(t *testing.T) {
	bs, client, h := hedgeSetup(t, 3, `{"maxAttempts":5,"hedgingDelay":"0s"}`, bigBudget(t))
	for _, b := range bs {
		b.stall()
	}
	const rpcs = 12
	errs := make(chan error, rpcs)
	for i := range rpcs {
		go func() {
			ctx, cancel := rpcCtx(i)
			defer cancel()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			errs <- err
		}()
	}
	if !waitFor(10*time.Second, func() bool {
		return sumOf(bs, func(b *hedgeBackend) int64 { return b.seen.Load() }) == 3*rpcs && h.Stats().NoBackend == 2*rpcs
	}) {
		t.Fatalf("backends saw %d, %d, %d attempts, stats %+v: want %d each, NoBackend %d",
			bs[0].seen.Load(), bs[1].seen.Load(), bs[2].seen.Load(), h.Stats(), rpcs, 2*rpcs)
	}
	for i, b := range bs {
		if b.seen.Load() != rpcs || b.dup.Load() != 0 {
			t.Errorf("backend %d saw %d attempts, %d RPCs twice: want each RPC once", i, b.seen.Load(), b.dup.Load())
		}
	}
	bs[1].release()
	for range rpcs {
		if err := <-errs; err != nil {
			t.Errorf("RPC failed: %v", err)
		}
	}
	if !waitFor(10*time.Second, func() bool { return bs[0].cancelled.Load() == rpcs && bs[2].cancelled.Load() == rpcs }) {
		t.Errorf("cancelled attempts seen: %d and %d, want %d each", bs[0].cancelled.Load(), bs[2].cancelled.Load(), rpcs)
	}
	st := h.Stats()
	// Of each RPC's five attempts three reached a backend: the two
	// after the first to reach one are its hedges sent; the two that
	// found none are not hedges sent.
	if bs[1].ok.Load() != rpcs || st.Hedges != 2*rpcs || st.RPCs != rpcs {
		t.Errorf("the released backend served %d, stats %+v: want %d RPCs, 2 hedges sent each", bs[1].ok.Load(), st, rpcs)
	}
	// Won counts the RPCs whose second or third attempt was on the
	// released backend: all but those whose first was.
	if want := uint64(rpcs - bs[1].first.Load()); st.Won != want {
		t.Errorf("Won %d, want %d (%d RPCs, %d first attempts on the released backend)", st.Won, want, rpcs, bs[1].first.Load())
	}
}

// TestHedging_nonFatalStartsNext: two of three backends answer UNAVAILABLE,
// a non-fatal code, and the hedging delay is five minutes, beyond the RPCs'
// 20 s deadline: an RPC succeeds only if each UNAVAILABLE sends the next
// attempt at once, to a backend the RPC has not tried. Each failed attempt
// is one hedge after it.
func TestHedging_nonFatalStartsNext(t *testing.T) {
	bs, client, h := hedgeSetup(t, 3, `{"maxAttempts":3,"hedgingDelay":"300s","nonFatalStatusCodes":["UNAVAILABLE"]}`, bigBudget(t))
	bs[0].code.Store(int32(codes.Unavailable))
	bs[1].code.Store(int32(codes.Unavailable))
	const rpcs = 30
	for i := range rpcs {
		ctx, cancel := rpcCtx(i)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
	}
	st := h.Stats()
	failed := bs[0].failed.Load() + bs[1].failed.Load()
	t.Logf("stats %+v; UNAVAILABLE answers %d", st, failed)
	if bs[2].ok.Load() != rpcs || st.Hedges != uint64(failed) || failed == 0 {
		t.Errorf("healthy backend served %d, %d UNAVAILABLE answers, stats %+v: want %d served, a hedge per UNAVAILABLE", bs[2].ok.Load(), failed, st, rpcs)
	}
	if st.Won != uint64(rpcs-bs[2].first.Load()) {
		t.Errorf("Won %d, want the %d RPCs whose first attempt failed", st.Won, rpcs-bs[2].first.Load())
	}
	for i, b := range bs {
		if b.dup.Load() != 0 {
			t.Errorf("backend %d saw %d RPCs twice", i, b.dup.Load())
		}
	}
}

// TestHedging_fatalEndsRPC: two backends hold every RPC; both attempts of
// each RPC go at once, one to each. Then one backend answers
// INVALID_ARGUMENT, which the policy does not list as non-fatal: every RPC
// ends with it, and its attempt on the other backend is cancelled. Then,
// with both answering UNAVAILABLE, which is non-fatal, every RPC fails with
// UNAVAILABLE after each backend has answered it once.
func TestHedging_fatalEndsRPC(t *testing.T) {
	bs, client, h := hedgeSetup(t, 2, `{"maxAttempts":2,"nonFatalStatusCodes":["UNAVAILABLE"]}`, bigBudget(t))
	bs[0].stall()
	bs[1].stall()
	const rpcs = 20
	errs := make(chan error, rpcs)
	for i := range rpcs {
		go func() {
			ctx, cancel := rpcCtx(i)
			defer cancel()
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			errs <- err
		}()
	}
	if !waitFor(10*time.Second, func() bool { return bs[0].seen.Load() == rpcs && bs[1].seen.Load() == rpcs }) {
		t.Fatalf("the backends saw %d and %d attempts, want %d each", bs[0].seen.Load(), bs[1].seen.Load(), rpcs)
	}
	bs[1].code.Store(int32(codes.InvalidArgument))
	bs[1].release()
	for range rpcs {
		if err := <-errs; status.Code(err) != codes.InvalidArgument {
			t.Errorf("RPC ended with %v, want INVALID_ARGUMENT", err)
		}
	}
	if !waitFor(10*time.Second, func() bool { return bs[0].cancelled.Load() == rpcs }) {
		t.Errorf("the holding backend saw %d attempts cancelled of %d, want %d", bs[0].cancelled.Load(), bs[0].seen.Load(), rpcs)
	}
	if st := h.Stats(); st.Won != 0 || bs[1].failed.Load() != rpcs {
		t.Errorf("stats %+v, %d INVALID_ARGUMENT answers: want none won, %d answers", st, bs[1].failed.Load(), rpcs)
	}

	before := bs[0].failed.Load() + bs[1].failed.Load()
	bs[0].release()
	bs[0].code.Store(int32(codes.Unavailable))
	bs[1].code.Store(int32(codes.Unavailable))
	for i := range rpcs {
		ctx, cancel := rpcCtx(rpcs + i)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("RPC %d: %v, want UNAVAILABLE", i, err)
		}
	}
	if got := bs[0].failed.Load() + bs[1].failed.Load() - before; got != 2*rpcs {
		t.Errorf("%d UNAVAILABLE answers to %d RPCs over 2 backends: want %d", got, rpcs, 2*rpcs)
	}
}

// TestHedging_budget: the budget bounds the extra attempts. Its clock is
// frozen, so the window never slides: with ratio r and a reserve m
// (minPerSecond × window), after k RPCs at most floor(m + r·k) hedges may
// have been sent (RetryBudget's rule). With hedgingDelay 0s every RPC asks
// for its one hedge as it starts.
//
// Sequential RPCs against answering backends: the k-th RPC's hedge is
// allowed exactly when the hedges so far are below floor(m + r·k), so the
// total is floor(m + r·N): 2 + 0.05 × 100 = 7 of 100 let go (at most 7
// sent), 93 refused.
//
// Concurrent RPCs against backends that hold them (all slow): whatever the
// order, at most floor(1 + 0.1 × 40) = 5 hedges, at least 1 (the first
// RPC's, from the reserve), and the servers see exactly the RPCs and the
// hedges sent.
func TestHedging_budget(t *testing.T) {
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := retrybudget.WithClock(func() time.Time { return frozen })

	t.Run("sequential", func(t *testing.T) {
		b, err := retrybudget.New(0.05, 0.2, 10*time.Second, clock)
		if err != nil {
			t.Fatal(err)
		}
		bs, client, h := hedgeSetup(t, 2, `{"maxAttempts":2,"hedgingDelay":"0s"}`, b)
		const rpcs = 100
		for i := range rpcs {
			ctx, cancel := rpcCtx(i)
			_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
			cancel()
			if err != nil {
				t.Fatalf("RPC %d: %v", i, err)
			}
		}
		st := h.Stats()
		// 7 hedges let go; each counts as sent once it reached a
		// backend after its RPC's first attempt did (an RPC answered
		// before its second pick sent one attempt).
		if st.RPCs != rpcs || st.Hedges > 7 || st.Refused != 93 {
			t.Errorf("stats %+v: want %d RPCs, at most 7 hedges sent, 93 refused", st, rpcs)
		}
		if got := b.Stats(); got.Retries != 7 || got.Refused != 93 {
			t.Errorf("budget %+v: want 7 retries kept, 93 refused", got)
		}
		if got := sumOf(bs, func(b *hedgeBackend) int64 { return b.seen.Load() }); got > rpcs+int64(st.Hedges) {
			t.Errorf("the backends saw %d attempts, more than %d RPCs and %d hedges sent", got, rpcs, st.Hedges)
		}
	})

	t.Run("all slow", func(t *testing.T) {
		b, err := retrybudget.New(0.1, 0.1, 10*time.Second, clock)
		if err != nil {
			t.Fatal(err)
		}
		bs, client, h := hedgeSetup(t, 3, `{"maxAttempts":2,"hedgingDelay":"0s"}`, b)
		for _, b := range bs {
			b.stall()
		}
		const rpcs = 40
		errs := make(chan error, rpcs)
		for i := range rpcs {
			go func() {
				ctx, cancel := rpcCtx(i)
				defer cancel()
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				errs <- err
			}()
		}
		seen := func() int64 { return sumOf(bs, func(b *hedgeBackend) int64 { return b.seen.Load() }) }
		if !waitFor(10*time.Second, func() bool {
			st := h.Stats()
			return st.Hedges+st.Refused == rpcs && seen() == rpcs+int64(st.Hedges)
		}) {
			t.Fatalf("stats %+v, backends saw %d: want every RPC to have asked once, and every attempt seen", h.Stats(), seen())
		}
		st := h.Stats()
		t.Logf("stats %+v", st)
		if st.Hedges > 5 || st.Hedges < 1 {
			t.Errorf("%d hedges for %d RPCs: want 1 to 5", st.Hedges, rpcs)
		}
		for _, b := range bs {
			b.release()
		}
		for range rpcs {
			if err := <-errs; err != nil {
				t.Errorf("RPC failed: %v", err)
			}
		}
		if got := seen(); got != rpcs+int64(st.Hedges) {
			t.Errorf("the backends saw %d attempts, want %d RPCs and %d hedges", got, rpcs, st.Hedges)
		}
	})
}

// BenchmarkHedgingOverhead: one health check over loopback through an
// lbgo_smoothwrr channel, plain and through the hedging interceptor with a
// delay (1 h) that never fires: the interceptor's own cost per RPC (the
// attempt's goroutine, contexts, a fresh reply kept for the caller).
func BenchmarkHedgingOverhead(b *testing.B) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go srv.Serve(lis)
	defer srv.Stop()
	sc := `{"loadBalancingConfig":[{"lbgo_smoothwrr":{}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"3600s"}}]}`
	h, err := NewHedging(sc)
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts []grpc.DialOption
	}{
		{"plain", []grpc.DialOption{grpc.WithDefaultServiceConfig(sc)}},
		{"hedging", h.DialOptions()},
	} {
		b.Run(tc.name, func(b *testing.B) {
			conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
				append(tc.opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			client := healthpb.NewHealthClient(conn)
			ctx := context.Background()
			if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true)); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestIntercept_callOptions drives the interceptor with an invoker of its
// own: attempt 0 blocks until cancelled, attempt 1 answers SERVING and
// writes its trailer and header. The caller gets attempt 1's reply,
// header, trailer and peer; grpc.OnFinish runs once, with the RPC's
// error; attempt 0 is cancelled before Intercept returns. A method without
// a hedging policy, and a reply that is not a proto message, go to the
// invoker once, untouched.
func TestIntercept_callOptions(t *testing.T) {
	h, err := NewHedging(hedgeSC(`{"maxAttempts":2}`), WithHedgeBudget(bigBudget(t)))
	if err != nil {
		t.Fatal(err)
	}
	const method = "/grpc.health.v1.Health/Check"
	var cancelled atomic.Int32
	invoker := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		md, _ := metadata.FromOutgoingContext(ctx)
		attempt := "0"
		if v := md.Get("grpc-previous-rpc-attempts"); len(v) == 1 {
			attempt = v[0]
		}
		for _, o := range opts {
			switch o := o.(type) {
			case grpc.OnFinishCallOption:
				t.Errorf("attempt %s got the caller's OnFinish", attempt)
			case grpc.HeaderCallOption:
				*o.HeaderAddr = metadata.Pairs("attempt", attempt)
			case grpc.TrailerCallOption:
				*o.TrailerAddr = metadata.Pairs("attempt", attempt)
			case grpc.PeerCallOption:
				o.PeerAddr.Addr = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1000 + len(attempt)}
			}
		}
		if attempt == "0" {
			<-ctx.Done()
			cancelled.Add(1)
			return status.FromContextError(ctx.Err()).Err()
		}
		reply.(*healthpb.HealthCheckResponse).Status = healthpb.HealthCheckResponse_SERVING
		return nil
	}
	var reply healthpb.HealthCheckResponse
	var header, trailer metadata.MD
	var p peer.Peer
	var finished []error
	err = h.Intercept(context.Background(), method, &healthpb.HealthCheckRequest{}, &reply, nil, invoker,
		grpc.Header(&header), grpc.Trailer(&trailer), grpc.Peer(&p), grpc.OnFinish(func(err error) { finished = append(finished, err) }))
	if err != nil {
		t.Fatal(err)
	}
	if reply.Status != healthpb.HealthCheckResponse_SERVING || header.Get("attempt")[0] != "1" || trailer.Get("attempt")[0] != "1" || p.Addr == nil {
		t.Errorf("reply %v, header %v, trailer %v, peer %v: want attempt 1's", &reply, header, trailer, p.Addr)
	}
	if len(finished) != 1 || finished[0] != nil {
		t.Errorf("OnFinish ran with %v, want once with nil", finished)
	}
	if cancelled.Load() != 1 {
		t.Errorf("attempt 0 cancelled %d times before Intercept returned, want 1", cancelled.Load())
	}
	if st := h.Stats(); st != (HedgingStats{RPCs: 1, Hedges: 1, Won: 1}) {
		t.Errorf("stats %+v", st)
	}

	// Passed through: once, with the caller's reply and options.
	calls := 0
	var sawReply any
	var sawOpts int
	through := func(ctx context.Context, _ string, _, reply any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		calls++
		sawReply, sawOpts = reply, len(opts)
		if ctx.Value(hedgeKey{}) != nil {
			t.Error("a passed-through call is marked hedged")
		}
		return nil
	}
	notProto := new(struct{ A int })
	for _, tc := range []struct {
		method string
		reply  any
	}{
		{"/other.Service/M", &healthpb.HealthCheckResponse{}},
		{method, notProto},
	} {
		calls = 0
		if err := h.Intercept(context.Background(), tc.method, nil, tc.reply, nil, through, grpc.Header(&header)); err != nil {
			t.Fatal(err)
		}
		if calls != 1 || sawReply != tc.reply || sawOpts != 1 {
			t.Errorf("%s %T: %d calls, reply %p, %d options: want 1 call with the caller's reply %p and its option", tc.method, tc.reply, calls, sawReply, sawOpts, tc.reply)
		}
	}
	if st := h.Stats(); st.RPCs != 1 {
		t.Errorf("passed-through calls counted: %+v", st)
	}
}

// TestHedging_events: WithHedgeEvents reports what Stats counts, one
// event each, against two backends that answer at once. The budget's
// clock is frozen and each RPC asks for its hedge as it starts
// (hedgingDelay 0s), so of 100 RPCs 7 hedges are let go and 93 refused
// (ratio 0.05, reserve 2: floor(2 + 0.05 × 100), as TestHedging_budget
// derives); a hedge counts as sent once it reaches a backend after its
// RPC's first attempt did, so at most 7, and at least the attempts the
// backends saw beyond one an RPC. An RPC is won by its hedge when the answer's attempt header,
// which the server sets, is 1; its EventHedgeWon names the peer whose
// address the server put in served-by. Every event's time lies within its
// RPC.
func TestHedging_events(t *testing.T) {
	if _, err := NewHedging(hedgeSC(`{"maxAttempts":2}`), WithHedgeEvents(nil)); !errors.Is(err, ErrBadHedgingConfig) {
		t.Errorf("WithHedgeEvents(nil): %v, want ErrBadHedgingConfig", err)
	}
	frozen := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	b, err := retrybudget.New(0.05, 0.2, 10*time.Second, retrybudget.WithClock(func() time.Time { return frozen }))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var events []lbgo.Event
	hook := func(e lbgo.Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	}
	bs := make([]*hedgeBackend, 2)
	addrs := make([]resolver.Address, len(bs))
	for i := range bs {
		bs[i] = startHedgeBackend(t)
		addrs[i] = resolver.Address{Addr: bs[i].addr}
	}
	h, err := NewHedging(`{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"0s"}}]}`,
		WithHedgeBudget(b), WithHedgeEvents(hook))
	if err != nil {
		t.Fatal(err)
	}
	client := dialHedged(t, h, addrs)

	const rpcs = 100
	var sent, refused, won int
	for i := range rpcs {
		mu.Lock()
		events = events[:0]
		mu.Unlock()
		ctx, cancel := rpcCtx(i)
		var md metadata.MD
		start := time.Now()
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
		end := time.Now()
		cancel()
		if err != nil {
			t.Fatalf("RPC %d: %v", i, err)
		}
		hedgeWon := md.Get("attempt")[0] == "1"
		mu.Lock()
		got := slices.Clone(events)
		mu.Unlock()
		wonEvents := 0
		for _, e := range got {
			if e.Time.Before(start) || e.Time.After(end) {
				t.Errorf("RPC %d: %v at %v, outside the RPC's [%v, %v]", i, e.Kind, e.Time, start, end)
			}
			switch e.Kind {
			case lbgo.EventHedgeSent:
				sent++
			case lbgo.EventHedgeRefused:
				refused++
			case lbgo.EventHedgeWon:
				wonEvents++
				if e.Peer == nil || e.Peer.Addr() != md.Get("served-by")[0] {
					t.Errorf("RPC %d: EventHedgeWon's peer %v, want the server's %s", i, e.Peer, md.Get("served-by"))
				}
			default:
				t.Errorf("RPC %d: event %v", i, e.Kind)
			}
		}
		if want := map[bool]int{true: 1}[hedgeWon]; wonEvents != want {
			t.Errorf("RPC %d: %d EventHedgeWon, want %d (answered by attempt %s)", i, wonEvents, want, md.Get("attempt"))
		}
		if hedgeWon {
			won++
		}
	}
	// The budget lets 7 hedges go; one counts as sent only when it
	// reached a backend after its RPC's first attempt did, not when its
	// RPC ended before the second pick.
	if sent > 7 || refused != 93 {
		t.Errorf("%d EventHedgeSent, %d EventHedgeRefused: want at most 7, 93", sent, refused)
	}
	if got := b.Stats(); got.Retries != 7 || got.Refused != 93 {
		t.Errorf("budget %+v: want 7 retries kept, 93 refused", got)
	}
	if seen := sumOf(bs, func(b *hedgeBackend) int64 { return b.seen.Load() }); seen-rpcs > int64(sent) {
		t.Errorf("the backends saw %d attempts: more than %d RPCs and %d hedges sent", seen, rpcs, sent)
	}
	if st := h.Stats(); st.Hedges != uint64(sent) || st.Refused != uint64(refused) || st.Won != uint64(won) {
		t.Errorf("stats %+v; events: %d sent, %d refused, %d won", st, sent, refused, won)
	}
}

// dialHedged dials addrs through h's options and waits until every
// SubConn is READY.
func dialHedged(t *testing.T, h *Hedging, addrs []resolver.Address) healthpb.HealthClient {
	t.Helper()
	client, _ := dialPolicy(t, addrs, h.DialOptions()...)
	return client
}

// dialPolicy dials addrs with opts, which give the service config, and
// waits until the policy it builds has every SubConn READY.
func dialPolicy(t *testing.T, addrs []resolver.Address, opts ...grpc.DialOption) (healthpb.HealthClient, *lbBalancer) {
	t.Helper()
	r := manual.NewBuilderWithScheme("hedge")
	r.InitialState(resolver.State{Addresses: addrs})
	built := make(chan *lbBalancer, 1)
	testBuilt = func(b *lbBalancer) {
		select {
		case built <- b: // the first
		default:
		}
	}
	t.Cleanup(func() { testBuilt = nil })
	conn, err := grpc.NewClient(r.Scheme()+":///backends", append(opts,
		grpc.WithResolvers(r), grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	var lb *lbBalancer
	select {
	case lb = <-built:
	case <-time.After(10 * time.Second):
		t.Fatal("the policy was not built")
	}
	if !waitFor(10*time.Second, func() bool { return allReady(lb) }) {
		t.Fatal("the backends did not all connect")
	}
	return healthpb.NewHealthClient(conn), lb
}
