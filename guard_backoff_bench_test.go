package balancer

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// backoffBenchPickers are the pickers the backoff and success-rate
// benchmarks time: nginx's default (SmoothWRR, its lock-free cycle on
// healthy peers), the lock-free rotation and a lock-free latency-aware
// one. The options' cost is in the peer set's report path (finish), the
// same for every picker; a locked pick (LeastConn's) would only hide it.
var backoffBenchPickers = []string{"RoundRobin", "SmoothWRR", "P2CPeakEWMA"}

// backoffBenchSizes are the peer counts of the guards' benchmarks.
var backoffBenchSizes = []int{10, 100, 1000, 10000}

// benchBackoffVariants times Pick+Done of every picker of
// backoffBenchPickers at every size, with lognormal latencies (median
// 1 ms, σ 1.2) reported, healthy peers (the steady state), serially or
// from b.RunParallel's goroutines, once per variant: "plain" (no option,
// the baseline, in the same run) and each of variants. The names are
// Guard<Name>/<picker>/peers=<n>/<variant>, as the benchmarks report's
// section on the guards reads them.
func benchBackoffVariants(b *testing.B, variants []backoffVariant, parallel bool) {
	lat := benchLognormal(4096, 1)
	variants = append([]backoffVariant{{"plain", nil}}, variants...)
	for _, name := range backoffBenchPickers {
		a, err := AlgorithmNamed(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range backoffBenchSizes {
			for _, v := range variants {
				b.Run(fmt.Sprintf("%s/peers=%d/%s", name, n, v.name), func(b *testing.B) {
					p, err := a.New(benchPeers(n), v.opts...)
					if err != nil {
						b.Fatal(err)
					}
					b.ReportAllocs()
					if !parallel {
						i := 0
						for b.Loop() {
							peer, err := p.Pick(nil)
							if err != nil {
								b.Fatal(err)
							}
							_ = p.Done(peer, Outcome{Latency: lat[i%len(lat)]})
							i++
						}
						return
					}
					var seq atomic.Int64
					b.ResetTimer()
					b.RunParallel(func(pb *testing.PB) {
						i := int(seq.Add(1)) * 977
						for pb.Next() {
							peer, err := p.Pick(nil)
							if err != nil {
								panic(err)
							}
							_ = p.Done(peer, Outcome{Latency: lat[i%len(lat)]})
							i++
						}
					})
				})
			}
		}
	}
}

// backoffVariant is one configuration a guard benchmark times.
type backoffVariant struct {
	name string
	opts []Option
}

// backoffVariants are BenchmarkGuardBackoff's.
var backoffVariants = []backoffVariant{
	{"backoff", []Option{WithEjectionBackoff(5 * time.Minute)}},
}

// BenchmarkGuardBackoff: WithEjectionBackoff against the plain picker,
// serially. On healthy peers the option reads nothing (the window is read
// only for a peer with failures on record): the two should match.
func BenchmarkGuardBackoff(b *testing.B) { benchBackoffVariants(b, backoffVariants, false) }

// BenchmarkGuardBackoffParallel is BenchmarkGuardBackoff from
// b.RunParallel's goroutines.
func BenchmarkGuardBackoffParallel(b *testing.B) { benchBackoffVariants(b, backoffVariants, true) }

// successRateVariants are BenchmarkGuardSuccessRate's.
var successRateVariants = []backoffVariant{
	{"successrate", []Option{WithSuccessRateEjection(SuccessRateEjection{})}},
	{"successrate+backoff", []Option{WithSuccessRateEjection(SuccessRateEjection{}), WithEjectionBackoff(5 * time.Minute)}},
}

// BenchmarkGuardSuccessRate: WithSuccessRateEjection (A50's defaults)
// against the plain picker, and with WithEjectionBackoff too, serially.
// Each Done adds one atomic add, and one success in 16 a clock read; an
// evaluation, O(n) under the lock, runs once per 10 s of the real clock.
func BenchmarkGuardSuccessRate(b *testing.B) {
	benchBackoffVariants(b, successRateVariants, false)
}

// BenchmarkGuardSuccessRateParallel is BenchmarkGuardSuccessRate from
// b.RunParallel's goroutines.
func BenchmarkGuardSuccessRateParallel(b *testing.B) {
	benchBackoffVariants(b, successRateVariants, true)
}
