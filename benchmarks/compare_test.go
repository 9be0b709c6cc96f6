// Package benchmarks times the balancer's pickers side by side with the
// fastest Go load balancers on the same workloads, and next to the physical
// floor of a pick: one atomic add on a shared counter and one draw from the
// runtime's random generator. run.sh runs it and writes BENCHMARKS.md.
package benchmarks

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/pkg/discovery"
	"github.com/cloudwego/kitex/pkg/loadbalance"
	"github.com/go-kratos/kratos/v2/registry"
	"github.com/go-kratos/kratos/v2/selector"
	"github.com/go-kratos/kratos/v2/selector/p2c"
	"github.com/go-kratos/kratos/v2/selector/wrr"
	"github.com/lbgo/balancer"
	"github.com/mroth/weightedrand/v2"
	"github.com/smallnest/weighted"
)

// sizes are the peer counts every workload runs at, as in the library's
// own pick benchmarks.
var sizes = []int{2, 10, 100, 1000, 10000}

// weight is the weight of peer i in every workload.
func weight(i int) int { return i%10 + 1 }

func addr(i int) string { return fmt.Sprintf("10.0.%d.%d:80", i/256, i%256) }

// A runner times one implementation over a list it built beforehand,
// serially (b.Loop) or from b.RunParallel's goroutines. Each runner calls
// the implementation's own API directly, so no adapter sits on any pick.
type runner func(b *testing.B, parallel bool)

// impl is one implementation in a family: setup builds it over n peers.
type impl struct {
	name  string
	setup func(n int) runner
}

// families groups implementations of one algorithm. The report compares
// each of this library's entries (named lbgo.*) with every other entry of
// its family and with the floor.
var families = []struct {
	name  string
	impls []impl
}{
	{"smooth", []impl{
		{"lbgo.SmoothWRR", ours(balancer.NewSmoothWRR, false)},
		{"kitex.WRR", kitex(loadbalance.NewWeightedRoundRobinBalancer, true)},
		{"smallnest.SW", smallnest(func() weighted.W { return &weighted.SW{} })},
		{"kratos.wrr", kratos(func() selector.Selector { return wrr.New() })},
	}},
	// SmoothWRR with weights in motion runs nginx's scan on every pick;
	// max_conns on one peer (never reached here) keeps it there, as a
	// failure or a recovering effective weight would.
	{"smooth-scan", []impl{
		{"lbgo.SmoothWRR", oursScan},
		{"smallnest.SW", smallnest(func() weighted.W { return &weighted.SW{} })},
	}},
	{"classic", []impl{
		{"lbgo.ClassicWRR", ours(balancer.NewClassicWRR, false)},
		{"kitex.WRR", kitex(loadbalance.NewWeightedRoundRobinBalancer, true)},
		{"kitex.IWRR", kitex(loadbalance.NewInterleavedWeightedRoundRobinBalancer, true)},
		{"smallnest.RRW", smallnest(func() weighted.W { return &weighted.RRW{} })},
	}},
	// Plain round robin: kitex's weighted balancer falls back to its
	// padded-counter round robin when every weight is equal.
	{"roundrobin", []impl{
		{"lbgo.RoundRobin", ours(balancer.NewRoundRobin, false)},
		{"kitex.RR", kitex(loadbalance.NewWeightedRoundRobinBalancer, false)},
	}},
	{"random", []impl{
		{"lbgo.RandomWeighted", ours(balancer.NewRandomWeighted, false)},
		{"kitex.alias", kitex(loadbalance.NewWeightedRandomWithAliasMethodBalancer, true)},
		{"kitex.random", kitex(loadbalance.NewWeightedRandomBalancer, true)},
		{"mroth.v2", mroth},
	}},
	// Pickers that learn from each outcome: Pick and its report.
	{"feedback", []impl{
		{"lbgo.LeastConn", ours(balancer.NewLeastConn, true)},
		{"lbgo.P2CPeakEWMA", ours(balancer.NewP2CPeakEWMA, true)},
		{"lbgo.FastestFirst", ours(balancer.NewFastestFirst, true)},
		{"lbgo.RandomTwo", ours(balancer.NewRandomTwo, true)},
		{"kratos.p2c", kratos(func() selector.Selector { return p2c.New() })},
	}},
	// The same under the latencies real servers give (see latencies): the
	// latency-aware pickers' cost depends on what they are fed. kratos's
	// p2c measures its own latencies, so its cost does not.
	{"feedback-lognormal", []impl{
		{"lbgo.P2CPeakEWMA", oursLat(balancer.NewP2CPeakEWMA, "lognormal")},
		{"lbgo.FastestFirst", oursLat(balancer.NewFastestFirst, "lognormal")},
		{"kratos.p2c", kratos(func() selector.Selector { return p2c.New() })},
	}},
	{"feedback-bimodal", []impl{
		{"lbgo.P2CPeakEWMA", oursLat(balancer.NewP2CPeakEWMA, "bimodal")},
		{"lbgo.FastestFirst", oursLat(balancer.NewFastestFirst, "bimodal")},
		{"kratos.p2c", kratos(func() selector.Selector { return p2c.New() })},
	}},
	// Weighted round robin by the servers' reports (ReportedWRR, its
	// weights derived from every peer's report) against SmoothWRR's
	// static weights, the cycle both run: the pick alone, and the pick
	// with Done carrying the server's load (none for SmoothWRR), steady.
	{"reported", []impl{
		{"lbgo.ReportedWRR", oursReported("")},
		{"lbgo.SmoothWRR", ours(balancer.NewSmoothWRR, false)},
	}},
	{"reported-report", []impl{
		{"lbgo.ReportedWRR", oursReported("steady")},
		{"lbgo.SmoothWRR", ours(balancer.NewSmoothWRR, true)},
	}},
	// The same with reports that move (see movingLoads): a recompute
	// that changes the weights every update period.
	{"reported-moving", []impl{
		{"lbgo.ReportedWRR", oursReported("moving")},
		{"lbgo.SmoothWRR", ours(balancer.NewSmoothWRR, true)},
	}},
	// Consistent hashing: each pick hashes one of hashKeys, in turn, and
	// finds its point on a ring of 160 points per unit of weight.
	{"consistent", []impl{
		{"lbgo.ConsistentHash", oursConsistent},
		{"kitex.consist", kitexConsist},
	}},
}

