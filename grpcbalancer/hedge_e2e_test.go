package grpcbalancer

import (
	"context"
	"fmt"
	"math"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
)

// The tail fleet: every slowEvery-th attempt a server receives waits 100
// times as long as the others, unless the client cancels it.
const slowEvery = 20 // 5% of the attempts

// tailFleet is real grpc-go health servers on loopback, each of which
// decides by its own counts which attempts are slow: every slowEvery-th
// first attempt of an RPC it receives, and every slowEvery-th later one
// (grpc-previous-rpc-attempts set), so that 5% of the RPCs' first
// attempts and 5% of the hedges are slow, and hedges do not shift which
// first attempts are. It holds each attempt on a timer (fast, or slow =
// 100 × fast) that ends early if the attempt's context is cancelled. It
// counts the slow attempts that waited their full time, by RPC (rpc-id),
// and those whose context the client cancelled; an answer after a slow
// wait carries the header slow: 1.
type tailFleet struct {
	fast, slow    time.Duration
	addrs         []resolver.Address
	count         []*atomic.Int64 // attempts, by server
	slowSeen      atomic.Int64
	slowCancelled atomic.Int64
	slowAnswered  sync.Map // rpc-id -> true
	served        sync.Map // rpc-id -> *servedRPC
	active        atomic.Int64
	idle          chan struct{}
}

// servedRPC is what the servers saw of one RPC: the earliest arrival of
// its attempts, and the earliest end of their waits, as each server set
// its timer (an attempt cancelled counts with the end it would have had).
type servedRPC struct {
	mu         sync.Mutex
	start, end time.Time
}

// servedLatency is the RPC's latency as the servers' timers made it: from
// its first attempt's arrival to the end of the earliest wait, free of
// the time the client takes to see an answer on a loaded machine, but
// not of the hedges' late sending.
func (f *tailFleet) servedLatency(id string) time.Duration {
	v, ok := f.served.Load(id)
	if !ok {
		return 0
	}
	r := v.(*servedRPC)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.end.Sub(r.start)
}

func startTailFleet(t *testing.T, n int, fast time.Duration) *tailFleet {
	f := &tailFleet{fast: fast, slow: 100 * fast, idle: make(chan struct{}, 1)}
	for range n {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		count := new(atomic.Int64)
		var firsts, hedges atomic.Int64
		srv := grpc.NewServer(grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			count.Add(1)
			md, _ := metadata.FromIncomingContext(ctx)
			nth := &firsts
			if len(md.Get("grpc-previous-rpc-attempts")) > 0 {
				nth = &hedges
			}
			f.active.Add(1)
			defer func() {
				if f.active.Add(-1) == 0 {
					select {
					case f.idle <- struct{}{}:
					default:
					}
				}
			}()
			wait, slow := f.fast, nth.Add(1)%slowEvery == 0
			if slow {
				wait = f.slow
				f.slowSeen.Add(1)
			}
			arrival := time.Now()
			v, _ := f.served.LoadOrStore(md.Get("rpc-id")[0], &servedRPC{})
			r := v.(*servedRPC)
			r.mu.Lock()
			if r.start.IsZero() || arrival.Before(r.start) {
				r.start = arrival
			}
			if end := arrival.Add(wait); r.end.IsZero() || end.Before(r.end) {
				r.end = end
			}
			r.mu.Unlock()
			timer := time.NewTimer(wait)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-ctx.Done():
				if slow {
					f.slowCancelled.Add(1)
				}
				return nil, status.FromContextError(ctx.Err()).Err()
			}
			if slow {
				f.slowAnswered.Store(md.Get("rpc-id")[0], true)
				_ = grpc.SetHeader(ctx, metadata.Pairs("slow", "1"))
			}
			return h(ctx, req)
		}))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		f.addrs = append(f.addrs, resolver.Address{Addr: lis.Addr().String()})
		f.count = append(f.count, count)
	}
	return f
}

// attempts is how many attempts the servers have received.
func (f *tailFleet) attempts() int64 {
	var n int64
	for _, c := range f.count {
		n += c.Load()
	}
	return n
}

