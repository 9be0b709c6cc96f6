package loadreport

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Tracker keeps one server's load: its requests in flight, the requests
// and errors completed per second over a sliding window, the mean
// duration of the requests completed in that window, and the CPU, memory
// and application utilization the server sets; and, to answer probes
// (Probe), the recent latencies by the load each request found. The
// Middleware and the gRPC interceptors (module loadreport/grpcreport)
// count their requests in a Tracker and report what it holds; several of
// them may share one.
//
// Begin and End bracket a request; they take no lock and allocate
// nothing. A Tracker is safe for concurrent use.
type Tracker struct {
	now         func() time.Time
	start       time.Time
	utilization func() float64 // nil: app's value
	concurrency int            // WithConcurrency's n; 0: app's value

	inFlight   atomic.Int64
	reqs, errs rateWindow
	lat        latencyWindow
	byLevel    latencyByLevel // what a probe is answered with
	cpu        atomic.Uint64  // float64 bits
	mem        atomic.Uint64  // float64 bits
	app        atomic.Uint64  // float64 bits
}

// NewTracker returns a Tracker. It accepts WithClock, WithWindow,
// WithProbeWindow, WithUtilization and WithConcurrency; any other option
// fails with ErrInvalidOption.
func NewTracker(opts ...Option) (*Tracker, error) {
	s := defaultSettings()
	if err := s.apply(opts); err != nil {
		return nil, err
	}
	if s.httpOpt != "" {
		return nil, fmt.Errorf("%w: %s is a Middleware option, not a Tracker's", ErrInvalidOption, s.httpOpt)
	}
	return newTracker(&s), nil
}

func newTracker(s *settings) *Tracker {
	t := &Tracker{now: s.now, utilization: s.utilization, concurrency: s.concurrency}
	t.reqs.width, t.errs.width, t.lat.width = s.width, s.width, s.width
	t.byLevel.setWidth(s.probeWidth)
	t.start = t.now()
	return t
}

// Began is when a request began, and at what load, as Begin returns it
// for End.
type Began struct {
	at  time.Duration // since the Tracker's start
	rif int64         // the requests in flight before it
}

// Begin counts a request in flight and returns when it began.
func (t *Tracker) Begin() Began {
	n := t.inFlight.Add(1)
	return Began{at: t.elapsed(), rif: n - 1}
}

// End counts the request b began as completed, an error if failed: it
// leaves the requests in flight and enters the window's requests, errors
// and latencies. Each Begin takes one End.
func (t *Tracker) End(b Began, failed bool) {
	e := t.elapsed()
	t.reqs.add(e)
	if failed {
		t.errs.add(e)
	}
	t.lat.add(e, e-b.at)
	t.byLevel.add(e, b.rif, e-b.at)
	t.inFlight.Add(-1)
}

func (t *Tracker) elapsed() time.Duration { return t.now().Sub(t.start) }

// SetCPUUtilization sets cpu_utilization, a fraction of the CPU the
// server has (may exceed 1 where the server may use more than its share).
// A NaN, infinite or negative v is refused with ErrInvalidOption.
func (t *Tracker) SetCPUUtilization(v float64) error { return setUtil(&t.cpu, "CPU", v) }

// SetMemUtilization sets mem_utilization, as SetCPUUtilization.
func (t *Tracker) SetMemUtilization(v float64) error { return setUtil(&t.mem, "memory", v) }

// SetApplicationUtilization sets application_utilization, as
// SetCPUUtilization. WithUtilization's function or WithConcurrency, if
// given, overrides it.
func (t *Tracker) SetApplicationUtilization(v float64) error {
	return setUtil(&t.app, "application", v)
}

func setUtil(a *atomic.Uint64, what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s utilization %v", ErrInvalidOption, what, v)
	}
	if v == 0 {
		v = 0 // -0 would be sent as "-0"
	}
	a.Store(math.Float64bits(v))
	return nil
}

// InFlight returns the requests in flight: begun and not ended.
func (t *Tracker) InFlight() int64 { return t.inFlight.Load() }

// RPS returns the requests completed per second over the window, the
// report's rps_fractional.
func (t *Tracker) RPS() float64 { return t.reqs.rate(t.elapsed()) }

// LatencyMs returns the mean duration of the requests completed in the
// window, in milliseconds, or 0 if none did: the report's
// named_metrics.latency_ms.
func (t *Tracker) LatencyMs() float64 { return t.latencyMs(t.elapsed()) }

// latencyMs reads the sum before the count: End adds to the count first,
// so a request ending between the two reads is at worst counted without
// its duration (a mean a little low), never the reverse.
func (t *Tracker) latencyMs(e time.Duration) float64 {
	sum := t.lat.sum(e)
	return meanMs(sum, t.reqs.count(e))
}

func meanMs(sum time.Duration, n uint64) float64 {
	if n == 0 {
		return 0
	}
	return float64(sum) / float64(time.Millisecond) / float64(n)
}

// Snapshot returns the load a report made now carries.
func (t *Tracker) Snapshot() Snapshot {
	e := t.elapsed()
	app := math.Float64frombits(t.app.Load())
	if t.utilization != nil {
		app = t.utilization()
		if math.IsNaN(app) || math.IsInf(app, 0) || app <= 0 {
			app = 0 // also turns -0 into 0
		}
	}
	sum := t.lat.sum(e) // before the count, as latencyMs reads them
	n := t.reqs.count(e)
	rps, lat := t.reqs.perSecond(n, e), meanMs(sum, n)
	if t.concurrency > 0 {
		app = busy(rps, lat, t.concurrency)
	}
	return Snapshot{
		CPUUtilization:         math.Float64frombits(t.cpu.Load()),
		MemUtilization:         math.Float64frombits(t.mem.Load()),
		ApplicationUtilization: app,
		RPSFractional:          rps,
		EPS:                    t.errs.rate(e),
		InFlight:               float64(max(0, t.inFlight.Load())), // below 0 only after an End without its Begin
		LatencyMs:              lat,
	}
}

// Report returns the report a response written now would carry.
func (t *Tracker) Report() Report { return t.Snapshot().Report() }
