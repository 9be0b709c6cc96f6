// Package benchmarks times the balancer's pickers side by side with the
// fastest Go load balancers on the same workloads, and next to the physical
// floor of a pick: one atomic add on a shared counter and one draw from the
// runtime's random generator. run.sh runs it and writes BENCHMARKS.md.
package benchmarks

import (
	"context"
	"fmt"
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
