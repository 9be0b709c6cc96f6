package grpcbalancer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// churnFleet is a list of live probe servers behind a manual resolver
// that the test changes as a service-discovery system would: every push
// leaves out one random live server (back on the next push), and a
// replacement starts a server on a new port in place of the oldest,
// which then stops.
type churnFleet struct {
	t     testing.TB
	r     *manual.Resolver
	rng   *rand.Rand
	delay time.Duration // each health check's service time
	live  []*probeServer
	gone  []*probeServer // replaced and stopped
	// onTick, if set, is called at each tick of churn, before its push,
	// with the tick's number from 1.
	onTick func(i int)
}

func newChurnFleet(t testing.TB, n int, seed uint64, delay time.Duration) *churnFleet {
	f := &churnFleet{t: t, r: manual.NewBuilderWithScheme("churn"), rng: rand.New(rand.NewPCG(seed, 1)), delay: delay}
	for range n {
		f.live = append(f.live, f.start())
	}
	f.r.InitialState(f.state(-1))
	return f
}

func (f *churnFleet) start() *probeServer {
	s := startProbeServer(f.t, true, false)
	s.delay.Store(int64(f.delay))
	return s
}

// state lists the live servers but the skip-th (none for -1).
func (f *churnFleet) state(skip int) resolver.State {
	var as []resolver.Address
	for i, s := range f.live {
		if i != skip {
			as = append(as, resolver.Address{Addr: s.addr})
		}
	}
	return resolver.State{Addresses: as}
}

// push sends the resolver the live list without one random server.
func (f *churnFleet) push() { f.r.UpdateState(f.state(f.rng.IntN(len(f.live)))) }

// replace starts a server on a new port in place of the oldest, pushes
// the list with it, and stops the oldest, cutting its calls in flight.
func (f *churnFleet) replace() {
	s := f.start()
	old := f.live[0]
	f.live = append(f.live[1:], s)
	f.r.UpdateState(f.state(-1))
	old.srv.Stop()
	f.gone = append(f.gone, old)
}

// churn pushes every 200 ms and replaces a server every replaceEvery
// pushes, until ctx ends.
func (f *churnFleet) churn(ctx context.Context, replaceEvery int) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			f.r.UpdateState(f.state(-1))
			return
		case <-tick.C:
		}
		if f.onTick != nil {
			f.onTick(i)
		}
		if i%replaceEvery == 0 {
			f.replace()
		} else {
			f.push()
		}
	}
}

// waitedKey marks an RPC's context with the flag the no-peer hook sets.
type waitedKey struct{}

// noPeerCounter counts the picks that found no peer, and those among them
// made while the policy saw a SubConn READY and healthy and had handed
// gRPC no newer picker (so the RPC waits for another event), through the
// testNoPeer hook; first describes the policy's endpoints at the first of
// those.
type noPeerCounter struct {
	all, ready atomic.Int64
	mu         sync.Mutex
	first      string
}

func (c *noPeerCounter) install(t testing.TB) {
	f := func(p *picker, ctx context.Context) {
		b := p.b
		c.all.Add(1)
		if w, ok := ctx.Value(waitedKey{}).(*atomic.Bool); ok {
			w.Store(true)
		}
		b.mu.Lock()
		// A READY peer counts only if p is still gRPC's picker: a peer
		// that came up after p's pick came with a new picker, on which
		// the RPC picks again at once.
		ready := false
		current := b.pushed == p
		var desc strings.Builder
		for _, e := range b.ends {
			ready = ready || current && e.up()
			fmt.Fprintf(&desc, "\n  %s %v health %v", e.key, e.state, e.health)
			if e.peer != nil {
				st := e.peer.State()
				fmt.Fprintf(&desc, ", peer down %v fails %d in flight %d checked %v ago", st.Down, st.Fails, st.InFlight, time.Since(st.Checked))
			}
		}
		b.mu.Unlock()
		if ready && c.ready.Add(1) == 1 {
			c.mu.Lock()
			c.first = desc.String()
			c.mu.Unlock()
		}
	}
	testNoPeer.Store(&f)
	t.Cleanup(func() { testNoPeer.Store(nil) })
}

// String describes the count, and the endpoints at the first pick while READY.
func (c *noPeerCounter) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%d picks found no peer while a SubConn was READY and healthy; at the first:%s", c.ready.Load(), c.first)
}

// latencies is what a load phase measured: every RPC's latency, sorted,
// the latencies of those that waited for a picker, and the errors.
type latencies struct {
	all, waited []time.Duration
	errs        []error
}

func (l *latencies) quantile(q float64) time.Duration {
	if len(l.all) == 0 {
		return 0
	}
	return l.all[min(len(l.all)-1, int(q*float64(len(l.all))))]
}

func (l *latencies) max() time.Duration {
	if len(l.all) == 0 {
		return 0
	}
	return l.all[len(l.all)-1]
}

