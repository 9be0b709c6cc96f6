package sim

import (
	"math"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// allocated returns the bytes f allocates, garbage included.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

func uniformWith(mod func(*Scenario)) Scenario {
	s, _ := Lookup("uniform")
	mod(&s)
	return s
}

// TestRunRefuses gives Run scenarios that make no sense, or whose memory or
// requests pass the bounds: each must fail with the right sentinel, before
// allocating the run (these ran out of memory, ran for minutes, ran the
// default silently or overflowed the virtual clock).
func TestRunRefuses(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Scenario)
		want error
		msg  string
	}{
		{"duration 100000h", func(s *Scenario) { s.Duration = 100000 * time.Hour }, ErrTooLarge, "requests expected"},
		{"load 1e9", func(s *Scenario) { s.Load = 1e9 }, ErrTooLarge, "requests expected"},
		{"rate 1e12", func(s *Scenario) { s.Rate = 1e12 }, ErrTooLarge, "requests expected"},
		{"1e8 clients", func(s *Scenario) { s.Clients = 1e8 }, ErrTooLarge, "for every client's peers and picker"},
		{"jitter every 1ns", func(s *Scenario) { s.Jitter = Jitter{Every: 1, Lo: 1, Hi: 3} }, ErrTooLarge, "for the jitter schedule"},
		{"a few requests over 10,000 h", func(s *Scenario) { s.Rate, s.Duration = 1e-3, 10000*time.Hour }, ErrTooLarge, "for the attempt counts"},
		{"a billion workers", func(s *Scenario) { s.Rate, s.Backends[0].Workers = 100, 1e9 }, ErrTooLarge, "for the backends' workers"},
		{"timeout past the clock", func(s *Scenario) { s.Timeout = math.MaxInt64 / 4 }, ErrInvalid, "pass the virtual clock"},
		{"duration past the clock", func(s *Scenario) { s.Duration = math.MaxInt64 }, ErrInvalid, "pass the virtual clock"},
		{"rate NaN", func(s *Scenario) { s.Rate = math.NaN() }, ErrInvalid, "rate NaN"},
		{"rate -1", func(s *Scenario) { s.Rate = -1 }, ErrInvalid, "rate -1"},
		{"rate +Inf", func(s *Scenario) { s.Rate = math.Inf(1) }, ErrInvalid, "rate +Inf"},
		{"load NaN", func(s *Scenario) { s.Load = math.NaN() }, ErrInvalid, "load NaN"},
		{"load +Inf", func(s *Scenario) { s.Load = math.Inf(1) }, ErrInvalid, "load +Inf"},
		{"load 0", func(s *Scenario) { s.Load = 0 }, ErrInvalid, "load 0"},
		{"duration 0", func(s *Scenario) { s.Duration = 0 }, ErrInvalid, "duration 0s"},
		{"clients -3", func(s *Scenario) { s.Clients = -3 }, ErrInvalid, "client count -3"},
		{"timeout -1s", func(s *Scenario) { s.Timeout = -time.Second }, ErrInvalid, "timeout -1s"},
		{"jitter every -1s", func(s *Scenario) { s.Jitter = Jitter{Every: -time.Second, Lo: 1, Hi: 3} }, ErrInvalid, "bad jitter"},
		{"jitter Hi NaN", func(s *Scenario) { s.Jitter = Jitter{Every: time.Second, Lo: 1, Hi: math.NaN()} }, ErrInvalid, "bad jitter"},
		{"jitter Hi +Inf", func(s *Scenario) { s.Jitter = Jitter{Every: time.Second, Lo: 1, Hi: math.Inf(1)} }, ErrInvalid, "bad jitter"},
		{"sigma +Inf", func(s *Scenario) { s.Backends[0].Sigma = math.Inf(1) }, ErrInvalid, "bad parameters"},
	}
	pol := policy(t, "SmoothWRR")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := uniformWith(tt.mod)
			var err error
			n := allocated(func() { _, err = Run(&s, pol, 1) })
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Contains(t, err.Error(), `scenario "uniform"`)
			assert.Less(t, n, uint64(64<<10), "allocated %d bytes before refusing", n)
			assert.Equal(t, err, s.Validate())
		})
	}
}

