package loadreport

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lbgo/balancer"
)

func TestParseProbe(t *testing.T) {
	for _, tt := range []struct {
		body    string
		wantRIF float64
		wantLat time.Duration
	}{
		{"TEXT named_metrics.rif=3,named_metrics.latency_ms=1.5", 3, 1500 * time.Microsecond},
		{"TEXT named_metrics.latency_ms=2, named_metrics.rif=0", 0, 2 * time.Millisecond},
		{"TEXT named_metrics.rif=7", 7, 0},
		{"TEXT cpu_utilization=0.5,named_metrics.rif=2,named_metrics.latency_ms=0.001,named_metrics.foo=abc", 2, time.Microsecond},
		{"TEXT named_metrics.rif:4", 4, 0},
		{"TEXT named_metrics.rif=1\r\n", 1, 0},
		{"TEXT ,,named_metrics.rif=2.5,", 2.5, 0},
		{"TEXT named_metrics.rif=1048576,named_metrics.latency_ms=3.6e+06", balancer.MaxProbeInFlight, balancer.MaxProbeLatency},
		{"TEXT named_metrics.rif=-0,named_metrics.latency_ms=0.0000004", 0, 0},
	} {
		t.Run(tt.body, func(t *testing.T) {
			rif, lat, err := ParseProbe([]byte(tt.body))
			if err != nil || rif != tt.wantRIF || lat != tt.wantLat {
				t.Fatalf("ParseProbe = %v, %v, %v; want %v, %v", rif, lat, err, tt.wantRIF, tt.wantLat)
			}
		})
	}
}

func TestParseProbeRefuses(t *testing.T) {
	for _, tt := range []struct {
		body     string
		sentinel error
		want     string // in the message
	}{
		{"", ErrNoReport, "empty"},
		{`JSON {"named_metrics":{"rif":1}}`, ErrUnknownFormat, `"JSON"`},
		{"TEXT", ErrUnknownFormat, `"TEXT"`},
		{"text named_metrics.rif=1", ErrUnknownFormat, `"text"`},
		{"TEXT named_metrics.latency_ms=1", ErrNoReport, "no named_metrics.rif"},
		{"TEXT ", ErrNoReport, "no named_metrics.rif"},
		{"TEXT named_metrics.rif=NaN", ErrInvalidValue, "named_metrics.rif=NaN"},
		{"TEXT named_metrics.rif=-1", ErrInvalidValue, "named_metrics.rif=-1"},
		{"TEXT named_metrics.rif=+Inf", ErrInvalidValue, "named_metrics.rif=+Inf"},
		{"TEXT named_metrics.rif=1e400", ErrInvalidValue, `named_metrics.rif="1e400"`},
		{"TEXT named_metrics.rif=1048577", ErrInvalidValue, "named_metrics.rif=1.048577e+06, want 0 to 1048576"},
		{"TEXT named_metrics.rif=1,named_metrics.latency_ms=3600000.001", ErrInvalidValue, "named_metrics.latency_ms=3.600000001e+06"},
		{"TEXT named_metrics.rif=1,named_metrics.latency_ms=-2", ErrInvalidValue, "named_metrics.latency_ms=-2"},
		{"TEXT named_metrics.rif=1,named_metrics.latency_ms=nan", ErrInvalidValue, "named_metrics.latency_ms=NaN"},
		{"TEXT named_metrics.rif=0x10", ErrMalformed, `"0x10" is not a decimal number`},
		{"TEXT named_metrics.rif=1_0", ErrMalformed, `"1_0" is not a decimal number`},
		{"TEXT named_metrics.rif=abc", ErrMalformed, `"abc" is not a number`},
		{"TEXT named_metrics.rif=", ErrMalformed, "named_metrics.rif has no value"},
		{"TEXT =3", ErrMalformed, `"=3" has no name`},
		{"TEXT named_metrics.rif", ErrMalformed, `"named_metrics.rif" has no name or no value`},
		{"TEXT named_metrics.rif=1,named_metrics.rif=2", ErrMalformed, "named_metrics.rif twice"},
		{"TEXT named_metrics.rif=1," + strings.Repeat(" ", MaxProbeLen), ErrTooLarge, "more than 1024"},
	} {
		t.Run(tt.body, func(t *testing.T) {
			rif, lat, err := ParseProbe([]byte(tt.body))
			if !errors.Is(err, balancer.ErrInvalidProbe) || !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("ParseProbe = %v, %v, %v; want ErrInvalidProbe and %v naming %s", rif, lat, err, tt.sentinel, tt.want)
			}
			if rif != 0 || lat != 0 {
				t.Fatalf("refused with values %v, %v", rif, lat)
			}
		})
	}
}

