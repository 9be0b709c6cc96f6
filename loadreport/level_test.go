package loadreport

import (
	"fmt"
	"testing"
	"time"

	"github.com/lbgo/balancer"
)

// TestTrackerProbeByLevel: the estimate a probe is answered with, by the
// rule of latencyByLevel's doc, with the default windows (probe window
// 1 s in buckets of 100 ms, report window 10 s in buckets of 1 s). Each
// row enters completed requests (begin, end, the RIF each began at) on
// the fake clock, sets the requests in flight and probes at a time; the
// expected values are worked out in the rows' comments.
func TestTrackerProbeByLevel(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	type req struct {
		begin, end time.Duration
		rif        int64
	}
	s := time.Second
	for _, tt := range []struct {
		name     string
		opts     []Option
		reqs     []req
		inFlight int64
		at       time.Duration
		wantRIF  int64
		want     time.Duration
	}{
		{name: "nothing completed: 0", at: s, want: 0},
		{
			name: "level 0: the mean of its requests, (10+30)/2",
			reqs: []req{{s, s + ms(10), 0}, {s + ms(100), s + ms(130), 0}},
			at:   s + ms(200), want: ms(20),
		},
		{
			name:     "rif 3 is level 2 (2-3): its mean (30+50)/2, unscaled",
			reqs:     []req{{s, s + ms(30), 2}, {s, s + ms(50), 3}, {s, s + ms(5), 0}},
			inFlight: 3, at: s + ms(100), wantRIF: 3, want: ms(40),
		},
		{
			name:     "rif 2, the same level",
			reqs:     []req{{s, s + ms(30), 2}, {s, s + ms(50), 3}, {s, s + ms(5), 0}},
			inFlight: 2, at: s + ms(100), wantRIF: 2, want: ms(40),
		},
		{
			// level 3 (4-7) is empty; level 2 has mean 40 ms at mean
			// RIF 2.5: 40 ms × (5+1)/(2.5+1) = 68.5714285714 ms.
			name:     "rif 5, level 3 empty: level 2 scaled by (5+1)/(2.5+1)",
			reqs:     []req{{s, s + ms(30), 2}, {s, s + ms(50), 3}, {s, s + ms(10), 0}},
			inFlight: 5, at: s + ms(100), wantRIF: 5, want: 68571429 * time.Nanosecond,
		},
		{
			name:     "rif 2, level 1 empty too: level 0 scaled by (2+1)/(0+1)",
			reqs:     []req{{s, s + ms(10), 0}},
			inFlight: 2, at: s + ms(100), wantRIF: 2, want: ms(30),
		},
		{
			// The probe window at 1.5 s holds buckets 6..15, completions
			// from 0.6 s: the rif 1 request (ended 0.3 s) is out of it, the
			// others are at levels 3 above r's; the report window (10 s)
			// holds all three: (20+80+100)/3 ms.
			name:     "only higher levels in the probe window: the report window's mean",
			reqs:     []req{{ms(280), ms(300), 1}, {s, s + ms(80), 4}, {s, s + ms(100), 6}},
			inFlight: 1, at: s + ms(500), wantRIF: 1, want: 66666667 * time.Nanosecond,
		},
		{
			name:     "the same with a 10 s probe window: level 1's 20 ms",
			opts:     []Option{WithProbeWindow(10 * time.Second)},
			reqs:     []req{{ms(280), ms(300), 1}, {s, s + ms(80), 4}, {s, s + ms(100), 6}},
			inFlight: 1, at: s + ms(500), wantRIF: 1, want: ms(20),
		},
		{
			// Report window at 12.5 s: buckets 3..12; the requests ended in
			// bucket 1.
			name: "every window past: 0",
			reqs: []req{{s, s + ms(10), 0}},
			at:   12*s + ms(500), want: 0,
		},
		{
			name: "capped at MaxProbeLatency",
			reqs: []req{{s, s + 2*time.Hour, 0}},
			at:   s + 2*time.Hour, want: balancer.MaxProbeLatency,
		},
		{
			name:     "scaled past MaxProbeLatency: capped",
			reqs:     []req{{s, s + 40*time.Minute, 0}},
			inFlight: 1, at: s + 40*time.Minute, wantRIF: 1, want: balancer.MaxProbeLatency,
		},
		{
			name:     "in flight above MaxProbeInFlight: the top level, rif capped",
			reqs:     []req{{s, s + ms(5), 1 << 20}, {s, s + ms(7), 1 << 22}},
			inFlight: 1 << 23, at: s + ms(10), wantRIF: 1 << 20, want: ms(6),
		},
		{
			name:     "in flight below 0 (an End without its Begin): rif 0",
			reqs:     []req{{s, s + ms(4), 0}},
			inFlight: -3, at: s + ms(10), wantRIF: 0, want: ms(4),
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			tr, clk := newTestTracker(t, tt.opts...)
			for _, r := range tt.reqs {
				clk.set(r.end)
				tr.inFlight.Add(1)
				tr.End(Began{at: r.begin, rif: r.rif}, false)
			}
			tr.inFlight.Store(tt.inFlight)
			clk.set(tt.at)
			rif, lat := tr.Probe()
			if rif != tt.wantRIF || lat != tt.want {
				t.Fatalf("Probe() = %d, %v; want %d, %v", rif, lat, tt.wantRIF, tt.want)
			}
		})
	}
}