// hashKeys are the keys the consistent-hash workload picks for, in turn:
// 4096 distinct request keys such as user ids.
var hashKeys = func() []string {
	keys := make([]string, 4096)
	for i := range keys {
		keys[i] = "user-" + strconv.Itoa(i*7919)
	}
	return keys
}()

// ringPoints is the points per unit of weight of both rings: nginx's 160
// (ketama's), which ConsistentHash always uses and kitex takes as its
// VirtualFactor, so that both rings have the same size.
const ringPoints = 160

// hashPeers returns the workload's peers for ConsistentHash.
func hashPeers(n int) []*balancer.Peer {
	peers := make([]*balancer.Peer, n)
	for i := range peers {
		peers[i] = balancer.NewPeer(addr(i), balancer.Weight(weight(i)))
	}
	return peers
}

// oursConsistent builds a ConsistentHash; each pick sets the next key on a
// Request of its goroutine, reset first, as a caller reusing one would.
func oursConsistent(n int) runner {
	c, err := balancer.NewConsistentHash(hashPeers(n))
	if err != nil {
		panic(err)
	}
	mask := len(hashKeys) - 1
	return func(b *testing.B, parallel bool) {
		if !parallel {
			var r balancer.Request
			i := 0
			for b.Loop() {
				r.Reset()
				r.SetKey(hashKeys[i&mask])
				_, _ = c.Pick(&r)
				i++
			}
			return
		}
		var seq atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			var r balancer.Request
			i := int(seq.Add(1) * 977)
			for pb.Next() {
				r.Reset()
				r.SetKey(hashKeys[i&mask])
				_, _ = c.Pick(&r)
				i++
			}
		})
	}
}

// kitexKeys are hashKeys boxed once, so that passing a key to kitex's
// picker as its request allocates nothing.
var kitexKeys = func() []any {
	out := make([]any, len(hashKeys))
	for i, k := range hashKeys {
		out[i] = k
	}
	return out
}()

// kitexConsistOption is kitex's consistent hash over the same ring size:
// the request is the key, and weighted virtual nodes.
var kitexConsistOption = loadbalance.ConsistentHashOption{
	GetKey:        func(_ context.Context, req any) string { return req.(string) },
	VirtualFactor: ringPoints,
	Weighted:      true,
}

func kitexInstances(n int) []discovery.Instance {
	ins := make([]discovery.Instance, n)
	for i := range ins {
		ins[i] = discovery.NewInstance("tcp", addr(i), weight(i), nil)
	}
	return ins
}

