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
							var r Request
							b.ReportAllocs()
							b.ResetTimer()
							for i := range b.N {
								q, err := p.Pick(guardRequest(&r, i))
								if err != nil {
									b.Fatal(err)
								}
								// A peer out has failures on record, the others none.
								if err := p.Done(q, Outcome{Failed: q.fails.Load() != 0, Latency: lat[i%len(lat)]}); err != nil {
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

// BenchmarkGuardEligible times the eligibility test on one peer out for
// its failures, the one place a pick meets the guards, in a RoundRobin of
// 10 peers on a frozen clock: BenchmarkGuardEligible/RoundRobin/peers=10/
// <mode>. plain is nginx's test as it stood before the guards, written
// out here; eligible the test now, without the guards (a load of the
// peer's picker and a nil check more); guarded30 with both guards and 3
// peers out (the count made, not in panic: ineligible); panic60 with 6 out
// (in panic: eligible). Each op builds the pick's lazy clock afresh, as a
// pick does.
//
// Before the guards, Peer.eligible was nginxEligible's body, and the
// compiler did not inline it either.
func BenchmarkGuardEligible(b *testing.B) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := WithClock(func() time.Time { return t0 })
	for _, m := range []struct {
		name    string
		guarded bool
		out     int
		plain   bool
	}{
		{"plain", false, 3, true},
		{"eligible", false, 3, false},
		{"guarded30", true, 3, false},
		{"panic60", true, 6, false},
	} {
		b.Run("RoundRobin/peers=10/"+m.name, func(b *testing.B) {
			opts := []Option{clock}
			if m.guarded {
				opts = append(opts, WithPanicThreshold(50), WithMaxEjectionPercent(100))
			}
			rr, err := NewRoundRobin(benchPeers(10), opts...)
			if err != nil {
				b.Fatal(err)
			}
			peers := rr.Peers()
			for _, q := range peers[:m.out] {
				q.pick()
				if err := rr.Done(q, Outcome{Failed: true}); err != nil {
					b.Fatal(err)
				}
			}
			p := peers[0]
			want := m.guarded && m.out == 6
			test := func() bool {
				clk := lazyClock{now: rr.now}
				if m.plain {
					return nginxEligible(p, &clk)
				}
				return p.eligible(&clk)
			}
			if test() != want {
				b.Fatalf("eligible = %v, want %v", !want, want)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if test() != want {
					b.Fatal("eligibility changed")
				}
			}
		})
	}
}

// nginxEligible is Peer.eligible as it stood before the guards, a call as
// it was, for BenchmarkGuardEligible's baseline.
//
//go:noinline
func nginxEligible(p *Peer, clk *lazyClock) bool {
	return !p.down.Load() && !p.full() && (p.fails.Load() == 0 || !p.inFailWindow(clk.get()))
}
