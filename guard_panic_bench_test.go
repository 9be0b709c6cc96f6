package balancer

import (
	"fmt"
	"testing"
	"time"
)

// guardBenchModes are BenchmarkGuardPanic's modes, in order: plain, no
// guard and every peer healthy, is the baseline the report divides by.
var guardBenchModes = []struct {
	name    string
	guarded bool
	out     bool // three peers in five (index mod 5 < 3) failed out
}{
	{"plain", false, false},
	{"guarded", true, false},
	{"out60", false, true},
	{"panic60", true, true},
}

// guardBenchPickers caches BenchmarkGuardPanic's pickers by sub-benchmark,
// so that the benchmark's repeated calls with growing b.N (and -count's
// rounds) time one picker in one state rather than rebuild it.
var guardBenchPickers = map[string]Balancer{}

// BenchmarkGuardPanic times Pick+Done of every picker of the registry,
// BenchmarkGuardPanic/<picker>/peers=<n>/<mode>, on the benchmark peers
// (weights i%10+1) and a frozen clock, each request keyed (a fresh Request
// with one of 4096 keys and client addresses, so that the hash pickers
// hash) and each report carrying the next of 4096 lognormal latencies
// (median 1 ms, σ 1.2). Modes:
//
//   - plain: no guard, every peer healthy: the baseline;
//   - guarded: WithPanicThreshold(50) and WithMaxEjectionPercent(70), every
//     peer healthy: the cost contract says the same as plain;
//   - out60: no guard, three peers in five (index mod 5 < 3) out for their
//     failures: nginx's degraded pick, which skips them;
//   - panic60: the guards and the same peers out, 60% ≥ 50%: in panic,
//     the picks reach every peer; an attempt on a peer out is reported
//     failed (its window restarts, nothing else changes), any other
//     succeeds, so the state stays put.
func BenchmarkGuardPanic(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := WithClock(func() time.Time { return t0 })
	lat := benchLognormal(4096, 1)
	for _, a := range Algorithms() {
		b.Run(a.Name, func(b *testing.B) {
			for _, n := range []int{10, 100, 1000, 10000} {
				b.Run(fmt.Sprint("peers=", n), func(b *testing.B) {
					for _, m := range guardBenchModes {
						b.Run(m.name, func(b *testing.B) {
							key := b.Name()
							p, ok := guardBenchPickers[key]
							if !ok {
								opts := []Option{clock}
								if m.guarded {
									opts = append(opts, WithPanicThreshold(50), WithMaxEjectionPercent(70))
								}
								var err error
								if p, err = a.New(benchPeers(n), opts...); err != nil {
									b.Fatal(err)
								}
								if m.out {
									for i, q := range p.Peers() {
										if i%5 < 3 {
											q.pick() // an attempt in flight, reported failed
											if err := p.Done(q, Outcome{Failed: true}); err != nil {
												b.Fatal(err)
											}
										}
									}
								}
								guardBenchPickers[key] = p
							}
							out := map[*Peer]bool{}
							for i, q := range p.Peers() {
								out[q] = m.out && i%5 < 3
							}
							var r Request
							b.ReportAllocs()
							b.ResetTimer()
							for i := range b.N {
								q, err := p.Pick(guardRequest(&r, i))
								if err != nil {
									b.Fatal(err)
								}
								if err := p.Done(q, Outcome{Failed: out[q], Latency: lat[i%len(lat)]}); err != nil {
									b.Fatal(err)
								}
							}
						})
					}
				})
			}
		})
	}
}
