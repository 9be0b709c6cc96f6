package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/lbgo/balancer/internal/defaults"
)

// benchProber is the probers of BenchmarkPrequal: answers drawn from
// fixed tables (lognormal latencies of median 1 ms, σ 1.2, and in-flight
// counts of median 4, heavy-tailed), given inside Probe (inline) or queued
// in a fixed ring until drain (queued). Not safe for concurrent use but
// under its own lock.
type benchProber struct {
	mu     sync.Mutex
	inline bool
	lat    []time.Duration
	rif    []float64
	i      int
	ring   [64]*Peer
	n      int
	to     ProbeReceiver
	silent map[*Peer]bool // peers whose probes fail (PickDoneSilent)
}

func newBenchProber(inline bool) *benchProber {
	r := rand.New(rand.NewPCG(5, 0))
	rif := make([]float64, 4096)
	for i := range rif {
		rif[i] = math.Round(4 * math.Exp(r.NormFloat64()))
	}
	return &benchProber{inline: inline, lat: benchLognormal(4096, 2), rif: rif}
}

func (q *benchProber) next() ProbeAnswer {
	q.i++
	return ProbeAnswer{InFlight: q.rif[q.i%len(q.rif)], Latency: q.lat[q.i%len(q.lat)], RoundTrip: q.lat[(q.i+7)%len(q.lat)] / 10}
}

func (q *benchProber) Probe(p *Peer, to ProbeReceiver) {
	q.mu.Lock()
	if q.silent[p] {
		q.mu.Unlock()
		_ = to.Answer(p, ProbeAnswer{Failed: true})
		return
	}
	if q.inline {
		a := q.next()
		q.mu.Unlock()
		_ = to.Answer(p, a)
		return
	}
	if q.n < len(q.ring) {
		q.ring[q.n], q.to = p, to
		q.n++
	}
	q.mu.Unlock()
}

// drain answers the queued probes.
func (q *benchProber) drain() {
	for {
		q.mu.Lock()
		if q.n == 0 {
			q.mu.Unlock()
			return
		}
		q.n--
		p, to, a := q.ring[q.n], q.to, q.next()
		q.mu.Unlock()
		_ = to.Answer(p, a)
	}
}

// prequalWarmupPicks is how many picks a fresh picker makes in the fresh
// variants (timed) and before the steady ones (not timed).
const prequalWarmupPicks = 1000

// BenchmarkPrequal times Prequal's Pick+Done with its probes answered
// inside Probe (PickDone: each op is a pick, its 3 probes and answers and
// the attempt's report) and with the answers queued and given after the
// report (PickAnswer), beside P2CPeakEWMA's Pick+Done in the same run, at
// 10 to 10,000 peers (benchPeers), with lognormal latencies (median 1 ms, σ
// 1.2) as the attempts' and the probes' latencies: steady (after 1000
// picks) and fresh (the first 1000 picks of a new picker, whose pool
// starts empty; ns/pick). The per-second cap is lifted (10^9), so that
// every pick sends its 3 probes at the loop's millions of picks a second
// (at the default 10,000 a second nearly every pick would be the
// rate-limited fallback). PickDoneSilent is PickDone with one peer in ten
// a server whose probes fail (one without the probe handler), so that the
// picks also draw among the unprobed peers and give them their share.
// PickDoneReport is PickDone with a load report counting the server's
// requests in flight on every reply, which enters the pool as an answer.
// BenchmarkPrequal/PickDone/peers=100/steady and so on;
// .../P2CPeakEWMA/peers=100/steady is the baseline.
func BenchmarkPrequal(b *testing.B) {
	lat := benchLognormal(4096, 1)
	load := &ServerLoad{HasInFlight: true}
	for _, mode := range []string{"PickDone", "PickDoneReport", "PickDoneSilent", "PickAnswer", "P2CPeakEWMA"} {
		for _, n := range benchLatencySizes {
			build := func(b *testing.B) (Picker, *benchProber) {
				if mode == "P2CPeakEWMA" {
					p, err := NewP2CPeakEWMA(benchPeers(n))
					if err != nil {
						b.Fatal(err)
					}
					return p, nil
				}
				pr := newBenchProber(mode != "PickAnswer")
				peers := benchPeers(n)
				if mode == "PickDoneSilent" {
					pr.silent = map[*Peer]bool{}
					for i := 0; i < n; i += 10 {
						pr.silent[peers[i]] = true
					}
				}
				p, err := NewPrequal(peers, WithProber(pr), WithProbeRate(defaults.ProbesPerPick, 1e9))
				if err != nil {
					b.Fatal(err)
				}
				return p, pr
			}
			step := func(p Picker, pr *benchProber, i int) {
				peer, err := p.Pick(nil)
				if err == nil {
					o := Outcome{Latency: lat[i%len(lat)]}
					if mode == "PickDoneReport" {
						load.InFlight = float64(peer.InFlight())
						o.Load = load
					}
					_ = p.Done(peer, o)
				}
				if pr != nil && !pr.inline {
					pr.drain()
				}
			}
			b.Run(fmt.Sprintf("%s/peers=%d/steady", mode, n), func(b *testing.B) {
				p, pr := build(b)
				for i := range prequalWarmupPicks {
					step(p, pr, i)
				}
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					step(p, pr, i)
					i++
				}
			})
			b.Run(fmt.Sprintf("%s/peers=%d/fresh", mode, n), func(b *testing.B) {
				b.ReportAllocs()
				picks := 0
				for b.Loop() {
					b.StopTimer()
					p, pr := build(b)
					b.StartTimer()
					for i := range prequalWarmupPicks {
						step(p, pr, i)
					}
					picks += prequalWarmupPicks
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(picks), "ns/pick")
			})
		}
	}
}

// BenchmarkPrequalParallel times the steady PickDone of BenchmarkPrequal
// from b.RunParallel's goroutines, where the pool's lock is shared, beside
// P2CPeakEWMA's lock-free Pick+Done.
func BenchmarkPrequalParallel(b *testing.B) {
	lat := benchLognormal(4096, 1)
	for _, name := range []string{"Prequal", "P2CPeakEWMA"} {
		for _, n := range []int{10, 1000} {
			b.Run(fmt.Sprintf("%s/peers=%d", name, n), func(b *testing.B) {
				var p Picker
				var err error
				if name == "Prequal" {
					p, err = NewPrequal(benchPeers(n), WithProber(newBenchProber(true)), WithProbeRate(defaults.ProbesPerPick, 1e9))
				} else {
					p, err = NewP2CPeakEWMA(benchPeers(n))
				}
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := 0
					for pb.Next() {
						peer, err := p.Pick(nil)
						if err == nil {
							_ = p.Done(peer, Outcome{Latency: lat[i%len(lat)]})
						}
						i++
					}
				})
			})
		}
	}
}