func TestProbeFromNamedMetrics(t *testing.T) {
	for _, tt := range []struct {
		name     string
		m        map[string]float64
		wantRIF  float64
		wantLat  time.Duration
		sentinel error // nil: accepted
	}{
		{"both", map[string]float64{"rif": 4, "latency_ms": 2.25, "other": -1}, 4, 2250 * time.Microsecond, nil},
		{"no latency", map[string]float64{"rif": 1}, 1, 0, nil},
		{"no rif", map[string]float64{"latency_ms": 1}, 0, 0, ErrNoReport},
		{"nil", nil, 0, 0, ErrNoReport},
		{"rif too large", map[string]float64{"rif": 2e6}, 0, 0, ErrInvalidValue},
		{"latency negative", map[string]float64{"rif": 1, "latency_ms": -1}, 0, 0, ErrInvalidValue},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rif, lat, err := ProbeFromNamedMetrics(tt.m)
			if tt.sentinel == nil {
				if err != nil || rif != tt.wantRIF || lat != tt.wantLat {
					t.Fatalf("= %v, %v, %v; want %v, %v", rif, lat, err, tt.wantRIF, tt.wantLat)
				}
				return
			}
			if !errors.Is(err, balancer.ErrInvalidProbe) || !errors.Is(err, tt.sentinel) {
				t.Fatalf("= %v, %v, %v; want ErrInvalidProbe and %v", rif, lat, err, tt.sentinel)
			}
		})
	}
}

