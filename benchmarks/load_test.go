package benchmarks

import (
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
)

// BenchmarkServerLoad is what reporting its load costs a server per
// request: Server/http/<variant>/<mode>. bare is a trivial handler
// (it writes status 200 and nothing else); TEXT, JSON and BIN are the
// same handler inside loadreport's Middleware, which counts the request
// in flight, in the rate window and in the latency estimate, and writes
// the endpoint-load-metrics header in that format. The ResponseWriter is
// reused, as a server's connection reuses its buffers, so what is timed
// is the middleware and not net/http.
func BenchmarkServerLoad(b *testing.B) {
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	variants := []struct {
		name string
		h    func() http.Handler
	}{
		{"bare", func() http.Handler { return trivial }},
	}
	for _, f := range []loadreport.Format{loadreport.Text, loadreport.JSON, loadreport.Binary} {
		variants = append(variants, struct {
			name string
			h    func() http.Handler
		}{f.String(), func() http.Handler {
			m, err := loadreport.New(loadreport.WithFormat(f))
			if err != nil {
				panic(err)
			}
			if err := m.SetCPUUtilization(0.42); err != nil {
				panic(err)
			}
			return m.Handler(trivial)
		}})
	}
	// What a whole request costs over loopback, for scale: a net/http
	// client and server on 127.0.0.1, the bare handler.
	b.Run("http/loopback/serial", func(b *testing.B) {
		srv := httptest.NewServer(trivial)
		defer srv.Close()
		c := srv.Client()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get(srv.URL)
			if err != nil {
				b.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	})
	for _, v := range variants {
		b.Run("http/"+v.name+"/serial", func(b *testing.B) {
			h := v.h()
			w := &reusedWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				h.ServeHTTP(w, req)
			}
		})
		b.Run("http/"+v.name+"/parallel", func(b *testing.B) {
			h := v.h()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &reusedWriter{h: make(http.Header)}
				for pb.Next() {
					h.ServeHTTP(w, req)
				}
			})
		})
	}
}

// reusedWriter is a ResponseWriter a benchmark reuses across requests: its
// header map keeps its entry, as a server's per-connection state does.
type reusedWriter struct{ h http.Header }

func (w *reusedWriter) Header() http.Header         { return w.h }
func (w *reusedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *reusedWriter) WriteHeader(int)             {}

// reportedLoad is the reports the ReportedWRR workloads' servers send:
// peer i at utilization (i%10+1)/10 and 100 requests a second, so the
// weights A58 derives span 100 to 1000.
func reportedLoad(i int) balancer.ServerLoad {
	return balancer.ServerLoad{Utilization: float64(i%10+1) / 10, RPS: 100}
}

// movingLoads are the reports of the moving workload, in turn: 100
// requests a second at a utilization drawn from a lognormal of median 0.5
// and σ 0.5 (4096 values from a seeded generator), so that every peer's
// weight moves between any two recomputes, as a fleet's loads do.
var movingLoads = func() []balancer.ServerLoad {
	r := rand.New(rand.NewPCG(2, 0))
	out := make([]balancer.ServerLoad, 4096)
	for i := range out {
		out[i] = balancer.ServerLoad{Utilization: 0.5 * math.Exp(0.5*r.NormFloat64()), RPS: 100}
	}
	return out
}()

// oursReported builds a ReportedWRR with the settings its doc gives for
// fleets whose capacity steps (no blackout, a 100 ms update period), on
// the real clock, and feeds every peer's report until the weights derived
// from them are in place. Its runner, by report: "" picks alone;
// "steady" reports each pick's server load, the same for a peer every
// time, with Done; "moving" reports the next of movingLoads (each parallel
// goroutine from its own offset), so every recompute, one per 100 ms,
// finds the weights moved and builds a new cycle.
func oursReported(report string) func(int) runner {
	return func(n int) runner {
		peers := make([]*balancer.Peer, n)
		for i := range peers {
			l := reportedLoad(i)
			peers[i] = balancer.NewPeer(addr(i), balancer.Weight(weight(i)), balancer.Value(&l))
		}
		p, err := balancer.ReportedWRRSettings{BlackoutPeriod: -1, WeightUpdatePeriod: 100 * time.Millisecond}.New(peers)
		if err != nil {
			panic(err)
		}
		derived := func() bool {
			for _, q := range peers {
				if q.State().DerivedWeight != q.Weight() {
					return true
				}
			}
			return false
		}
		for deadline := time.Now().Add(5 * time.Second); !derived(); {
			if time.Now().After(deadline) {
				panic("ReportedWRR derived no weight from the reports in 5 s")
			}
			for range n {
				q, _ := p.Pick(nil)
				_ = p.Done(q, balancer.Outcome{Load: q.Value().(*balancer.ServerLoad)})
			}
		}
		if report == "" {
			return pickerRunner(p, false)
		}
		// Each peer carries its steady report as its value, as an
		// integration holds the reply's report at hand.
		done := func(q *balancer.Peer, i int) {
			l := q.Value().(*balancer.ServerLoad)
			if report == "moving" {
				l = &movingLoads[i%len(movingLoads)]
			}
			_ = p.Done(q, balancer.Outcome{Load: l})
		}
		return func(b *testing.B, parallel bool) {
			if !parallel {
				i := 0
				for b.Loop() {
					q, _ := p.Pick(nil)
					done(q, i)
					i++
				}
				return
			}
			var seq atomic.Int64
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				i := int(seq.Add(1)) * 977
				for pb.Next() {
					q, _ := p.Pick(nil)
					done(q, i)
					i++
				}
			})
		}
	}
}