// kitexConsist builds kitex's consistent-hash picker once and calls its
// Next for each key, the cheapest way to use it (kitex itself gets a
// picker from its cache, calls Next once and recycles it, per request).
func kitexConsist(n int) runner {
	lb := loadbalance.NewConsistBalancer(kitexConsistOption)
	p := lb.GetPicker(discovery.Result{Cacheable: true, CacheKey: "bench", Instances: kitexInstances(n)})
	ctx := context.Background()
	mask := len(kitexKeys) - 1
	return func(b *testing.B, parallel bool) {
		if !parallel {
			i := 0
			for b.Loop() {
				p.Next(ctx, kitexKeys[i&mask])
				i++
			}
			return
		}
		var seq atomic.Int64
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			i := int(seq.Add(1) * 977)
			for pb.Next() {
				p.Next(ctx, kitexKeys[i&mask])
				i++
			}
		})
	}
}

// BenchmarkRingBuild times building a consistent-hash ring of 160 points
// per unit of weight over n peers, and reports its memory (B/op):
// RingBuild/<impl>/peers=<n>. ConsistentHash rebuilds its ring on every
// change of the peers or their weights, so the benchmark changes one
// peer's weight back and forth; kitex builds a ring for each uncached
// discovery result.
func BenchmarkRingBuild(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprint("lbgo.ConsistentHash/peers=", n), func(b *testing.B) {
			peers := hashPeers(n)
			c, err := balancer.NewConsistentHash(peers)
			if err != nil {
				b.Fatal(err)
			}
			w := peers[0].Weight()
			b.ReportAllocs()
			i := 1 // every iteration changes the weight, so every one rebuilds
			for b.Loop() {
				if err := c.SetWeight(peers[0], w+i%2); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(fmt.Sprint("kitex.consist/peers=", n), func(b *testing.B) {
			lb := loadbalance.NewConsistBalancer(kitexConsistOption)
			res := discovery.Result{Instances: kitexInstances(n)}
			b.ReportAllocs()
			for b.Loop() {
				p := lb.GetPicker(res)
				if r, ok := p.(interface{ Recycle() }); ok {
					r.Recycle()
				}
			}
		})
	}
}

// BenchmarkCompare runs every family: Compare/<family>/<impl>/peers=<n>/<mode>.
func BenchmarkCompare(b *testing.B) {
	for _, f := range families {
		b.Run(f.name, func(b *testing.B) {
			for _, im := range f.impls {
				b.Run(im.name, func(b *testing.B) {
					for _, n := range sizes {
						b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
							run := im.setup(n)
							b.Run("serial", func(b *testing.B) { b.ReportAllocs(); run(b, false) })
							b.Run("parallel", func(b *testing.B) { b.ReportAllocs(); run(b, true) })
						})
					}
				})
			}
		})
	}
}

// floorCounter is the shared counter of the atomic-add floor, alone on its
// cache line.
var floorCounter struct {
	_ [64]byte
	v atomic.Uint64
	_ [56]byte
}

var floorSink atomic.Uint64

// BenchmarkFloor is the physical floor: a bare atomic add on one shared
// counter (what any pick that hands out one shared sequence pays) and a
// bare draw from math/rand/v2's per-thread generator (what a random pick
// pays).
func BenchmarkFloor(b *testing.B) {
	b.Run("atomic.Add/serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			floorCounter.v.Add(1)
		}
	})
	b.Run("atomic.Add/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				floorCounter.v.Add(1)
			}
		})
	})
	b.Run("rand.Uint64/serial", func(b *testing.B) {
		b.ReportAllocs()
		var x uint64
		for b.Loop() {
			x ^= rand.Uint64()
		}
		floorSink.Store(x)
	})
	b.Run("rand.Uint64/parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			var x uint64
			for pb.Next() {
				x ^= rand.Uint64()
			}
			floorSink.Add(x)
		})
	})
}

// ours builds one of the library's pickers; a feedback picker's runner
// reports a success with a latency after each pick.
func ours[P balancer.Picker](newPicker func([]*balancer.Peer, ...balancer.Option) (P, error), feedback bool) func(int) runner {
	return func(n int) runner {
		peers := make([]*balancer.Peer, n)
		for i := range peers {
			peers[i] = balancer.NewPeer(addr(i), balancer.Weight(weight(i)))
		}
		p, err := newPicker(peers)
		if err != nil {
			panic(err)
		}
		return pickerRunner(p, feedback)
	}
}

