package loadreport

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// BenchmarkMiddleware is the middleware's cost per request around a
// trivial handler on a reused ResponseWriter, against the bare handler.
func BenchmarkMiddleware(b *testing.B) {
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) })
	req := httptest.NewRequest("GET", "/", nil)
	run := func(b *testing.B, h http.Handler) {
		w := &nopWriter{h: make(http.Header)}
		b.ReportAllocs()
		for b.Loop() {
			h.ServeHTTP(w, req)
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, trivial) })
	for _, f := range []Format{Text, JSON, Binary} {
		b.Run(f.String(), func(b *testing.B) {
			m, _ := New(WithFormat(f))
			_ = m.SetCPUUtilization(0.42)
			run(b, m.Handler(trivial))
		})
	}
	b.Run("TEXT/parallel", func(b *testing.B) {
		m, _ := New()
		h := m.Handler(trivial)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			w := &nopWriter{h: make(http.Header)}
			for pb.Next() {
				h.ServeHTTP(w, req)
			}
		})
	})
}

// BenchmarkParse is Parse's cost for a middleware's report in each format.
func BenchmarkParse(b *testing.B) {
	r := Report{CPUUtilization: 0.42, RPSFractional: 812.5, EPS: 1.25, NamedMetrics: map[string]float64{"rif": 7}}
	for _, f := range []Format{Text, JSON, Binary} {
		h, err := r.Header(f)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(f.String(), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
