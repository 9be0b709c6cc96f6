package loadreport

import (
	"errors"
	"fmt"
	"time"
)

// ErrInvalidOption: an option to NewTracker or New, or a utilization set,
// is out of range, or an option was given where it does not apply.
var ErrInvalidOption = errors.New("loadreport: invalid option")

// Option configures NewTracker or New. WithClock, WithWindow,
// WithProbeWindow, WithUtilization and WithConcurrency configure the
// Tracker; WithFormat, WithErrorStatus, WithProbePath and WithTracker the
// Middleware. New accepts both kinds unless given WithTracker, whose
// Tracker has its settings already; NewTracker accepts only the
// Tracker's.
type Option func(*settings) error

// settings collects the options of both constructors.
type settings struct {
	// The Tracker's.
	now         func() time.Time
	width       time.Duration // of a window's bucket
	probeWidth  time.Duration // of a bucket of the latency by RIF level
	utilization func() float64
	concurrency int    // WithConcurrency's n; 0: not given
	trackerOpt  string // the first Tracker option given, for errors

	// The Middleware's.
	format    Format
	isError   func(int) bool
	probePath string
	tracker   *Tracker
	httpOpt   string // the first Middleware option given, for errors
}

func defaultSettings() settings {
	return settings{
		now:        time.Now,
		width:      10 * time.Second / windowBuckets,
		probeWidth: time.Second / windowBuckets,
		isError:    func(s int) bool { return s >= 500 },
		probePath:  DefaultProbePath,
	}
}

func (s *settings) apply(opts []Option) error {
	for _, o := range opts {
		if err := o(s); err != nil {
			return err
		}
	}
	if s.concurrency > 0 && s.utilization != nil {
		return fmt.Errorf("%w: WithConcurrency(%d) and WithUtilization both set the utilization", ErrInvalidOption, s.concurrency)
	}
	return nil
}

func (s *settings) trackerOption(name string) {
	if s.trackerOpt == "" {
		s.trackerOpt = name
	}
}

func (s *settings) httpOption(name string) {
	if s.httpOpt == "" {
		s.httpOpt = name
	}
}

// WithClock makes the Tracker read time from now (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *settings) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		s.now = now
		s.trackerOption("WithClock")
		return nil
	}
}

// WithWindow sets the window requests, errors and latencies are counted
// over, at least 10 ms. Default: 10 s.
func WithWindow(d time.Duration) Option {
	return func(s *settings) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: WithWindow(%v), at least 10ms", ErrInvalidOption, d)
		}
		s.width = d / windowBuckets
		s.trackerOption("WithWindow")
		return nil
	}
}

// WithProbeWindow sets the window over which the Tracker keeps the
// latencies by RIF level that it answers probes with (see
// Tracker.Probe), at least 10 ms. Default: 1 s.
func WithProbeWindow(d time.Duration) Option {
	return func(s *settings) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: WithProbeWindow(%v), at least 10ms", ErrInvalidOption, d)
		}
		s.probeWidth = d / windowBuckets
		s.trackerOption("WithProbeWindow")
		return nil
	}
}

// WithUtilization makes the Tracker call f for application_utilization
// on every report, in place of SetApplicationUtilization's value. f must
// be safe for concurrent use and fast; a NaN, infinite or negative result
// is reported as 0. It may call the Tracker's RPS, InFlight and
// LatencyMs (not Snapshot or Report, which call f). A nil f is refused.
func WithUtilization(f func() float64) Option {
	return func(s *settings) error {
		if f == nil {
			return fmt.Errorf("%w: WithUtilization(nil)", ErrInvalidOption)
		}
		s.utilization = f
		s.trackerOption("WithUtilization")
		return nil
	}
}

// WithFormat sets the Middleware's header format. Default: Text, the
// format vLLM emits and the one a person reads in a trace.
func WithFormat(f Format) Option {
	return func(s *settings) error {
		if f > Binary {
			return fmt.Errorf("%w: WithFormat(%v)", ErrInvalidOption, f)
		}
		s.format = f
		s.httpOption("WithFormat")
		return nil
	}
}

// WithErrorStatus sets which final statuses the Middleware counts as
// errors (eps). Default: 500 and above.
func WithErrorStatus(isError func(status int) bool) Option {
	return func(s *settings) error {
		if isError == nil {
			return fmt.Errorf("%w: WithErrorStatus(nil)", ErrInvalidOption)
		}
		s.isError = isError
		s.httpOption("WithErrorStatus")
		return nil
	}
}

// WithTracker makes the Middleware count its requests in t and report
// t's load, so that several handlers, or HTTP and gRPC on one server,
// report one load. Default: a Tracker of the Middleware's own, made from
// New's Tracker options.
func WithTracker(t *Tracker) Option {
	return func(s *settings) error {
		if t == nil {
			return fmt.Errorf("%w: WithTracker(nil)", ErrInvalidOption)
		}
		s.tracker = t
		s.httpOption("WithTracker")
		return nil
	}
}
