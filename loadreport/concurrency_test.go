package loadreport

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

// TestWithConcurrency: 4 requests always in flight, each 250 ms long, on a
// server of 8 workers, as in TestTrackerLittlesLaw: at 20.5 s the window
// holds 153 completions over 9.5 s, so the utilization is
// (153/9.5 × 0.25) / 8, within 1/152 of 4/8, the fraction of the workers
// busy; SetApplicationUtilization's value is replaced. With no request
// completed in the window there is nothing to report: 0.
func TestWithConcurrency(t *testing.T) {
	tr, clk := newTestTracker(t, WithConcurrency(8))
	if err := tr.SetApplicationUtilization(0.9); err != nil {
		t.Fatal(err)
	}
	if u := tr.Snapshot().ApplicationUtilization; u != 0 {
		t.Fatalf("no request completed: utilization %v, want 0", u)
	}
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
	want := 153 / 9.5 * 0.25 / 8
	s := tr.Snapshot()
	if math.Abs(s.ApplicationUtilization-want) > 1e-12 {
		t.Fatalf("utilization %v, want %v", s.ApplicationUtilization, want)
	}
	if math.Abs(s.ApplicationUtilization-0.5) > 0.5/152 {
		t.Fatalf("utilization %v, want 4 busy of 8 within 1/152", s.ApplicationUtilization)
	}
	// The report carries it, so weighted round robin has a weight:
	// rps / utilization = 8 workers / 0.25 s = 32 requests a second.
	if w := s.RPSFractional / s.ApplicationUtilization; math.Abs(w-32) > 1e-9 {
		t.Fatalf("A58 weight %v, want 32", w)
	}
	// Ten seconds later nothing completed in the window: 0 again.
	clk.set(31 * time.Second)
	if u := tr.Snapshot().ApplicationUtilization; u != 0 {
		t.Fatalf("window empty: utilization %v, want 0", u)
	}
}

func TestWithConcurrencyRefused(t *testing.T) {
	for _, tt := range []struct {
		name string
		opts []Option
		want string
	}{
		{"zero", []Option{WithConcurrency(0)}, "WithConcurrency(0)"},
		{"negative", []Option{WithConcurrency(-3)}, "WithConcurrency(-3)"},
		{"huge", []Option{WithConcurrency(1 << 40)}, "WithConcurrency(1099511627776)"},
		{"with WithUtilization", []Option{WithConcurrency(4), WithUtilization(func() float64 { return 1 })}, "WithConcurrency(4) and WithUtilization"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			for _, ctor := range []func(...Option) error{
				func(o ...Option) error { _, err := NewTracker(o...); return err },
				func(o ...Option) error { _, err := New(o...); return err },
			} {
				err := ctor(tt.opts...)
				if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("error %v, want ErrInvalidOption naming %s", err, tt.want)
				}
			}
		})
	}
	tr, _ := NewTracker()
	if _, err := New(WithTracker(tr), WithConcurrency(2)); !errors.Is(err, ErrInvalidOption) {
		t.Fatalf("WithTracker and WithConcurrency: error %v, want ErrInvalidOption", err)
	}
}
