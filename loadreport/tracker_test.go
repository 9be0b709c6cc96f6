package loadreport

import (
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

func newTestTracker(t *testing.T, opts ...Option) (*Tracker, *fakeClock) {
	t.Helper()
	c := new(fakeClock)
	tr, err := NewTracker(append([]Option{WithClock(c.now)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return tr, c
}

// TestTrackerLatency: the latency estimate is the mean duration of the
// requests completed in the window (the rate window's buckets, 10 of
// window/10), in milliseconds; the expected values are the means of the
// durations placed on the fake clock, written out here.
func TestTrackerLatency(t *testing.T) {
	tr, clk := newTestTracker(t, WithWindow(10*time.Second))
	// call runs one request from begin to end on the clock.
	call := func(begin, end time.Duration, failed bool) {
		clk.set(begin)
		b := tr.Begin()
		clk.set(end)
		tr.End(b, failed)
	}
	check := func(at time.Duration, wantMs float64) {
		t.Helper()
		clk.set(at)
		if got := tr.Snapshot().LatencyMs; math.Abs(got-wantMs) > 1e-9 {
			t.Fatalf("at %v: latency %v ms, want %v", at, got, wantMs)
		}
	}
	check(0, 0) // nothing completed: no estimate
	call(1000*time.Millisecond, 1002*time.Millisecond, false)
	call(1100*time.Millisecond, 1104*time.Millisecond, true) // errors count too
	call(1500*time.Millisecond, 1509*time.Millisecond, false)
	check(2*time.Second, (2.0+4+9)/3)
	call(5*time.Second, 6500*time.Millisecond, false) // ends in bucket 6
	check(7*time.Second, (2.0+4+9+1500)/4)
	check(11500*time.Millisecond, 1500) // bucket 1 left the window (buckets 2..11 remain)
	check(16500*time.Millisecond, 0)    // bucket 6 left too
	// A request that began before a long gap still counts its whole duration.
	call(16*time.Second, 17*time.Second+250*time.Microsecond, false)
	check(17500*time.Millisecond, 1000.25)
}

// TestTrackerLittlesLaw: 4 requests always in flight, each 250 ms long
// (one ends and another begins every 62.5 ms), for 20.5 s. At 20.5 s the
// window holds buckets 11..20, spanning 9.5 s: the completions at
// 11.0, 11.0625, ..., 20.5 s, 153 of them. So rps = 153/9.5, latency 250 ms,
// and rps × latency is within 1/152 of the 4 in flight (Little's law).
func TestTrackerLittlesLaw(t *testing.T) {
	tr, clk := newTestTracker(t)
	const step = 62500 * time.Microsecond
	var inFlight []Began
	for at := time.Duration(0); at <= 20500*time.Millisecond; at += step {
		clk.set(at)
		if len(inFlight) == 4 {
			tr.End(inFlight[0], false)
			inFlight = inFlight[1:]
		}
		inFlight = append(inFlight, tr.Begin())
	}
	s := tr.Snapshot()
	if s.InFlight != 4 || math.Abs(s.RPSFractional-153/9.5) > 1e-9 || s.LatencyMs != 250 {
		t.Fatalf("snapshot %+v, want rif 4, rps %v, latency 250 ms", s, 153/9.5)
	}
	if l := s.RPSFractional * s.LatencyMs / 1000; math.Abs(l-4) > 4.0/152 {
		t.Fatalf("rps × latency = %v, want 4 within 1/152", l)
	}
}

// TestTrackerConcurrent: 8 goroutines end 200 requests each, 3 ms long,
// at once (run with -race): the latency is exactly 3 ms, and all 1600 count.
func TestTrackerConcurrent(t *testing.T) {
	tr, clk := newTestTracker(t)
	clk.set(time.Second)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 200 {
				tr.inFlight.Add(1)
				tr.End(Began{at: time.Second - 3*time.Millisecond}, false)
				_ = tr.Snapshot()
			}
		})
	}
	wg.Wait()
	if s := tr.Snapshot(); s.LatencyMs != 3 || s.RPSFractional != 1600 || s.InFlight != 0 {
		t.Fatalf("snapshot %+v, want latency 3 ms, rps 1600, rif 0", s)
	}
}

// TestMiddlewareLatency: the header carries the latency estimate as
// named_metrics.latency_ms in every format, once a request has completed;
// the handler moves the fake clock to make its request last.
func TestMiddlewareLatency(t *testing.T) {
	for _, f := range []Format{Text, JSON, Binary} {
		t.Run(f.String(), func(t *testing.T) {
			m, clk := newTestMiddleware(t, WithFormat(f))
			clk.set(time.Second)
			var d time.Duration
			h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				clk.set(clk.now().Sub(epoch) + d)
				w.WriteHeader(200)
			}))
			d = 6 * time.Millisecond
			got, _ := serve(t, h) // the first: nothing completed yet
			if _, ok := got.NamedMetrics[LatencyName]; ok {
				t.Fatalf("first report %+v carries a latency", got)
			}
			d = 3 * time.Millisecond
			got, rec := serve(t, h)
			if got.NamedMetrics[LatencyName] != 6 {
				t.Fatalf("report %+v (%q): want %s 6", got, rec.Header().Get(HeaderName), LatencyName)
			}
			got, _ = serve(t, h)
			if got.NamedMetrics[LatencyName] != 4.5 || got.NamedMetrics[InFlightName] != 1 {
				t.Fatalf("report %+v: want %s 4.5 (mean of 6 and 3), rif 1", got, LatencyName)
			}
		})
	}
}

