package balancer

import (
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchSizes are the peer counts every pick benchmark runs at.
var benchSizes = []int{2, 10, 100, 1000, 10000}

// benchPicker is one picker type in the pick benchmarks. A feedback picker
// learns from Done (latency, in-flight counts), so its benchmark times Pick
// and Done together, the unit of work a caller pays for.
type benchPicker struct {
	name     string
	new      func(peers []*Peer, opts ...Option) (Picker, error)
	feedback bool
}

// benchPickers lists every picker in the package. Each has a
// Benchmark<name>Pick below; TestBench_coversEveryPicker keeps this table in
// step with the contract suite's.
var benchPickers = []benchPicker{
	{"SmoothWRR", as(NewSmoothWRR), false},
	{"ClassicWRR", as(NewClassicWRR), false},
	{"RoundRobin", as(NewRoundRobin), false},
	{"RandomWeighted", as(NewRandomWeighted), false},
	{"LeastConn", as(NewLeastConn), true},
	{"P2CPeakEWMA", as(NewP2CPeakEWMA), true},
	{"FastestFirst", as(NewFastestFirst), true},
}

// benchPeers returns n healthy peers weighted i%10+1, the workload every
// benchmark here and in the comparison module uses.
func benchPeers(n int) []*Peer {
	peers := make([]*Peer, n)
	for i := range peers {
		peers[i] = NewPeer(fmt.Sprintf("10.0.%d.%d:80", i/256, i%256), Weight(i%10+1))
	}
	return peers
}

// benchOutcome is the report a feedback benchmark gives: a success, with a
// latency so the latency-aware pickers do their full update.
var benchOutcome = Outcome{Latency: time.Millisecond}

func findBenchPicker(name string) (benchPicker, bool) {
	for _, bp := range benchPickers {
		if bp.name == name {
			return bp, true
		}
	}
	return benchPicker{}, false
}

// benchPick runs the named picker's pick benchmark at every size, serially
// and from b.RunParallel's goroutines (GOMAXPROCS of them).
func benchPick(b *testing.B, name string) {
	bp, ok := findBenchPicker(name)
	if !ok {
		b.Fatalf("no picker %q in benchPickers", name)
	}
	for _, n := range benchSizes {
		b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
			p, err := bp.new(benchPeers(n))
			if err != nil {
				b.Fatal(err)
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				if bp.feedback {
					for b.Loop() {
						peer, _ := p.Pick(nil)
						_ = p.Done(peer, benchOutcome)
					}
					return
				}
				for b.Loop() {
					_, _ = p.Pick(nil)
				}
			})
			b.Run("parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					if bp.feedback {
						for pb.Next() {
							peer, _ := p.Pick(nil)
							_ = p.Done(peer, benchOutcome)
						}
						return
					}
					for pb.Next() {
						_, _ = p.Pick(nil)
					}
				})
			})
		})
	}
}

func BenchmarkSmoothWRRPick(b *testing.B)      { benchPick(b, "SmoothWRR") }
func BenchmarkClassicWRRPick(b *testing.B)     { benchPick(b, "ClassicWRR") }
func BenchmarkRoundRobinPick(b *testing.B)     { benchPick(b, "RoundRobin") }
func BenchmarkRandomWeightedPick(b *testing.B) { benchPick(b, "RandomWeighted") }
func BenchmarkLeastConnPick(b *testing.B)      { benchPick(b, "LeastConn") }
func BenchmarkP2CPeakEWMAPick(b *testing.B)    { benchPick(b, "P2CPeakEWMA") }
func BenchmarkFastestFirstPick(b *testing.B)   { benchPick(b, "FastestFirst") }

// floorCounter is the shared counter of the atomic-add floor, alone on its
// cache line as the pickers' counters are.
var floorCounter struct {
	_ [64]byte
	v atomic.Uint64
	_ [56]byte
}

// floorSink keeps the floor benchmarks' results alive.
var floorSink atomic.Uint64

// BenchmarkFloorAtomicAdd is the physical floor of a lock-free pick that
// hands out a shared sequence: one atomic add on one shared counter, which
// the parallel variant's goroutines contend for.
func BenchmarkFloorAtomicAdd(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			floorCounter.v.Add(1)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				floorCounter.v.Add(1)
			}
		})
	})
}

// BenchmarkFloorRandUint64 is the floor of a randomized pick: one draw from
// the runtime's per-thread generator, which shares nothing.
func BenchmarkFloorRandUint64(b *testing.B) {
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		var x uint64
		for b.Loop() {
			x ^= rand.Uint64()
		}
		floorSink.Store(x)
	})
	b.Run("parallel", func(b *testing.B) {
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

// TestBench_coversEveryPicker checks that every picker of the contract suite
// is benchmarked.
func TestBench_coversEveryPicker(t *testing.T) {
	for _, pc := range pickerCases {
		_, ok := findBenchPicker(pc.name)
		assert.True(t, ok, "%s has no pick benchmark", pc.name)
	}
}

// TestBench_pickAllocs extends TestContract_pickAllocs to the benchmark
// sizes: with the benchmark's workload, a pick (and, for a feedback picker,
// its report) allocates nothing, whether it is served from a precomputed
// cycle or a scan.
func TestBench_pickAllocs(t *testing.T) {
	for _, bp := range benchPickers {
		t.Run(bp.name, func(t *testing.T) {
			for _, n := range benchSizes {
				p, err := bp.new(benchPeers(n))
				require.NoError(t, err)
				var failed error
				allocs := testing.AllocsPerRun(100, func() {
					peer, err := p.Pick(nil)
					if err == nil {
						err = p.Done(peer, benchOutcome)
					}
					if err != nil {
						failed = err
					}
				})
				require.NoError(t, failed, "%d peers", n)
				assert.Zero(t, allocs, "Pick+Done with %d peers", n)
			}
		})
	}
}