// quiesce waits until no server holds an attempt: a loser the client did
// not cancel would hold one for its slow wait.
func (f *tailFleet) quiesce(t *testing.T) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for f.active.Load() != 0 {
		select {
		case <-f.idle:
		case <-deadline:
			t.Fatalf("the servers still hold %d attempts", f.active.Load())
		}
	}
}

// tailRun is what one run of RPCs measured.
type tailRun struct {
	latencies []time.Duration // as the client measured them
	served    []time.Duration // as the servers' timers made them (servedLatency)
	slow      map[string]bool // by rpc-id: the answer came after a slow wait
	took      time.Duration
}

// quantile is the q-quantile of ds, by nearest rank.
func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(math.Ceil(q*float64(len(s))))-1]
}

func (r tailRun) p(q float64) time.Duration { return quantile(r.latencies, q) }
func (r tailRun) served99() time.Duration   { return quantile(r.served, 0.99) }

// runTail sends rpcs health checks from workers goroutines, ids from
// first on, and measures each one's latency.
func runTail(t *testing.T, fleet *tailFleet, client healthpb.HealthClient, first, rpcs, workers int) tailRun {
	t.Helper()
	run := tailRun{latencies: make([]time.Duration, rpcs), served: make([]time.Duration, rpcs), slow: map[string]bool{}}
	var mu sync.Mutex
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < rpcs; i = int(next.Add(1)) - 1 {
				id := strconv.Itoa(first + i)
				ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "rpc-id", id), 30*time.Second)
				var md metadata.MD
				t0 := time.Now()
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
				run.latencies[i] = time.Since(t0)
				cancel()
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				run.slow[id] = len(md.Get("slow")) > 0
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	run.took = time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatalf("RPC failed: %v", err)
	}
	for i := range rpcs {
		run.served[i] = fleet.servedLatency(strconv.Itoa(first + i))
	}
	return run
}