func TestParseProbeAllocs(t *testing.T) {
	body := []byte("TEXT named_metrics.rif=1048576,named_metrics.latency_ms=1234.5678901234567,cpu_utilization=0.5")
	if n := testing.AllocsPerRun(1000, func() {
		if _, _, err := ParseProbe(body); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("ParseProbe: %v allocations, want 0", n)
	}
}

// probeTracker is a tracker on a fake clock at 1 s with one completed
// request, 2 ms at rif 0, and inFlight requests in flight. With r > 0 in
// flight its probe answer is 2 ms × (r+1)/(0+1): levels 1 and up are
// empty, level 0 holds the one request.
func probeTracker(t *testing.T, inFlight int) (*Tracker, *fakeClock) {
	tr, clk := newTestTracker(t)
	clk.set(time.Second)
	b := tr.Begin()
	clk.set(time.Second + 2*time.Millisecond)
	tr.End(b, false)
	for range inFlight {
		tr.Begin()
	}
	return tr, clk
}

// TestMiddlewareProbe: the Middleware answers GET and HEAD on its probe
// path itself (the wrapped handler is not called, the probe not counted)
// with the Tracker's answer, 2 in flight: 2 ms × 3 = 6 ms; any other
// method or path reaches the handler.
func TestMiddlewareProbe(t *testing.T) {
	const answer = "TEXT named_metrics.rif=2,named_metrics.latency_ms=6"
	for _, tt := range []struct {
		name, method, target string
		opts                 []Option
		probe                bool // answered by the middleware
	}{
		{"default path", "GET", DefaultProbePath, nil, true},
		{"HEAD", "HEAD", DefaultProbePath, nil, true},
		{"with a query", "GET", DefaultProbePath + "?x=1", nil, true},
		{"POST reaches the handler", "POST", DefaultProbePath, nil, false},
		{"another path", "GET", "/_lbgo/probe/x", nil, false},
		{"WithProbePath", "GET", "/lb/probe", []Option{WithProbePath("/lb/probe")}, true},
		{"WithProbePath: the default path is the handler's", "GET", DefaultProbePath, []Option{WithProbePath("/lb/probe")}, false},
		{`WithProbePath(""): no probes`, "GET", DefaultProbePath, []Option{WithProbePath("")}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, _ := probeTracker(t, 2)
			m, err := New(append([]Option{WithTracker(tr)}, tt.opts...)...)
			if err != nil {
				t.Fatal(err)
			}
			called := 0
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				called++
				io.WriteString(w, "app")
			}))
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(tt.method, tt.target, nil))
			rps := completed(tr)
			if !tt.probe {
				if called != 1 || rec.Body.String() != "app" || rps != 2 {
					t.Fatalf("handler called %d times, body %q, completed %d: want 1, \"app\", 2 (counted)", called, rec.Body, rps)
				}
				return
			}
			if called != 0 || rps != 1 || tr.InFlight() != 2 {
				t.Fatalf("handler called %d times, completed %d, in flight %d: want 0, 1, 2 (not counted)", called, rps, tr.InFlight())
			}
			if rec.Code != 200 || rec.Body.String() != answer || rec.Header().Get(HeaderName) != "" {
				t.Fatalf("answer %d %q (report header %q), want 200 %q and no report", rec.Code, rec.Body, rec.Header().Get(HeaderName), answer)
			}
			if ct := rec.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q", ct)
			}
		})
	}
}

func TestProbeHandler(t *testing.T) {
	tr, _ := probeTracker(t, 0)
	for _, tt := range []struct {
		name, method string
		h            http.Handler
		code         int
		body         string
	}{
		{"GET", "GET", ProbeHandler(tr), 200, "TEXT named_metrics.rif=0,named_metrics.latency_ms=2"},
		{"POST", "POST", ProbeHandler(tr), 405, "loadreport: a probe is a GET\n"},
		{"nil Tracker", "GET", ProbeHandler(nil), 500, "loadreport: ProbeHandler(nil Tracker)\n"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			tt.h.ServeHTTP(rec, httptest.NewRequest(tt.method, "/anywhere", nil))
			if rec.Code != tt.code || rec.Body.String() != tt.body {
				t.Fatalf("%d %q, want %d %q", rec.Code, rec.Body, tt.code, tt.body)
			}
		})
	}
	if n := completed(tr); n != 1 {
		t.Fatalf("%d requests completed after probes, want 1 (probes not counted)", n)
	}
}

func TestProbeOptionsRejected(t *testing.T) {
	tr, _ := newTestTracker(t)
	for _, tt := range []struct {
		name string
		new  func() error
		want string
	}{
		{"no slash", func() error { _, err := New(WithProbePath("probe")); return err }, `WithProbePath("probe")`},
		{"a query", func() error { _, err := New(WithProbePath("/p?x")); return err }, `WithProbePath("/p?x")`},
		{"a Tracker's", func() error { _, err := NewTracker(WithProbePath("/p")); return err }, "WithProbePath"},
		{"window too short", func() error { _, err := NewTracker(WithProbeWindow(time.Millisecond)); return err }, "WithProbeWindow(1ms)"},
		{"window with WithTracker", func() error { _, err := New(WithTracker(tr), WithProbeWindow(time.Second)); return err }, "WithProbeWindow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.new()
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidOption naming %s", err, tt.want)
			}
		})
	}
}

