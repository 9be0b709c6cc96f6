package loadreport

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeClock is a settable clock; tests move it, never sleep.
type fakeClock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) now() time.Time      { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) set(d time.Duration) { c.ns.Store(int64(d)) }

func newTestMiddleware(t *testing.T, opts ...Option) (*Middleware, *fakeClock) {
	t.Helper()
	c := new(fakeClock)
	m, err := New(append([]Option{WithClock(c.now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return m, c
}

// serve runs one request through h on a recorder and parses its report.
func serve(t *testing.T, h http.Handler) (Report, *httptest.ResponseRecorder) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
	r, err := FromHeader(rec.Result().Header)
	if err != nil {
		t.Fatalf("response %d: %v (header %q)", rec.Code, err, rec.Header().Get(HeaderName))
	}
	return r, rec
}

func TestMiddlewareWritesHeaderOnEveryPath(t *testing.T) {
	tests := []struct {
		name   string
		h      http.HandlerFunc
		status int
	}{
		{"writes nothing", func(w http.ResponseWriter, r *http.Request) {}, 200},
		{"WriteHeader", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) }, 503},
		{"Write only", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "hi") }, 200},
		{"Flush first", func(w http.ResponseWriter, r *http.Request) { w.(http.Flusher).Flush() }, 200},
		{"ResponseController flush", func(w http.ResponseWriter, r *http.Request) {
			if err := http.NewResponseController(w).Flush(); err != nil {
				t.Error(err)
			}
		}, 200},
		{"io.Copy (ReadFrom)", func(w http.ResponseWriter, r *http.Request) {
			if n, err := io.Copy(w, strings.NewReader("body")); n != 4 || err != nil {
				t.Errorf("io.Copy = %d, %v", n, err)
			}
		}, 200},
		{"header set late is ignored", func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(201)
			w.Header().Set(HeaderName, "TEXT eps=99")
		}, 201},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _ := newTestMiddleware(t)
			got, rec := serve(t, m.Handler(tt.h))
			if rec.Code != tt.status {
				t.Fatalf("status %d, want %d", rec.Code, tt.status)
			}
			want := Report{NamedMetrics: map[string]float64{"rif": 1}}
			if !got.Equal(want) {
				t.Fatalf("report %+v, want %+v", got, want)
			}
		})
	}
}

// TestMiddlewareRates: the counts are placed on a fake clock and the
// expected rates derived here from the window's definition (10 buckets of
// window/10; the current bucket and the 9 before it over the time they
// span, at most the time since the start, at least one bucket).
func TestMiddlewareRates(t *testing.T) {
	m, clk := newTestMiddleware(t, WithWindow(10*time.Second))
	status := 200
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(status) }))
	run := func(at time.Duration, n, errs int) {
		clk.set(at)
		for i := range n {
			status = 200
			if i < errs {
				status = 500
			}
			serve(t, h)
		}
	}
	check := func(at time.Duration, rps, eps float64) {
		t.Helper()
		clk.set(at)
		got := m.Report()
		if math.Abs(got.RPSFractional-rps) > 1e-9 || math.Abs(got.EPS-eps) > 1e-9 {
			t.Fatalf("at %v: rps %v eps %v, want %v %v", at, got.RPSFractional, got.EPS, rps, eps)
		}
	}
	check(0, 0, 0)
	run(5500*time.Millisecond, 30, 6)
	check(5500*time.Millisecond, 30/5.5, 6/5.5) // span is the 5.5 s since the start
	check(14*time.Second, 30/9.0, 6/9.0)        // buckets 5..14 over 9 full buckets and 0 s of the 14th
	check(16*time.Second, 0, 0)                 // bucket 5 left the window
	run(12300*time.Millisecond, 10, 0)
	run(21500*time.Millisecond, 5, 5)
	check(21500*time.Millisecond, 15/9.5, 5/9.5) // buckets 12..21
	check(22*time.Second, 5/9.0, 5/9.0)          // buckets 13..22
	// 4xx is not an error by default.
	run(40*time.Second, 0, 0)
	status = 404
	clk.set(40 * time.Second)
	serve(t, h)
	check(40*time.Second, 1/9.0, 0)
}

