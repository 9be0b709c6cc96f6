package capacity

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Shifting is the herding scenario, the simulator's fleet16 on real
// servers: Servers servers of Workers workers each, whose mean service
// time is redrawn from U[Lo, Hi] at intervals drawn from
// U[Every−Spread, Every+Spread], each server on its own schedule; Clients
// independent clients, each with its own picker, sending requests at
// Poisson times (open loop: a request does not wait for the previous one)
// at Load times the nominal capacity in all, each giving up after Timeout.
// A client sees a server's speed only through its own 1/Clients of the
// traffic, so the pickers that judge by their own replies follow each
// other onto whichever server looked fast (they herd).
//
// The schedule and the arrivals follow from Seed: every fleet of a run,
// and every run, gets the same ones.
type Shifting struct {
	Servers, Workers, Clients int
	Lo, Hi                    time.Duration // the range of a server's mean service time
	Every, Spread             time.Duration // the intervals between its redraws
	Load                      float64       // of the nominal capacity, NominalRate
	Warm, Measure             time.Duration // the measured requests begin in [Warm, Warm+Measure)
	Timeout                   time.Duration // the clients give up after it
	Seed                      uint64
}

// Fleet16 is the scenario the end-to-end tests run: the simulator's
// fleet16 (ten servers of one worker, sixteen clients, load 0.75, means
// redrawn from [Lo, 3 Lo] at gaps within Every ± 75%) with service
// times four times its own, means in [40 ms, 120 ms], and redraws twice
// as far apart, every 0.5–3.5 s (so the speeds shift after 25 mean
// services rather than 50: a run of 23 s sees 11 redraws a server), and
// lognormal service times of shape Sigma rather than exponential. On
// that scale a busy machine's late timers (3–5 ms at the p99 when it is
// quiet, tens of milliseconds when the other programs take both cores)
// stay small beside the services, and the process's own load (requests
// and probes over loopback) stays low. The nominal capacity is
// 10 × 1 / 80 ms = 125 requests a second, the arrivals 93.75 a second,
// 5.9 a client: in the 20 s measured about 1875 requests, so a p99 is
// about the 19th longest.
var Fleet16 = Shifting{
	Servers: 10, Workers: 1, Clients: 16,
	Lo: 40 * time.Millisecond, Hi: 120 * time.Millisecond,
	Every: 2 * time.Second, Spread: 1500 * time.Millisecond,
	Load: 0.75,
	Warm: 3 * time.Second, Measure: 20 * time.Second,
	Timeout: 6 * time.Second,
	Seed:    1,
}

// Slower returns sc with its service times, redraw gaps, warm-up and
// timeout k times longer, and so its arrivals k times fewer a second, the
// measured window kept: a run of the same length with 1/k of the
// requests, for a process slowed by the race detector.
func (sc Shifting) Slower(k int) Shifting {
	d := time.Duration(k)
	sc.Lo, sc.Hi, sc.Every, sc.Spread = d*sc.Lo, d*sc.Hi, d*sc.Every, d*sc.Spread
	sc.Warm, sc.Timeout = d*sc.Warm, d*sc.Timeout
	return sc
}

// NominalRate is the servers' capacity in requests a second at the middle
// of the means' range: Servers × Workers / ((Lo+Hi)/2), as the simulator
// counts fleet16's. (Averaged over the redraws a server serves
// Workers × E[1/mean], ln(Hi/Lo)/(Hi−Lo) per worker: 1.10 times more
// for Hi = 3 Lo, so the load is nearer 0.68 of it.)
func (sc Shifting) NominalRate() float64 {
	return float64(sc.Servers*sc.Workers) / ((sc.Lo + sc.Hi) / 2).Seconds()
}

// Rate is the arrivals a second, all clients together.
func (sc Shifting) Rate() float64 { return sc.Load * sc.NominalRate() }

// End is when the last arrival may come, since the run began.
func (sc Shifting) End() time.Duration { return sc.Warm + sc.Measure }

// Change is one redraw: server Server's mean becomes Mean at At.
type Change struct {
	At     time.Duration // since the run began
	Server int
	Mean   time.Duration
}

// Specs returns the servers, each with its mean at the start: s0, s1, …
func (sc Shifting) Specs() []Spec {
	out := make([]Spec, sc.Servers)
	for i := range out {
		rng := sc.serverRand(i)
		out[i] = Spec{Name: "s" + strconv.Itoa(i), Workers: sc.Workers, Mean: sc.drawMean(rng), Seed: sc.Seed*1000 + uint64(i)}
	}
	return out
}

// Changes returns every server's redraws until End, in time order.
func (sc Shifting) Changes() []Change {
	var out []Change
	for i := range sc.Servers {
		rng := sc.serverRand(i)
		sc.drawMean(rng) // the start's, Specs's
		at := time.Duration(0)
		for {
			at += sc.Every - sc.Spread + time.Duration(rng.Int64N(int64(2*sc.Spread)+1))
			if at >= sc.End() {
				break
			}
			out = append(out, Change{At: at, Server: i, Mean: sc.drawMean(rng)})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int { return int(a.At - b.At) })
	return out
}

// Arrivals returns client c's request times until End: a Poisson process
// of rate Rate/Clients, so that all clients' together are one of rate
// Rate.
func (sc Shifting) Arrivals(c int) []time.Duration {
	rng := rand.New(rand.NewPCG(sc.Seed, 2000+uint64(c)))
	per := sc.Rate() / float64(sc.Clients)
	var out []time.Duration
	at := 0.0
	for {
		at += rng.ExpFloat64() / per
		d := time.Duration(at * float64(time.Second))
		if d >= sc.End() {
			return out
		}
		out = append(out, d)
	}
}

func (sc Shifting) serverRand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(sc.Seed, 1000+uint64(i)))
}

func (sc Shifting) drawMean(rng *rand.Rand) time.Duration {
	return sc.Lo + time.Duration(rng.Int64N(int64(sc.Hi-sc.Lo)+1))
}

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