// TestProbeAllocs: answering a probe allocates nothing in this package,
// on a ResponseWriter reused as a server's connection reuses its buffers
// (what net/http allocates per request is in BENCHMARKS.md).
func TestProbeAllocs(t *testing.T) {
	tr, _ := probeTracker(t, 3)
	m, _ := New(WithTracker(tr))
	mw := m.Handler(http.NotFoundHandler())
	req := httptest.NewRequest("GET", DefaultProbePath, nil)
	for _, tt := range []struct {
		name string
		h    http.Handler
	}{{"Middleware", mw}, {"ProbeHandler", ProbeHandler(tr)}} {
		w := &bodyWriter{h: make(http.Header)}
		tt.h.ServeHTTP(w, req)
		if n := testing.AllocsPerRun(1000, func() { w.body = w.body[:0]; tt.h.ServeHTTP(w, req) }); n != 0 {
			t.Errorf("%s: %v allocations a probe, want 0", tt.name, n)
		}
		if got := string(w.body); got != "TEXT named_metrics.rif=3,named_metrics.latency_ms=8" {
			t.Errorf("%s: body %q", tt.name, got)
		}
	}
}

// completed is the requests the Tracker counted in its rate window.
func completed(tr *Tracker) uint64 { return tr.reqs.count(tr.elapsed()) }

// bodyWriter is a reused ResponseWriter that keeps the body.
type bodyWriter struct {
	h    http.Header
	body []byte
}

func (w *bodyWriter) Header() http.Header         { return w.h }
func (w *bodyWriter) Write(b []byte) (int, error) { w.body = append(w.body, b...); return len(b), nil }
func (w *bodyWriter) WriteHeader(int)             {}

// TestProbeLiveServer: a real server on loopback, the Middleware around
// a handler that holds its requests until released; the Tracker on a
// fake clock, so the estimate is known: one request completed before,
// 2 ms at rif 0. Five requests held: 16 clients probing at once each
// read rif 5 and 2 ms × 6 = 12 ms, over HTTP, with ParseProbe. Once the
// five are released and done (0 ms each on the fake clock, at rif 0 to
// 4, one at level 0), a probe reads rif 0 and level 0's (2+0)/2 = 1 ms;
// the Tracker counted 6 requests, no probe.
func TestProbeLiveServer(t *testing.T) {
	tr, _ := probeTracker(t, 0)
	m, err := New(WithTracker(tr))
	if err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}, 5), make(chan struct{})
	srv := httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- struct{}{}
		<-release
	})))
	defer srv.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	probe := func() (float64, time.Duration, error) {
		resp, err := c.Get(srv.URL + DefaultProbePath)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, MaxProbeLen+1))
		if err != nil {
			return 0, 0, err
		}
		return ParseProbe(body)
	}
	var held sync.WaitGroup
	for range 5 {
		held.Go(func() {
			resp, err := c.Get(srv.URL + "/work")
			if err != nil {
				t.Error(err)
				return
			}
			resp.Body.Close()
		})
	}
	timeout := time.After(10 * time.Second)
	for range 5 {
		select {
		case <-arrived:
		case <-timeout:
			t.Fatal("the five requests did not arrive in 10 s")
		}
	}
	var probers sync.WaitGroup
	for range 16 {
		probers.Go(func() {
			for range 5 {
				rif, lat, err := probe()
				if err != nil || rif != 5 || lat != 12*time.Millisecond {
					t.Errorf("probe = %v, %v, %v; want 5, 12ms", rif, lat, err)
					return
				}
			}
		})
	}
	probers.Wait()
	close(release)
	held.Wait()
	rif, lat, err := probe()
	if err != nil || rif != 0 || lat != time.Millisecond {
		t.Fatalf("after: probe = %v, %v, %v; want 0, 1ms", rif, lat, err)
	}
	if got := completed(tr); got != 6 {
		t.Fatalf("%d requests completed, want 6: the 6 requests, not the 81 probes", got)
	}
}