func TestMiddlewareUtilization(t *testing.T) {
	m, _ := newTestMiddleware(t, WithFormat(Binary))
	for _, set := range []func(float64) error{m.SetCPUUtilization, m.SetMemUtilization, m.SetApplicationUtilization} {
		for _, bad := range []float64{-0.5, math.NaN(), math.Inf(1)} {
			if err := set(bad); !errors.Is(err, ErrInvalidOption) {
				t.Errorf("set(%v) = %v, want ErrInvalidOption", bad, err)
			}
		}
	}
	if err := errors.Join(m.SetCPUUtilization(0.25), m.SetMemUtilization(0.5), m.SetApplicationUtilization(1.5)); err != nil {
		t.Fatal(err)
	}
	got, _ := serve(t, m.Handler(http.NotFoundHandler()))
	want := Report{CPUUtilization: 0.25, MemUtilization: 0.5, ApplicationUtilization: 1.5, NamedMetrics: map[string]float64{"rif": 1}}
	if !got.Equal(want) {
		t.Fatalf("report %+v, want %+v", got, want)
	}

	u := 0.75
	m2, _ := newTestMiddleware(t, WithUtilization(func() float64 { return u }))
	_ = m2.SetApplicationUtilization(0.1)
	if got, _ := serve(t, m2.Handler(http.NotFoundHandler())); got.ApplicationUtilization != 0.75 {
		t.Fatalf("application_utilization %v, want the callback's 0.75", got.ApplicationUtilization)
	}
	u = math.Copysign(0, -1)
	if rec := httptest.NewRecorder(); true {
		m2.Handler(http.NotFoundHandler()).ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		if h := rec.Header().Get(HeaderName); strings.Contains(h, "-0") {
			t.Fatalf("a -0 utilization is sent: %q", h)
		}
	}
	if err := m.SetCPUUtilization(math.Copysign(0, -1)); err != nil {
		t.Fatal(err)
	}
	if got, _ := serve(t, m.Handler(http.NotFoundHandler())); got.CPUUtilization != 0 || math.Signbit(got.CPUUtilization) {
		t.Fatalf("cpu_utilization %v after SetCPUUtilization(-0), want 0", got.CPUUtilization)
	}
	u = math.NaN()
	if got, _ := serve(t, m2.Handler(http.NotFoundHandler())); got.ApplicationUtilization != 0 {
		t.Fatalf("application_utilization %v from a NaN callback, want 0", got.ApplicationUtilization)
	}
}

func TestMiddlewareFormats(t *testing.T) {
	for _, f := range []Format{Text, JSON, Binary} {
		t.Run(f.String(), func(t *testing.T) {
			m, clk := newTestMiddleware(t, WithFormat(f))
			_ = m.SetCPUUtilization(0.5)
			clk.set(2 * time.Second)
			h := m.Handler(http.NotFoundHandler())
			serve(t, h)
			serve(t, h)
			got, rec := serve(t, h) // two done over 2 s, this one in flight
			want := Report{CPUUtilization: 0.5, RPSFractional: 1, NamedMetrics: map[string]float64{"rif": 1}}
			if !got.Equal(want) {
				t.Fatalf("report %+v from %q, want %+v", got, rec.Header().Get(HeaderName), want)
			}
			if p := rec.Header().Get(HeaderName); p[:len(f.String())+1] != f.String()+" " {
				t.Fatalf("header %q lacks the %v prefix", p, f)
			}
		})
	}
}

func TestMiddlewareOptionsRejected(t *testing.T) {
	for name, o := range map[string]Option{
		"WithClock(nil)":       WithClock(nil),
		"WithWindow(1ms)":      WithWindow(time.Millisecond),
		"WithFormat(9)":        WithFormat(9),
		"WithErrorStatus(nil)": WithErrorStatus(nil),
	} {
		if _, err := New(o); !errors.Is(err, ErrInvalidOption) {
			t.Errorf("New(%s) error %v, want ErrInvalidOption", name, err)
		}
	}
}

func TestMiddlewarePanicCounts(t *testing.T) {
	m, clk := newTestMiddleware(t)
	clk.set(time.Second)
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic("boom") }))
	func() {
		defer func() { recover() }()
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	}()
	if m.InFlight() != 0 {
		t.Fatalf("in flight %d after a panic, want 0", m.InFlight())
	}
	if r := m.Report(); r.RPSFractional != 1 || r.EPS != 1 {
		t.Fatalf("after one panic in 1 s: rps %v eps %v, want 1 1", r.RPSFractional, r.EPS)
	}
}

// TestMiddlewareLiveServer: a real server on loopback; three requests held
// in their handlers at once each report rif=3; a 103 Early Hints response
// does not carry the report, the final one does; a hijacked connection
// carries none and leaves nothing in flight.
func TestMiddlewareLiveServer(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	var arrived, written atomic.Int32
	all, allWritten := make(chan struct{}), make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("/hold", func(w http.ResponseWriter, r *http.Request) {
		if arrived.Add(1) == 3 {
			close(all)
		}
		select {
		case <-all:
		case <-r.Context().Done():
		}
		w.WriteHeader(200) // all three are in flight: rif 3
		if written.Add(1) == 3 {
			close(allWritten)
		}
		select { // none leaves before all have written their report
		case <-allWritten:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/hints", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "ok")
	})
	mux.HandleFunc("/copy", func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, strings.NewReader(strings.Repeat("z", 100000))) // the server's ReadFrom
	})
	mux.HandleFunc("/hijack", func(w http.ResponseWriter, r *http.Request) {
		c, b, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		b.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi")
		b.Flush()
	})
	srv := httptest.NewServer(m.Handler(mux))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	get := func(ctx context.Context, path string) (*http.Response, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+path, nil)
		resp, err := srv.Client().Do(req)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}

	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() {
			resp, err := get(ctx, "/hold")
			if err != nil {
				t.Error(err)
				return
			}
			r, err := FromHeader(resp.Header)
			if err != nil || r.NamedMetrics["rif"] != 3 {
				t.Errorf("held request: report %+v, %v; want rif 3", r, err)
			}
		})
	}
	wg.Wait()

	var hints []textproto.MIMEHeader
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		hints = append(hints, h)
		return nil
	}}
	resp, err := get(httptrace.WithClientTrace(ctx, trace), "/hints")
	if err != nil {
		t.Fatal(err)
	}
	if len(hints) != 1 || hints[0].Get("Link") == "" || hints[0].Get(HeaderName) != "" {
		t.Fatalf("1xx headers %v: want one 103 with Link and without %s", hints, HeaderName)
	}
	if _, err := FromHeader(resp.Header); err != nil || resp.StatusCode != 200 {
		t.Fatalf("final response after 103: status %d, report error %v", resp.StatusCode, err)
	}

	resp, err = get(ctx, "/copy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := FromHeader(resp.Header); err != nil || resp.ContentLength != -1 && resp.ContentLength != 100000 {
		t.Fatalf("io.Copy response: length %d, report error %v", resp.ContentLength, err)
	}

	resp, err = get(ctx, "/hijack")
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(HeaderName) != "" {
		t.Fatalf("hijacked response carries %q", resp.Header.Get(HeaderName))
	}
	for m.InFlight() != 0 { // the hijacking handler returns after the client read its reply
		select {
		case <-ctx.Done():
			t.Fatalf("in flight %d after every request ended", m.InFlight())
		default:
			time.Sleep(time.Millisecond) // waits on a real server's event, bounded by ctx
		}
	}
}