// oursScan builds a SmoothWRR held in its exact scan: peer 0 has a
// max_conns, never reached, which keeps the cycle closed as one failing or
// recovering peer would.
func oursScan(n int) runner {
	peers := make([]*balancer.Peer, n)
	for i := range peers {
		opts := []balancer.PeerOption{balancer.Weight(weight(i))}
		if i == 0 {
			opts = append(opts, balancer.MaxConns(1<<30))
		}
		peers[i] = balancer.NewPeer(addr(i), opts...)
	}
	p, err := balancer.NewSmoothWRR(peers)
	if err != nil {
		panic(err)
	}
	return pickerRunner(p, false)
}

func pickerRunner(p balancer.Picker, feedback bool) runner {
	o := balancer.Outcome{Latency: time.Millisecond}
	return func(b *testing.B, parallel bool) {
		switch {
		case !parallel && feedback:
			for b.Loop() {
				peer, _ := p.Pick(nil)
				_ = p.Done(peer, o)
			}
		case !parallel:
			for b.Loop() {
				_, _ = p.Pick(nil)
			}
		default:
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					peer, _ := p.Pick(nil)
					if feedback {
						_ = p.Done(peer, o)
					}
				}
			})
		}
	}
}

// kitex builds a picker of one of kitex's weighted balancers, with the
// workload's weights or, if weighted is false, all weights equal.
func kitex(newLB func() loadbalance.Loadbalancer, weighted bool) func(int) runner {
	return func(n int) runner {
		ins := make([]discovery.Instance, n)
		for i := range ins {
			w := 1
			if weighted {
				w = weight(i)
			}
			ins[i] = discovery.NewInstance("tcp", addr(i), w, nil)
		}
		p := newLB().GetPicker(discovery.Result{Cacheable: true, CacheKey: "bench", Instances: ins})
		ctx := context.Background()
		// Fill the lazily built tables before timing.
		for range 2 * 10 * n {
			p.Next(ctx, nil)
		}
		return func(b *testing.B, parallel bool) {
			if !parallel {
				for b.Loop() {
					p.Next(ctx, nil)
				}
				return
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					p.Next(ctx, nil)
				}
			})
		}
	}
}

// smallnest builds one of smallnest/weighted's balancers, which are not safe
// for concurrent use: the parallel runs hold a mutex around Next.
func smallnest(newW func() weighted.W) func(int) runner {
	return func(n int) runner {
		w := newW()
		for i := range n {
			w.Add(addr(i), weight(i))
		}
		return func(b *testing.B, parallel bool) {
			if !parallel {
				for b.Loop() {
					w.Next()
				}
				return
			}
			var mu sync.Mutex
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					mu.Lock()
					w.Next()
					mu.Unlock()
				}
			})
		}
	}
}

// mroth builds a weightedrand chooser: immutable, safe for concurrent use.
func mroth(n int) runner {
	choices := make([]weightedrand.Choice[string, int], n)
	for i := range choices {
		choices[i] = weightedrand.NewChoice(addr(i), weight(i))
	}
	c, err := weightedrand.NewChooser(choices...)
	if err != nil {
		panic(err)
	}
	return func(b *testing.B, parallel bool) {
		if !parallel {
			for b.Loop() {
				c.Pick()
			}
			return
		}
		b.ResetTimer()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				c.Pick()
			}
		})
	}
}

// kratos builds a kratos selector over nodes carrying the workload's weights
// in their metadata; each pick calls the done function Select returns.
func kratos(newSelector func() selector.Selector) func(int) runner {
	return func(n int) runner {
		nodes := make([]selector.Node, n)
		for i := range nodes {
			nodes[i] = selector.NewNode("http", addr(i), &registry.ServiceInstance{
				Metadata: map[string]string{"weight": strconv.Itoa(weight(i))},
			})
		}
		s := newSelector()
		s.Apply(nodes)
		ctx := context.Background()
		pick := func() {
			_, done, err := s.Select(ctx)
			if err == nil {
				done(ctx, selector.DoneInfo{})
			}
		}
		return func(b *testing.B, parallel bool) {
			if !parallel {
				for b.Loop() {
					pick()
				}
				return
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					pick()
				}
			})
		}
	}
}

