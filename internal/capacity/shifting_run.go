package capacity

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
)

// Running a Shifting scenario: the fleets driven at once (RunShifting),
// what each measured (ShiftResult), and the runs again while the machine
// is too busy (RunQuiet).

// ShiftResult is what one fleet's run of a Shifting scenario measured,
// over the requests that arrived in [Warm, Warm+Measure).
type ShiftResult struct {
	N        int           // requests
	Timeouts int           // given up after Timeout: counted in the latencies at what they waited
	Errs     []error       // other failures: counted nowhere else
	P50, P99 time.Duration // of the requests that did not fail otherwise
	Mean     time.Duration
	Shares   []float64 // each server's share of the requests answered
}

// ShiftRun is what a run of a Shifting scenario measured: each fleet's
// result, and how late the arrivals went out, the machine's scheduling
// noise (a late timer delays every fleet's request alike).
type ShiftRun struct {
	Fleets           []ShiftResult
	LateP50, LateP99 time.Duration // of the arrivals' lateness behind their times
	LateMax          time.Duration
}

// RunShifting drives every fleet at once on sc's schedule: the same
// arrivals (each client's request goes to every fleet's client of that
// number at the same moment) and the same redraws (applied to every
// fleet's server of that number at once), so that the pickers share the
// machine's moments. fleets' NewCall(c) is client c's request, called
// from many goroutines at once; a failure taking at least sc.Timeout
// counts as the client giving up. RunShifting returns once every request
// has ended, each within the clients' timeout.
func RunShifting(ctx context.Context, fleets []*Fleet, sc Shifting) ShiftRun {
	start := time.Now()
	late := make([][]time.Duration, sc.Clients)
	calls := make([][]func() (string, error), len(fleets))
	for i, f := range fleets {
		f.samples = make([][]Sample, sc.Clients)
		for c := range sc.Clients {
			calls[i] = append(calls[i], f.NewCall(c))
		}
	}
	var wg sync.WaitGroup
	wg.Go(func() { applyChanges(ctx, start, fleets, sc.Changes()) })
	for c := range sc.Clients {
		arr := sc.Arrivals(c)
		for _, f := range fleets {
			f.samples[c] = make([]Sample, len(arr))
		}
		wg.Go(func() {
			var reqs sync.WaitGroup
			defer reqs.Wait()
			tm := time.NewTimer(0)
			defer tm.Stop()
			for k, at := range arr {
				tm.Reset(time.Until(start.Add(at)))
				select {
				case <-tm.C:
				case <-ctx.Done():
					return
				}
				late[c] = append(late[c], time.Since(start.Add(at)))
				for i, f := range fleets {
					s := &f.samples[c][k]
					call := calls[i][c]
					reqs.Go(func() {
						t0 := time.Now()
						server, err := call()
						*s = Sample{Began: at, Lat: time.Since(t0), Server: server, Err: err}
						if err != nil {
							s.Server = ""
						}
					})
				}
			}
		})
	}
	wg.Wait()
	var out ShiftRun
	for _, f := range fleets {
		out.Fleets = append(out.Fleets, f.shiftResult(sc))
	}
	all := slices.Concat(late...)
	out.LateP50, out.LateP99 = Percentile(all, 0.5), Percentile(all, 0.99)
	if len(all) > 0 {
		out.LateMax = slices.Max(all)
	}
	return out
}

// applyChanges sets each change's mean on that server of every fleet at
// its time, until the last or ctx's end.
func applyChanges(ctx context.Context, start time.Time, fleets []*Fleet, changes []Change) {
	tm := time.NewTimer(0)
	defer tm.Stop()
	for _, ch := range changes {
		tm.Reset(time.Until(start.Add(ch.At)))
		select {
		case <-tm.C:
		case <-ctx.Done():
			return
		}
		for _, f := range fleets {
			f.Servers[ch.Server].SetMean(ch.Mean)
		}
	}
}

// shiftResult counts the requests that arrived in the measured window.
// A sample never sent (ctx ended first) has Lat 0 and no server or error:
// it is skipped.
func (f *Fleet) shiftResult(sc Shifting) ShiftResult {
	var res ShiftResult
	per := map[string]int{}
	var lats []time.Duration
	var sum time.Duration
	answered := 0
	for _, ss := range f.samples {
		for _, s := range ss {
			if s.Began < sc.Warm || s.Began >= sc.End() || (s.Lat == 0 && s.Err == nil && s.Server == "") {
				continue
			}
			res.N++
			switch {
			case s.Err == nil:
				per[s.Server]++
				answered++
			case s.Lat >= sc.Timeout:
				res.Timeouts++
			default:
				res.Errs = append(res.Errs, s.Err)
				continue
			}
			lats = append(lats, s.Lat)
			sum += s.Lat
		}
	}
	res.P50, res.P99 = Percentile(lats, 0.5), Percentile(lats, 0.99)
	if len(lats) > 0 {
		res.Mean = sum / time.Duration(len(lats))
	}
	for _, s := range f.Servers {
		res.Shares = append(res.Shares, float64(per[s.Name])/math.Max(float64(answered), 1))
	}
	return res
}

// MaxLate is the arrivals' p99 lateness above which a run is too noisy to
// compare pickers by: 60 ms, three quarters of Fleet16's mean service
// time. On a quiet machine the p99 is 3–5 ms; when other programs take
// both cores for a while it reaches 150 ms to 750 ms, every fleet's
// requests pile up behind the stalled timers (open loop: the late
// arrivals then go out at once) and every picker's p99 becomes the
// machine's.
const MaxLate = 60 * time.Millisecond

// Tries is how many runs the tests let RunQuiet make at most.
const Tries = 3

// RunQuiet runs sc on the fleets newFleets makes, again on fresh fleets
// while a run's arrivals were later than MaxLate at the p99, at most
// tries runs, logging each noisy one; it returns the last run and whether
// it was quiet.
func RunQuiet(ctx context.Context, logf func(string, ...any), tries int, newFleets func() []*Fleet, sc Shifting) (ShiftRun, bool) {
	var run ShiftRun
	for try := 1; try <= tries; try++ {
		run = RunShifting(ctx, newFleets(), sc)
		logf("run %d: arrivals late behind their times: median %v, p99 %v, max %v", try, run.LateP50, run.LateP99, run.LateMax)
		if run.LateP99 <= MaxLate {
			return run, true
		}
		logf("run %d too noisy (p99 lateness above %v): %s", try, MaxLate, run.Summary())
	}
	return run, false
}

// Summary is one line of each fleet's p99, in the fleets' order.
func (r ShiftRun) Summary() string {
	var b strings.Builder
	for i, f := range r.Fleets {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "p99 %v", f.P99.Round(time.Millisecond))
	}
	return b.String()
}