// TestTrackerProbeBeginRIF: Begin records the requests in flight before
// the one it begins. A, B, C begin at 1 s, finding 0, 1 and 2 in flight
// (levels 0, 1, 2), and last 50, 40 and 30 ms; D then begins and ends at
// rif 0 (level 0), 20 ms, while E is in flight. With E and F in flight, a
// probe finds level 2 (rif 2-3): C alone, 30 ms (counting each request
// itself would put B and C there, 35 ms). F then ends at once, 0 ms at
// rif 1; with E alone, level 1 holds B and F: 20 ms.
func TestTrackerProbeBeginRIF(t *testing.T) {
	tr, clk := newTestTracker(t)
	at := func(d time.Duration) { clk.set(time.Second + d) }
	at(0)
	a, b, c := tr.Begin(), tr.Begin(), tr.Begin()
	at(30 * time.Millisecond)
	tr.End(c, false)
	at(40 * time.Millisecond)
	tr.End(b, false)
	at(50 * time.Millisecond)
	tr.End(a, false)
	at(60 * time.Millisecond)
	d := tr.Begin()
	at(80 * time.Millisecond)
	tr.End(d, false)
	e := tr.Begin()
	f := tr.Begin()
	if rif, lat := tr.Probe(); rif != 2 || lat != 30*time.Millisecond {
		t.Fatalf("two in flight: Probe() = %d, %v; want 2, 30ms", rif, lat)
	}
	tr.End(f, false) // 0 ms at rif 1: level 1 holds B's 40 and this 0
	if rif, lat := tr.Probe(); rif != 1 || lat != 20*time.Millisecond {
		t.Fatalf("one in flight: Probe() = %d, %v; want 1, 20ms (B's 40 and F's 0)", rif, lat)
	}
	tr.End(e, false)
}

// TestTrackerProbeConcurrent: 8 goroutines end 200 requests each, 3 ms
// long on the fake clock, begun at rif 0, and probe between them (run
// with -race). Level 0 alone fills, so an answer at rif r is its mean
// scaled by (r+1)/(0+1), 3 ms × (r+1), or less while a request is
// counted without its duration (a reader between End's writes), or 0
// before any completes; r is 0 to 8. After them, exactly 0 and 3 ms.
func TestTrackerProbeConcurrent(t *testing.T) {
	tr, clk := newTestTracker(t)
	clk.set(time.Second)
	done := make(chan error, 8)
	for range 8 {
		go func() {
			for range 200 {
				tr.inFlight.Add(1)
				tr.End(Began{at: time.Second - 3*time.Millisecond}, false)
				if rif, lat := tr.Probe(); rif < 0 || rif > 8 || lat < 0 || lat > 3*time.Millisecond*time.Duration(rif+1) {
					done <- fmt.Errorf("Probe() = %d, %v", rif, lat)
					return
				}
			}
			done <- nil
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	if rif, lat := tr.Probe(); rif != 0 || lat != 3*time.Millisecond {
		t.Fatalf("after: Probe() = %d, %v; want 0, 3ms", rif, lat)
	}
}

// TestTrackerProbeQueue: a server that serves one request at a time,
// S = 10 ms each, gets 8 requests at once at 1 s: the one that finds j
// ahead of it (RIF j) ends at 1 s + (j+1)·S. Its levels then hold: level
// 0 RIF 0, S; level 1 RIF 1, 2S; level 2 RIF 2-3, mean 3.5S at mean RIF
// 2.5; level 3 RIF 4-7, mean 6.5S at mean RIF 5.5. On such a server a
// request at RIF r takes (r+1)·S, so the estimate is exact where a level
// is scaled (mean duration = (mean RIF + 1)·S) and off by the level's
// spread where it is read as it is: at RIF 5 it says 6.5S for 6S.
func TestTrackerProbeQueue(t *testing.T) {
	const S = 10 * time.Millisecond
	for _, tt := range []struct {
		rif  int64
		want time.Duration
	}{
		{0, S}, {1, 2 * S}, {2, 35 * S / 10}, {3, 35 * S / 10},
		{5, 65 * S / 10}, {7, 65 * S / 10},
		{9, 10 * S},    // level 4 empty: level 3 scaled, 6.5S × 10/6.5
		{100, 101 * S}, // levels 4-7 empty: the same
	} {
		tr, clk := newTestTracker(t)
		clk.set(time.Second)
		var bs []Began
		for range 8 {
			bs = append(bs, tr.Begin())
		}
		for j, b := range bs {
			clk.set(time.Second + time.Duration(j+1)*S)
			tr.End(b, false)
		}
		tr.inFlight.Store(tt.rif)
		if rif, lat := tr.Probe(); rif != tt.rif || lat != tt.want {
			t.Errorf("RIF %d: Probe() = %d, %v; want %v", tt.rif, rif, lat, tt.want)
		}
	}
}