// latencies are the latencies the feedback workloads report, in turn: a
// lognormal of median 1 ms and σ 1.2 (heavy-tailed, as real service times
// are), 4096 values drawn once from a seeded generator, and a bimodal
// alternation of 100 µs and 20 ms (a cache hit and a miss).
var latencies = map[string][]time.Duration{
	"lognormal": lognormal(4096, 1),
	"bimodal":   {100 * time.Microsecond, 20 * time.Millisecond},
}

// lognormal returns n latencies drawn from the lognormal of median 1 ms and
// σ 1.2 by a generator seeded with seed.
func lognormal(n int, seed uint64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(time.Millisecond) * math.Exp(1.2*r.NormFloat64()))
	}
	return out
}

// oursLat builds one of the library's feedback pickers whose runner reports
// the latencies of latencies[dist], in turn (each parallel goroutine from
// its own offset).
func oursLat[P balancer.Picker](newPicker func([]*balancer.Peer, ...balancer.Option) (P, error), dist string) func(int) runner {
	lat := latencies[dist]
	return func(n int) runner {
		peers := make([]*balancer.Peer, n)
		for i := range peers {
			peers[i] = balancer.NewPeer(addr(i), balancer.Weight(weight(i)))
		}
		p, err := newPicker(peers)
		if err != nil {
			panic(err)
		}
		return func(b *testing.B, parallel bool) {
			if !parallel {
				i := 0
				for b.Loop() {
					peer, _ := p.Pick(nil)
					_ = p.Done(peer, balancer.Outcome{Latency: lat[i%len(lat)]})
					i++
				}
				return
			}
			var seq atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 977
				for pb.Next() {
					peer, _ := p.Pick(nil)
					_ = p.Done(peer, balancer.Outcome{Latency: lat[i%len(lat)]})
					i++
				}
			})
		}
	}
}

// warmupPicks is how many picks of a fresh picker the warm-up workload
// times before it builds the next one.
const warmupPicks = 20000

// BenchmarkWarmup times the first 20,000 Pick+Done of fresh pickers, serially,
// lognormal latencies: Warmup/<impl>/peers=<n>, ns/op per pick. Every
// 20,000 picks a new picker is built, untimed; a latency-aware picker meets
// every peer's first report here, which its steady state does not.
func BenchmarkWarmup(b *testing.B) {
	lat := latencies["lognormal"]
	type fresh func() (pick func(i int))
	ourFresh := func(newPicker func([]*balancer.Peer, ...balancer.Option) (balancer.Picker, error), n int) fresh {
		return func() func(int) {
			peers := make([]*balancer.Peer, n)
			for i := range peers {
				peers[i] = balancer.NewPeer(addr(i), balancer.Weight(weight(i)))
			}
			p, err := newPicker(peers)
			if err != nil {
				panic(err)
			}
			return func(i int) {
				peer, _ := p.Pick(nil)
				_ = p.Done(peer, balancer.Outcome{Latency: lat[i%len(lat)]})
			}
		}
	}
	kratosFresh := func(n int) fresh {
		return func() func(int) {
			nodes := make([]selector.Node, n)
			for i := range nodes {
				nodes[i] = selector.NewNode("http", addr(i), &registry.ServiceInstance{
					Metadata: map[string]string{"weight": strconv.Itoa(weight(i))},
				})
			}
			s := p2c.New()
			s.Apply(nodes)
			ctx := context.Background()
			return func(int) {
				_, done, err := s.Select(ctx)
				if err == nil {
					done(ctx, selector.DoneInfo{})
				}
			}
		}
	}
	for _, n := range sizes {
		impls := []struct {
			name string
			f    fresh
		}{
			{"lbgo.FastestFirst", ourFresh(func(p []*balancer.Peer, o ...balancer.Option) (balancer.Picker, error) {
				return balancer.NewFastestFirst(p, o...)
			}, n)},
			{"lbgo.P2CPeakEWMA", ourFresh(func(p []*balancer.Peer, o ...balancer.Option) (balancer.Picker, error) {
				return balancer.NewP2CPeakEWMA(p, o...)
			}, n)},
			{"kratos.p2c", kratosFresh(n)},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("%s/peers=%d", im.name, n), func(b *testing.B) {
				b.ReportAllocs()
				var pick func(int)
				for i := range b.N {
					if i%warmupPicks == 0 {
						b.StopTimer()
						pick = im.f()
						b.StartTimer()
					}
					pick(i)
				}
			})
		}
	}
}