func TestCompareRefuses(t *testing.T) {
	good, _ := Lookup("uniform")
	bad := uniformWith(func(s *Scenario) { s.Duration = 100000 * time.Hour })
	pols := []Policy{policy(t, "SmoothWRR")}
	tests := []struct {
		name string
		scs  []Scenario
		o    Options
		want error
		msg  string
	}{
		{"negative seeds", []Scenario{good}, Options{Seeds: -1}, ErrInvalid, "negative Seeds -1"},
		{"negative parallel", []Scenario{good}, Options{Parallel: -4}, ErrInvalid, "Parallel -4"},
		{"a billion seeds", []Scenario{good}, Options{Seeds: 1e9}, ErrTooLarge, "requests expected over 1000000000 runs"},
		// 40 runs of a long, sparse scenario: few requests, but each
		// keeps 57.6 MB of per-bucket counts.
		{"kept results", []Scenario{uniformWith(func(s *Scenario) { s.Rate, s.Duration = 1, 20*time.Hour })}, Options{Seeds: 40}, ErrTooLarge, "bytes expected for 40 runs"},
		// The bad scenario is refused before the good one runs.
		{"one bad scenario", []Scenario{good, bad}, Options{Seeds: 3}, ErrTooLarge, `scenario "uniform"`},
		{"no constructor", []Scenario{good}, Options{}, ErrInvalid, `policy "none" has no constructor`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := pols
			if tt.name == "no constructor" {
				p = []Policy{{Name: "none"}}
			}
			var err error
			n := allocated(func() { _, err = Compare(tt.scs, p, tt.o) })
			require.ErrorIs(t, err, tt.want)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Less(t, n, uint64(64<<10), "allocated %d bytes before refusing", n)
		})
	}
}

// TestCostBoundsAllocation runs scenarios in which each part of Cost.Bytes
// dominates, with the garbage collector off, and checks that the run
// allocates no more than the estimate (so its peak memory is below it) and
// at least a third of it (so the estimate does not refuse runs that would
// fit by much).
func TestCostBoundsAllocation(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("allocates a few hundred MB: skipped with -short and -race")
	}
	stall := func(s *Scenario) {
		for i := range s.Backends {
			s.Backends[i].Faults = []Fault{{From: 0, To: time.Hour, Mode: Stall, Prob: 1}}
		}
		s.Rate, s.Duration, s.Timeout, s.Tries = 20000, 10*time.Second, 20*time.Second, 1
	}
	tests := []struct {
		name, most string
		mod        func(*Scenario)
	}{
		{"per-bucket counts", "the attempt counts", func(s *Scenario) { s.Rate, s.Duration = 0.05, 5*time.Hour }},
		{"latencies", "the latency of every request", func(s *Scenario) { s.Load, s.Duration, s.Tries = 0.5, 1000*time.Second, 1 }},
		{"clients", "every client's peers and picker", func(s *Scenario) { s.Clients, s.Rate, s.Duration = 20000, 10, 10*time.Second }},
		{"jitter", "the jitter schedule", func(s *Scenario) {
			s.Jitter, s.Duration = Jitter{Every: 100 * time.Microsecond, Lo: 1, Hi: 3}, 20*time.Second
		}},
		{"in flight", "the requests in flight", stall},
	}
	for _, tt := range tests {
		for _, pol := range []string{"SmoothWRR", "FastestFirst"} {
			t.Run(tt.name+"/"+pol, func(t *testing.T) {
				s := uniformWith(tt.mod)
				c := s.Cost()
				require.True(t, strings.HasPrefix(c.most, tt.most), "the case tests another part: %s", c.most)
				require.NoError(t, s.Validate())
				p := policy(t, pol)
				runtime.GC()
				old := debug.SetGCPercent(-1)
				var err error
				n := allocated(func() { _, err = Run(&s, p, 1) })
				debug.SetGCPercent(old)
				runtime.GC()
				require.NoError(t, err)
				t.Logf("estimate %.0f bytes, allocated %d (%.3f)", c.Bytes, n, float64(n)/c.Bytes)
				assert.LessOrEqual(t, float64(n), c.Bytes, "the run allocated more than Cost.Bytes")
				assert.GreaterOrEqual(t, float64(n), c.Bytes/3, "Cost.Bytes is more than 3 times what the run allocated")
			})
		}
	}
}

// TestBoundsAgainstBuiltins backs the ratios MaxRequests and
// MaxCompareRequests state against the built-in scenarios, and checks that
// every built-in comparison of the command (every policy, 3 seeds) fits.
func TestBoundsAgainstBuiltins(t *testing.T) {
	var largest, total float64
	scs := Scenarios()
	for i := range scs {
		require.NoError(t, scs[i].Validate())
		r := scs[i].Cost().Requests
		largest = max(largest, r)
		total += r * float64(len(scs[i].Policies(Policies()))) * 3 // a guard scenario runs its own few
	}
	assert.InDelta(t, 280, MaxRequests/largest, 1, "MaxRequests over the largest built-in scenario")
	assert.Greater(t, MaxCompareRequests/total, 15.0, "MaxCompareRequests over the default comparison")
	assert.NoError(t, checkCompare(scs, len(Policies()), 3, runtime.GOMAXPROCS(0)))
	assert.NoError(t, checkCompare(scs, len(Policies()), 3, 64))
}

func TestChecksRefusesTau(t *testing.T) {
	for _, tau := range []time.Duration{0, -time.Second} {
		_, err := (&Report{}).Checks("a", "b", tau)
		assert.ErrorIs(t, err, ErrInvalid, "tau %v", tau)
	}
}
