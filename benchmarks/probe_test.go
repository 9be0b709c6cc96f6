package benchmarks

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
)

// probeTracker is a Tracker on a clock of its own holding what a busy
// server's holds: 4096 steps of 100 µs each (0.41 s, inside the 1 s probe
// window), each beginning a request or ending the oldest in flight (a
// seeded draw, with between 0 and 16 in flight), so the requests began
// at RIF 0 to 15 and lasted what the queue made them; 8 in flight at the
// end, so a probe's level (8-15) holds requests.
func probeTracker() *loadreport.Tracker {
	var ns atomic.Int64
	epoch := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	tr, err := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return epoch.Add(time.Duration(ns.Load())) }))
	if err != nil {
		panic(err)
	}
	r := rand.New(rand.NewPCG(5, 0))
	var inFlight []loadreport.Began
	for range 4096 {
		ns.Add(int64(100 * time.Microsecond))
		if len(inFlight) == 0 || len(inFlight) < 16 && r.IntN(2) == 0 {
			inFlight = append(inFlight, tr.Begin())
		} else {
			tr.End(inFlight[0], false)
			inFlight = inFlight[1:]
		}
	}
	for len(inFlight) > 8 {
		tr.End(inFlight[0], false)
		inFlight = inFlight[1:]
	}
	for len(inFlight) < 8 {
		inFlight = append(inFlight, tr.Begin())
	}
	return tr
}

// BenchmarkProbe is what answering a probe costs a server,
// Probe/<variant>, against a bare handler in the same run:
//
//   - tracker/found: Tracker.Probe alone on probeTracker's state (the
//     current RIF's level holds requests); tracker/scan: its worst case,
//     1,048,576 in flight and only level 0 holding requests, so it reads
//     the 21 levels above first;
//   - http/bare: a trivial handler (status 200, no body) on a reused
//     ResponseWriter; http/middleware: a GET on DefaultProbePath through
//     the Middleware, which answers it; http/handler: ProbeHandler;
//   - http/loopback/<v>: over loopback (a net/http client and server on
//     127.0.0.1, keep-alive), each reading the whole body: bare, the bare
//     handler; static, a handler writing a fixed body as long as a probe
//     answer with the same headers (net/http's cost of such a body); probe,
//     the Middleware's probe, then ParseProbe. allocs/op there are the
//     client's and the server's;
//   - http/raw/<v>: the same three with a raw TCP client in place of
//     net/http's (it writes the request bytes and reads the response's,
//     allocating nothing), so allocs/op are net/http's server's alone;
//   - parse: ParseProbe of a typical answer.
func BenchmarkProbe(b *testing.B) {
	trivial := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	probeReq := httptest.NewRequest(http.MethodGet, loadreport.DefaultProbePath, nil)
	bareReq := httptest.NewRequest(http.MethodGet, "/", nil)
	tr := probeTracker()
	m, err := loadreport.New(loadreport.WithTracker(tr))
	if err != nil {
		b.Fatal(err)
	}
	mw := m.Handler(trivial)

	b.Run("tracker/found", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			tr.Probe()
		}
	})
	b.Run("tracker/scan", func(b *testing.B) {
		worst, err := loadreport.NewTracker()
		if err != nil {
			b.Fatal(err)
		}
		worst.End(worst.Begin(), false)
		for range balancer.MaxProbeInFlight {
			worst.Begin()
		}
		b.ReportAllocs()
		for b.Loop() {
			worst.Probe()
		}
	})
	for _, v := range []struct {
		name string
		h    http.Handler
		req  *http.Request
	}{
		{"bare", trivial, bareReq},
		{"middleware", mw, probeReq},
		{"handler", loadreport.ProbeHandler(tr), probeReq},
	} {
		b.Run("http/"+v.name+"/serial", func(b *testing.B) {
			w := &reusedWriter{h: make(http.Header)}
			b.ReportAllocs()
			for b.Loop() {
				v.h.ServeHTTP(w, v.req)
			}
		})
		b.Run("http/"+v.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				w := &reusedWriter{h: make(http.Header)}
				for pb.Next() {
					v.h.ServeHTTP(w, v.req)
				}
			})
		})
	}
	loopback := func(b *testing.B, h http.Handler, path string, parse bool) {
		srv := httptest.NewServer(h)
		defer srv.Close()
		c := srv.Client()
		url := srv.URL + path
		buf := make([]byte, loadreport.MaxProbeLen+1)
		b.ReportAllocs()
		for b.Loop() {
			resp, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			n, _ := io.ReadFull(resp.Body, buf)
			resp.Body.Close()
			if parse {
				if _, _, err := loadreport.ParseProbe(buf[:n]); err != nil {
					b.Fatal(err)
				}
			}
		}
	}
	// static answers what the probe answers on probeTracker's state,
	// fixed, with the same headers.
	rec := httptest.NewRecorder()
	mw.ServeHTTP(rec, probeReq)
	answer := rec.Body.Bytes()
	static := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Content-Type"] = staticContentType
		w.Header()["Cache-Control"] = staticNoStore
		_, _ = w.Write(answer)
	})
	b.Run("http/loopback/bare", func(b *testing.B) { loopback(b, trivial, "/", false) })
	b.Run("http/loopback/static", func(b *testing.B) { loopback(b, static, "/", false) })
	b.Run("http/loopback/probe", func(b *testing.B) { loopback(b, mw, loadreport.DefaultProbePath, true) })
	b.Run("http/raw/bare", func(b *testing.B) { rawLoopback(b, trivial, "/") })
	b.Run("http/raw/static", func(b *testing.B) { rawLoopback(b, static, "/") })
	b.Run("http/raw/probe", func(b *testing.B) { rawLoopback(b, mw, loadreport.DefaultProbePath) })
	b.Run("parse", func(b *testing.B) {
		body := []byte("TEXT named_metrics.rif=8,named_metrics.latency_ms=1.2345")
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := loadreport.ParseProbe(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

var (
	staticContentType = []string{"text/plain; charset=utf-8"}
	staticNoStore     = []string{"no-store"}
)

// rawLoopback serves h on loopback and requests path over one kept-alive
// TCP connection with no HTTP client: the request's bytes are written,
// and the response's read whole, its length learned from the first
// response (the Date header and the answers have fixed lengths here).
func rawLoopback(b *testing.B, h http.Handler, path string) {
	srv := httptest.NewServer(h)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := []byte("GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	buf := make([]byte, 4096)
	if _, err := conn.Write(req); err != nil {
		b.Fatal(err)
	}
	n := 0
	size := -1
	for size < 0 || n < size {
		m, err := conn.Read(buf[n:])
		if err != nil {
			b.Fatal(err)
		}
		n += m
		if end := bytes.Index(buf[:n], []byte("\r\n\r\n")); end >= 0 && size < 0 {
			head := string(buf[:end])
			const cl = "Content-Length: "
			i := bytes.Index([]byte(head), []byte(cl))
			if i < 0 {
				b.Fatalf("response without Content-Length: %q", head)
			}
			j := i + len(cl)
			for j < len(head) && head[j] >= '0' && head[j] <= '9' {
				j++
			}
			body, _ := strconv.Atoi(head[i+len(cl) : j])
			size = end + 4 + body
		}
	}
	if n != size {
		b.Fatalf("read %d bytes, want %d", n, size)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(conn, buf[:size]); err != nil {
			b.Fatal(err)
		}
	}
}