// TestHedging_tailE2E: issue 28's end-to-end target against real grpc-go
// servers. Ten servers on loopback where 5% of the RPCs (every 20th first
// attempt a server receives, and every 20th hedge) take 100 times the
// others (a server-held wait of 500 ms against 5 ms, ending early only if
// the client cancels), 16 client goroutines, lbgo_random, first without
// the hedging interceptor and then with it (maxAttempts 2, hedgingDelay 8
// times the fast wait, the default budget). Unhedged, the slow RPCs are
// at least 4% (each server's first 19 are fast), so the p99 is at least
// the slow wait, whatever the machine's load. Hedged:
//
//   - the p99 the servers' timers make (servedLatency: a hedge's late
//     sending counts, the client's late reading of an answer does not)
//     is at least 5 times lower; the p99 the client measures, which a
//     loaded machine's stalls reach, at least 2 times lower;
//   - the attempts the servers received beyond the RPCs are within the
//     default budget: at most floor(0.05 × RPCs) while the run lasts
//     less than 0.9 of the budget's window (an entry counts for at least
//     that long), and that many per such span otherwise;
//   - every slow attempt whose RPC was answered by a fast one ended by
//     its context's cancellation on its server (none waited its time
//     out), and the servers counted such cancellations;
//   - no attempt is left in flight on any peer.
//
// Under the race detector, 400 RPCs and every duration doubled.
func TestHedging_tailE2E(t *testing.T) {
	rpcs, workers, fast := 1000, 16, 5*time.Millisecond
	if raceEnabled {
		rpcs, fast = 400, 10*time.Millisecond
	}
	delay := 8 * fast
	fleet := startTailFleet(t, 10, fast)
	sc := fmt.Sprintf(`{"loadBalancingConfig":[{"lbgo_random":{"maxFails":0}}],
	  "methodConfig":[{"name":[{"service":"grpc.health.v1.Health"}],"hedgingPolicy":{"maxAttempts":2,"hedgingDelay":"%gs"}}]}`, delay.Seconds())
	h, err := NewHedging(sc)
	if err != nil {
		t.Fatal(err)
	}
	plainClient, plainLB := dialPolicy(t, fleet.addrs, grpc.WithDefaultServiceConfig(sc))
	hedgedClient, hedgedLB := dialPolicy(t, fleet.addrs, h.DialOptions()...)

	before := fleet.attempts()
	plain := runTail(t, fleet, plainClient, 0, rpcs, workers)
	fleet.quiesce(t)
	plainExtra := fleet.attempts() - before - int64(rpcs)
	slowBefore, cancelledBefore := fleet.slowSeen.Load(), fleet.slowCancelled.Load()

	before = fleet.attempts()
	hedged := runTail(t, fleet, hedgedClient, rpcs, rpcs, workers)
	fleet.quiesce(t)
	extra := fleet.attempts() - before - int64(rpcs)
	st := h.Stats()
	slow, cancelled := fleet.slowSeen.Load()-slowBefore, fleet.slowCancelled.Load()-cancelledBefore

	t.Logf("unhedged: p50 %v p99 %v p99.9 %v (served p99 %v), %d RPCs in %v, %d extra attempts",
		plain.p(0.5), plain.p(0.99), plain.p(0.999), plain.served99(), rpcs, plain.took, plainExtra)
	t.Logf("hedged:   p50 %v p99 %v p99.9 %v (served p99 %v), %d RPCs in %v, %d extra attempts (%.1f%%); stats %+v; %d slow attempts, %d cancelled on their server",
		hedged.p(0.5), hedged.p(0.99), hedged.p(0.999), hedged.served99(), rpcs, hedged.took, extra, 100*float64(extra)/float64(rpcs), st, slow, cancelled)
	t.Logf("p99 ratio %.1fx (served %.1fx)", float64(plain.p(0.99))/float64(hedged.p(0.99)), float64(plain.served99())/float64(hedged.served99()))

	if plainExtra != 0 {
		t.Errorf("unhedged: the servers received %d attempts beyond the RPCs", plainExtra)
	}
	if p := plain.served99(); p < fleet.slow {
		t.Errorf("unhedged served p99 %v below the servers' slow wait %v: the fleet is not what the test claims", p, fleet.slow)
	}
	if hp, pp := hedged.served99(), plain.served99(); 5*hp > pp {
		t.Errorf("hedged served p99 %v, unhedged %v: want at least 5x lower", hp, pp)
	}
	if hp, pp := hedged.p(0.99), plain.p(0.99); 2*hp > pp {
		t.Errorf("hedged p99 %v, unhedged %v as the client measured them: want at least 2x lower", hp, pp)
	}

	window := DefaultHedgeWindow
	spans := math.Ceil(float64(hedged.took) / (0.9 * float64(window)))
	if bound := int64(math.Floor(DefaultHedgeRatio * float64(rpcs) * spans)); extra > bound || extra > int64(st.Hedges) {
		t.Errorf("the servers received %d attempts beyond %d RPCs, %d hedges sent: want at most the budget's %d", extra, rpcs, st.Hedges, bound)
	}
	if st.RPCs != uint64(rpcs) || st.Won == 0 {
		t.Errorf("stats %+v: want %d RPCs, some won by a hedge", st, rpcs)
	}

	lost := 0
	fleet.slowAnswered.Range(func(k, _ any) bool {
		id := k.(string)
		if n, _ := strconv.Atoi(id); n >= rpcs && !hedged.slow[id] {
			lost++
		}
		return true
	})
	if lost != 0 {
		t.Errorf("%d slow attempts waited their time out on their server though their RPC had a fast answer: not cancelled", lost)
	}
	if cancelled == 0 {
		t.Errorf("no slow attempt was cancelled on its server (%d slow)", slow)
	}
	for _, lb := range []*lbBalancer{plainLB, hedgedLB} {
		for addr, p := range peersOf(lb) {
			if n := p.InFlight(); n != 0 {
				t.Errorf("%s: %d attempts in flight after the runs", addr, n)
			}
		}
	}
}
