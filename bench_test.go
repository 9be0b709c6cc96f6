package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// benchSizes are the peer counts every pick benchmark runs at.
var benchSizes = []int{2, 10, 100, 1000, 10000}

// pickOnly names the pickers whose benchmark times Pick alone: their choice
// does not depend on reports, so a benchmark of Pick alone measures the
// pick. Every other picker learns from Done (latency, in-flight counts), so
// its benchmark times Pick and Done together, the unit of work a caller
// pays for; a new picker is benchmarked that way unless listed here.
var pickOnly = map[string]bool{"SmoothWRR": true, "ClassicWRR": true, "RoundRobin": true, "RandomWeighted": true}

// benchOutcome is the report a feedback benchmark gives: a success, with a
// latency so the latency-aware pickers do their full update.
var benchOutcome = Outcome{Latency: time.Millisecond}

// BenchmarkPick times every picker of the registry at every size, serially
// and from b.RunParallel's goroutines (GOMAXPROCS of them):
// BenchmarkPick/SmoothWRR/peers=10/serial and so on.
func BenchmarkPick(b *testing.B) {
	for _, a := range Algorithms() {
		b.Run(a.Name, func(b *testing.B) { benchPick(b, a) })
	}
}

func benchPick(b *testing.B, a Algorithm) {
	feedback := !pickOnly[a.Name]
	for _, n := range benchSizes {
		b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
			p, err := a.New(benchPeers(n))
			if err != nil {
				b.Fatal(err)
			}
			b.Run("serial", func(b *testing.B) {
				b.ReportAllocs()
				if feedback {
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
					if feedback {
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

// TestBench_pickAllocs extends TestContract_pickAllocs to the benchmark
// sizes: with the benchmark's workload, a pick (and, for a feedback picker,
// its report) allocates nothing, whether it is served from a precomputed
// cycle or a scan.
func TestBench_pickAllocs(t *testing.T) {
	sizes := benchSizes
	if underRace {
		// One goroutine: the race detector has nothing to watch, and
		// building the 10,000-peer pickers (ConsistentHash's ring above
		// all) took most of this test's 20 s under it (1.8 s plain).
		// TestContract_pickAllocs covers up to 1,000 peers under -race
		// too; the plain run keeps every size.
		sizes = slices.DeleteFunc(slices.Clone(sizes), func(n int) bool { return n > 1000 })
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, n := range sizes {
			p, err := pc.new(benchPeers(n))
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

// benchLatencies are the latency distributions FastestFirst's benchmarks
// feed back: the constant of BenchmarkPick; a lognormal of median 1 ms and
// σ 1.2, heavy-tailed as real service times are, drawn once from a seeded
// generator into a fixed array of 4096 values; a bimodal alternation of
// 100 µs and 20 ms (a cache hit and a miss); and 0, the latency a trace or
// a fake clock reports.
var benchLatencies = []struct {
	name string
	lat  []time.Duration
}{
	{"constant", []time.Duration{time.Millisecond}},
	{"lognormal", benchLognormal(4096, 1)},
	{"bimodal", []time.Duration{100 * time.Microsecond, 20 * time.Millisecond}},
	{"zero", []time.Duration{0}},
}

// benchLognormal returns n latencies drawn from the lognormal of median
// 1 ms and σ 1.2 by a generator seeded with seed.
func benchLognormal(n int, seed uint64) []time.Duration {
	r := rand.New(rand.NewPCG(seed, 0))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(float64(time.Millisecond) * math.Exp(1.2*r.NormFloat64()))
	}
	return out
}

// benchLatencySizes are the peer counts of FastestFirst's latency
// benchmarks: the exact mode at 10, the sampled one above.
var benchLatencySizes = []int{10, 100, 1000, 10000}

// BenchmarkFastestFirstLatency times FastestFirst's Pick+Done with the
// latencies of benchLatencies, in turn, as the reported latency, serially
// and in parallel: BenchmarkFastestFirstLatency/lognormal/peers=1000/serial.
// P2CPeakEWMA, which keeps the same peak EWMA, runs beside it as a
// reference.
func BenchmarkFastestFirstLatency(b *testing.B) {
	for _, d := range benchLatencies {
		b.Run(d.name, func(b *testing.B) {
			for _, n := range benchLatencySizes {
				b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
					for _, name := range []string{"FastestFirst", "P2CPeakEWMA"} {
						a, err := AlgorithmNamed(name)
						if err != nil {
							b.Fatal(err)
						}
						p, err := a.New(benchPeers(n))
						if err != nil {
							b.Fatal(err)
						}
						b.Run(name+"/serial", func(b *testing.B) {
							b.ReportAllocs()
							i := 0
							for b.Loop() {
								peer, _ := p.Pick(nil)
								_ = p.Done(peer, Outcome{Latency: d.lat[i%len(d.lat)]})
								i++
							}
						})
						b.Run(name+"/parallel", func(b *testing.B) {
							b.ReportAllocs()
							var seq atomic.Int64
							b.ResetTimer()
							b.RunParallel(func(pb *testing.PB) {
								i := int(seq.Add(1)) * 977
								for pb.Next() {
									peer, _ := p.Pick(nil)
									_ = p.Done(peer, Outcome{Latency: d.lat[i%len(d.lat)]})
									i++
								}
							})
						})
					}
				})
			}
		})
	}
}

// ffWarmupPicks is how many picks of a fresh FastestFirst
// BenchmarkFastestFirstWarmup times.
const ffWarmupPicks = 20000

// BenchmarkFastestFirstWarmup times the first 20,000 Pick+Done of a fresh
// FastestFirst, lognormal latencies, where each peer's first report is
// news: ns/op is per pick (the picker's construction is not timed).
func BenchmarkFastestFirstWarmup(b *testing.B) {
	lat := benchLognormal(4096, 1)
	for _, n := range []int{10, 100, 1000, 8000, 10000} {
		b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
			b.ReportAllocs()
			var picks int
			for b.Loop() {
				b.StopTimer()
				f, err := NewFastestFirst(benchPeers(n))
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				for i := range ffWarmupPicks {
					peer, _ := f.Pick(nil)
					_ = f.Done(peer, Outcome{Latency: lat[i%len(lat)]})
				}
				picks += ffWarmupPicks
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(picks), "ns/pick")
		})
	}
}

// BenchmarkTrace100k times what `balance trace -n 2000` does over 100,000
// servers: build the picker on a fixed clock and a seeded source, then 2000
// Pick+Done reporting latency 0, one at a time. ns/op is one whole trace,
// peers built beforehand; FastestFirst's should stay within a small factor
// of RoundRobin's, which does no per-report work.
func BenchmarkTrace100k(b *testing.B) {
	const n, picks = 100000, 2000
	epoch := time.Unix(1, 0)
	for _, name := range []string{"RoundRobin", "FastestFirst"} {
		a, err := AlgorithmNamed(name)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				peers := benchPeers(n)
				b.StartTimer()
				p, err := a.New(peers, WithClock(func() time.Time { return epoch }), WithRand(rand.NewPCG(1, 0)))
				if err != nil {
					b.Fatal(err)
				}
				for range picks {
					peer, err := p.Pick(nil)
					if err != nil {
						b.Fatal(err)
					}
					_ = p.Done(peer, Outcome{})
				}
			}
		})
	}
}