func TestLatencyNameInText(t *testing.T) {
	m, clk := newTestMiddleware(t)
	clk.set(time.Second)
	b := m.Tracker().Begin()
	clk.set(time.Second + 1500*time.Microsecond)
	m.Tracker().End(b, false)
	_, rec := serve(t, m.Handler(http.NotFoundHandler()))
	if h := rec.Header().Get(HeaderName); !strings.Contains(h, "named_metrics.latency_ms=1.5") {
		t.Fatalf("header %q lacks named_metrics.latency_ms=1.5", h)
	}
}

// TestTrackerOptions: each constructor refuses the other's options and
// bad values, with ErrInvalidOption and the option's name.
func TestTrackerOptions(t *testing.T) {
	tr, _ := newTestTracker(t)
	for _, tt := range []struct {
		name string
		new  func() error
		want string
	}{
		{"tracker: WithFormat", func() error { _, err := NewTracker(WithFormat(JSON)); return err }, "WithFormat"},
		{"tracker: WithErrorStatus", func() error {
			_, err := NewTracker(WithErrorStatus(func(int) bool { return false }))
			return err
		}, "WithErrorStatus"},
		{"tracker: WithTracker", func() error { _, err := NewTracker(WithTracker(tr)); return err }, "WithTracker"},
		{"tracker: WithWindow(0)", func() error { _, err := NewTracker(WithWindow(0)); return err }, "WithWindow(0s)"},
		{"tracker: WithUtilization(nil)", func() error { _, err := NewTracker(WithUtilization(nil)); return err }, "WithUtilization(nil)"},
		{"middleware: WithTracker(nil)", func() error { _, err := New(WithTracker(nil)); return err }, "WithTracker(nil)"},
		{"middleware: WithTracker and WithClock", func() error {
			_, err := New(WithTracker(tr), WithClock(time.Now))
			return err
		}, "WithClock"},
		{"middleware: WithTracker and WithWindow", func() error {
			_, err := New(WithWindow(time.Second), WithTracker(tr))
			return err
		}, "WithWindow"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.new()
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidOption naming %s", err, tt.want)
			}
		})
	}
}

// TestMiddlewareSharesTracker: two middlewares on one tracker (an HTTP
// server's two handlers, or HTTP beside gRPC) report one load.
func TestMiddlewareSharesTracker(t *testing.T) {
	tr, clk := newTestTracker(t)
	clk.set(time.Second)
	a, err := New(WithTracker(tr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(WithTracker(tr), WithFormat(Binary))
	if err != nil {
		t.Fatal(err)
	}
	_ = tr.SetCPUUtilization(0.5)
	serve(t, a.Handler(http.NotFoundHandler()))
	got, _ := serve(t, b.Handler(http.NotFoundHandler()))
	want := Report{CPUUtilization: 0.5, RPSFractional: 1, NamedMetrics: map[string]float64{InFlightName: 1}}
	if !got.Equal(want) || a.InFlight() != 0 || b.Report().RPSFractional != 2 {
		t.Fatalf("report %+v, want %+v; then rps %v, want 2", got, want, b.Report().RPSFractional)
	}
}

// TestTrackerUnbalancedEnd: an End without its Begin (a caller's bug)
// makes the count of requests in flight negative; a report must still be
// one Parse accepts, in every format, with rif 0 in place of the negative
// count, or every client would drop the server's reports while it lasts.
func TestTrackerUnbalancedEnd(t *testing.T) {
	tr, _ := newTestTracker(t)
	b := tr.Begin()
	tr.End(b, false)
	tr.End(b, false) // the bug: a second End for one Begin
	if s := tr.Snapshot(); s.InFlight != 0 {
		t.Fatalf("Snapshot().InFlight = %v, want 0", s.InFlight)
	}
	for _, f := range []Format{Text, JSON, Binary} {
		s := tr.Snapshot()
		h := string(s.appendHeader(nil, make([]byte, 0, 128), f))
		r, err := Parse(h)
		if err != nil {
			t.Fatalf("format %v: header %q: Parse: %v", f, h, err)
		}
		if got := r.NamedMetrics[InFlightName]; got != 0 {
			t.Errorf("format %v: rif %v, want 0", f, got)
		}
	}
}