// pace runs workers goroutines, each sending a health check (3 s
// deadline) and then waiting think, until ctx ends.
func pace(ctx context.Context, conn *grpc.ClientConn, workers int, think time.Duration) *latencies {
	client := healthpb.NewHealthClient(conn)
	var mu sync.Mutex
	out := &latencies{}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				var waited atomic.Bool
				rctx, cancel := context.WithTimeout(context.WithValue(context.Background(), waitedKey{}, &waited), 3*time.Second)
				start := time.Now()
				_, err := client.Check(rctx, &healthpb.HealthCheckRequest{})
				d := time.Since(start)
				cancel()
				mu.Lock()
				out.all = append(out.all, d)
				if waited.Load() {
					out.waited = append(out.waited, d)
				}
				if err != nil {
					out.errs = append(out.errs, err)
				}
				mu.Unlock()
				select {
				case <-ctx.Done():
				case <-time.After(think):
				}
			}
		})
	}
	wg.Wait()
	slices.Sort(out.all)
	slices.Sort(out.waited)
	return out
}

// dialAny dials the fleet with policy, client-side health checking (the
// servers serve the health service) and the health service's retry policy
// (3 attempts on UNAVAILABLE).
func dialAny(t testing.TB, r *manual.Resolver, policy, lbConfig string) *grpc.ClientConn {
	sc := serviceConfig(policy, lbConfig, 3)
	sc = sc[:len(sc)-1] + `, "healthCheckConfig": {"serviceName": ""}}`
	conn, err := grpc.NewClient(r.Scheme()+":///backends",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc))
	require.NoError(t, err)
	conn.Connect()
	return conn
}

// churnResult is one policy's run: the churn phase, then the same load on
// the same servers with the list left alone.
type churnResult struct {
	churn, steady     *latencies
	noPeer, noPeerRdy int64  // picks with no peer, and those while READY
	noPeerWhy         string // the endpoints at the first while READY
	noLive            uint64 // the picker's NoLivePeerCount after the churn
}

// The churn test's load: about 600 RPCs/s (the soak's 560) from 32
// workers, each waiting 50 ms between calls that take 2 ms.
const (
	churnWorkers = 32
	churnThink   = 50 * time.Millisecond
	churnService = 2 * time.Millisecond
)

// runChurn runs policy against a fleet of six servers: the workers start
// as the client is made, while the list changes (a push every 200 ms, a
// replacement every fifth) for churnFor, then for steadyFor with the list
// left alone.
func runChurn(t *testing.T, policy string, churnFor, steadyFor time.Duration) churnResult {
	var c noPeerCounter
	c.install(t)
	f := newChurnFleet(t, 6, 34, churnService)
	conn := dialAny(t, f.r, policy, "{}")
	defer conn.Close()

	ctx, cancel := context.WithTimeout(context.Background(), churnFor)
	defer cancel()
	var res churnResult
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.churn(ctx, 5)
	}()
	res.churn = pace(ctx, conn, churnWorkers, churnThink)
	<-done
	res.noPeer, res.noPeerRdy, res.noPeerWhy = c.all.Load(), c.ready.Load(), c.String()
	res.noLive = Channel(f.r.Scheme() + ":///backends").NoLivePeerCount()

	sctx, scancel := context.WithTimeout(context.Background(), steadyFor)
	defer scancel()
	res.steady = pace(sctx, conn, churnWorkers, churnThink)
	return res
}

// TestChurn_noPickFailsWhileReady: six servers behind a resolver that
// pushes a list every 200 ms (one random server left out, back on the
// next push) and replaces the oldest server with one on a new port every
// second, stopping it with calls in flight; the calls start as the client
// is made. For every lbgo_* policy: no pick finds no peer while the policy
// holds a READY and healthy SubConn, and no RPC fails (the retry policy
// covers the calls a stopped server cuts). grpc-go's round_robin runs the
// same load first, as the reference for the latency, logged for each
// policy beside its own run without churn.
func TestChurn_noPickFailsWhileReady(t *testing.T) {
	if testing.Short() {
		t.Skip("4 s per policy")
	}
	policies := []string{"round_robin"}
	for _, a := range lbgo.Algorithms() {
		policies = append(policies, PolicyName(a.Name))
	}
	var rr churnResult
	for _, policy := range policies {
		t.Run(policy, func(t *testing.T) {
			r := runChurn(t, policy, 2500*time.Millisecond, 1500*time.Millisecond)
			if policy == "round_robin" {
				rr = r
			}
			t.Logf("%-22s churn: %5d RPCs, p99 %6.1f ms (round_robin %6.1f), max %6.1f ms; %2d waited for a picker (slowest %5.1f ms); "+
				"steady: p99 %6.1f ms; no-peer picks %d, while READY %d; NoLivePeerCount %d",
				policy, len(r.churn.all), ms(r.churn.quantile(0.99)), ms(rr.churn.quantile(0.99)), ms(r.churn.max()),
				len(r.churn.waited), ms(maxOf(r.churn.waited)), ms(r.steady.quantile(0.99)), r.noPeer, r.noPeerRdy, r.noLive)
			require.Empty(t, r.churn.errs, "RPCs failed under churn")
			require.Empty(t, r.steady.errs, "RPCs failed after the churn")
			require.Zero(t, r.noPeerRdy, r.noPeerWhy)
			require.Zero(t, r.noLive, "the picker found no live peer")
		})
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func maxOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}