// TestMiddlewareHijackNotSupported: a ResponseWriter that cannot hijack
// makes Hijack fail with http.ErrNotSupported, and the report is written.
func TestMiddlewareHijackNotSupported(t *testing.T) {
	m, _ := newTestMiddleware(t)
	got, _ := serve(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, _, err := w.(http.Hijacker).Hijack(); !errors.Is(err, http.ErrNotSupported) {
			t.Errorf("Hijack on a recorder: %v, want ErrNotSupported", err)
		}
	})))
	if got.NamedMetrics["rif"] != 1 {
		t.Fatalf("report %+v", got)
	}
}

// nopWriter is a ResponseWriter reused across requests, as a server's is
// in a benchmark: its header map keeps its entry.
type nopWriter struct{ h http.Header }

func (w *nopWriter) Header() http.Header         { return w.h }
func (w *nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *nopWriter) WriteHeader(int)             {}

// headerAllocs is what setting one header value costs: the value's string
// and its one-element []string (what http.Header.Set allocates too).
const headerAllocs = 2

func TestMiddlewareAllocs(t *testing.T) {
	for _, f := range []Format{Text, JSON, Binary} {
		m, clk := newTestMiddleware(t, WithFormat(f))
		clk.set(3 * time.Second)
		// Every field set, with values of 17 significant digits: the
		// longest header value the middleware writes.
		_ = m.SetCPUUtilization(0.30000000000000004)
		_ = m.SetMemUtilization(0.70000000000000007)
		_ = m.SetApplicationUtilization(1.2345678901234567)
		var at time.Duration = 3 * time.Second
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			at += 1234567 * time.Nanosecond // each request lasts 1.234567 ms
			clk.set(at)
			if r.URL.Path == "/fail" {
				w.WriteHeader(500)
				return
			}
			w.WriteHeader(200)
		}))
		for range 7 {
			h.ServeHTTP(&nopWriter{h: make(http.Header)}, httptest.NewRequest("GET", "/fail", nil))
		}
		w := &nopWriter{h: make(http.Header)}
		req := httptest.NewRequest("GET", "/", nil)
		if n := testing.AllocsPerRun(1000, func() { h.ServeHTTP(w, req) }); n > headerAllocs {
			t.Errorf("%v: %v allocations a request, want at most %d (the header value)", f, n, headerAllocs)
		}
		r, err := FromHeader(w.h)
		if err != nil || r.EPS == 0 || r.NamedMetrics[LatencyName] == 0 {
			t.Errorf("%v: report %+v, %v: want every field set", f, r, err)
		}
	}
}

// TestMiddlewareConcurrent: 8 goroutines of 200 requests each at once
// (run it with -race); every report parses with 1 <= rif <= 8, and after
// them nothing is in flight and all 1600 completions count: at 1 s since
// the start the window spans that 1 s, so rps is 1600.
func TestMiddlewareConcurrent(t *testing.T) {
	const workers, each = 8, 200
	for _, f := range []Format{Text, JSON, Binary} {
		m, clk := newTestMiddleware(t, WithFormat(f))
		clk.set(time.Second)
		h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "x") }))
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for range each {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
					r, err := FromHeader(rec.Result().Header)
					if rif := r.NamedMetrics["rif"]; err != nil || rif < 1 || rif > workers {
						t.Errorf("%v: report %+v, %v", f, r, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := m.InFlight(); n != 0 {
			t.Fatalf("%v: %d in flight after all returned", f, n)
		}
		if got := m.Report().RPSFractional; got != workers*each {
			t.Fatalf("%v: rps %v, want %d", f, got, workers*each)
		}
	}
}
