package sim

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"
)

// Bounds on what Run and Compare take on. Both refuse a scenario whose
// expected cost passes them before allocating anything for it, with an
// error wrapping ErrTooLarge that gives the estimate (see Cost).
const (
	// MaxRequests bounds the expected requests of one run: its arrival
	// rate times its duration, 280 times the largest built-in scenario.
	MaxRequests = 20_000_000
	// MaxCompareRequests bounds the expected requests of one Compare,
	// summed over its runs: more than 15 times every built-in scenario
	// with the pickers and oracles it runs, with 3 seeds.
	MaxCompareRequests = 500_000_000
	// MaxBytes bounds the memory one run is expected to use, and the
	// memory of a Compare: the results it keeps and its runs at once.
	MaxBytes = 2 << 30
)

var (
	// ErrInvalid is wrapped by the errors for a scenario or options that
	// make no sense: a duration that is not positive, a negative count, a
	// load or rate that is not a positive finite number.
	ErrInvalid = errors.New("sim: invalid configuration")
	// ErrTooLarge is wrapped by the errors for a run or comparison whose
	// expected cost passes MaxRequests, MaxCompareRequests or MaxBytes.
	ErrTooLarge = errors.New("sim: too large")
)

// configError is an error with its own message that wraps a sentinel
// without repeating its text.
type configError struct {
	msg string
	err error
}

func (e *configError) Error() string { return e.msg }
func (e *configError) Unwrap() error { return e.err }

func invalid(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...), ErrInvalid}
}

func tooLarge(format string, args ...any) error {
	return &configError{fmt.Sprintf(format, args...), ErrTooLarge}
}

// Cost is what one run of a scenario is expected to take.
//
// The zero value is no cost. A Cost is a plain value, safe to share.
type Cost struct {
	// Requests is the expected number of arrivals: the arrival rate times
	// the duration. Each is one event, and one more per attempt.
	Requests float64
	// Bytes is the memory the run is expected to use at most: the
	// per-bucket counts and weights it keeps in its Result, the latencies
	// of its requests (twice over for those in a guard scenario's
	// windows), the herd samples, the jitter schedule, every
	// client's peers and picker, the requests in flight.
	Bytes float64
	// Kept is the part of Bytes the Result keeps after the run.
	Kept float64

	// most names the largest part of Bytes, for the error past MaxBytes.
	most      string
	mostBytes float64
}

// Sizes behind Cost, in bytes. Each is an upper bound measured on the
// library's pickers (about 400 to 630 bytes per peer and client with 10 or
// 100 backends); TestCostBoundsAllocation checks them against the
// allocations of real runs.
const (
	bytesPerClientPeer = 768 // a Peer, its index entry and the picker's state for it
	bytesPerClient     = 1024
	bytesPerInFlight   = 7 * (unsafe.Sizeof(request{}) + unsafe.Sizeof(event{}) + 4) // with the garbage of growing its slices
	bytesPerRedraw     = 6 * 8                                                       // a jitter step: times, factors, the merged schedule
	bytesResult        = 2048                                                        // a Result without its per-bucket slices
)

// poissonCap is a capacity that n Poisson arrivals of mean m stay below but
// for a chance under 1e-9: the mean plus six standard deviations.
func poissonCap(m float64) float64 { return m + 6*math.Sqrt(m) + 16 }

// attempts returns the most attempts a request makes: Tries, but never
// more than one per backend, since a request tries each peer once.
func (s *Scenario) attempts() int {
	if s.Tries == 0 || s.Tries > len(s.Backends) {
		return len(s.Backends)
	}
	return s.Tries
}

// horizon returns, in nanoseconds, when the last request can end: every
// arrival comes before Duration and each of its attempts ends within the
// timeout, and on the server at most a round trip after it.
func (s *Scenario) horizon() float64 {
	return float64(s.Duration) + (float64(orDefault(s.Timeout, DefaultTimeout))+float64(s.maxRTT()))*float64(s.attempts())
}

// maxRTT returns the longest round trip to a backend.
func (s *Scenario) maxRTT() time.Duration {
	var m time.Duration
	for _, b := range s.Backends {
		m = max(m, b.RTT)
	}
	return m
}

// Cost returns what a run of s is expected to take. It assumes s is valid
// (Run checks that first) and does not allocate.
func (s *Scenario) Cost() Cost {
	r, err := s.rate()
	if err != nil || !(r > 0) {
		r = 0
	}
	dur := float64(s.Duration)
	n := float64(len(s.Backends))
	var c Cost
	c.Requests = r * dur / float64(time.Second)
	add := func(what string, bytes float64) {
		c.Bytes += bytes
		if bytes > c.mostBytes {
			c.most, c.mostBytes = what, bytes
		}
	}
	buckets := math.Ceil(dur / float64(Bucket))
	c.Kept = 2*4*buckets*n + bytesResult
	add("the attempt counts and weights of every backend per 100 ms", c.Kept)
	add("the latency of every request", 8*poissonCap(c.Requests))
	add("the herd samples, one per 10 ms", 8*(dur/float64(sampleEvery)+1))
	if s.Measure != NoMeasure {
		win := poissonCap(r * s.Window.seconds())
		if s.Measure == WindowP99 {
			win += poissonCap(r * s.Before.seconds())
		}
		add("the latencies of the requests in the measured windows", 8*win)
	}
	if e := s.Jitter.Every; e > 0 {
		var phases float64
		for _, b := range s.Backends {
			phases += float64(len(b.Phases))
		}
		add("the jitter schedule", bytesPerRedraw*(n*poissonCap(s.horizon()/float64(e))+2*phases))
	}
	var workers float64
	for _, b := range s.Backends {
		workers += float64(b.Workers)
	}
	add("the backends' workers", n*float64(unsafe.Sizeof(backendState{}))+8*workers)
	k := float64(orDefault(s.Clients, 1))
	add("every client's peers and picker", k*(bytesPerClient+bytesPerClientPeer*n))
	// Little's law: each request is in flight at most attempts × timeout.
	inFlight := r * float64(orDefault(s.Timeout, DefaultTimeout)) / float64(time.Second) * float64(s.attempts())
	add("the requests in flight", float64(bytesPerInFlight)*poissonCap(min(inFlight, c.Requests)))
	return c
}

// checkCost refuses a run whose Cost passes MaxRequests or MaxBytes.
func (s *Scenario) checkCost() error {
	c := s.Cost()
	switch {
	case c.Requests > MaxRequests:
		return tooLarge("sim: scenario %q: %.3g requests expected (%.4g/s for %v), more than MaxRequests (%d)",
			s.Name, c.Requests, s.ArrivalRate(), s.Duration, MaxRequests)
	case c.Bytes > MaxBytes:
		return tooLarge("sim: scenario %q: %.3g bytes expected, %.0f%% of them for %s, more than MaxBytes (%d)",
			s.Name, c.Bytes, 100*c.mostBytes/c.Bytes, c.most, MaxBytes)
	}
	return nil
}

// checkCompare refuses a comparison whose runs together pass
// MaxCompareRequests, or whose kept results and runs at once pass
// MaxBytes. The scenarios are valid.
func checkCompare(scs []Scenario, pols, seeds, par int) error {
	runs := float64(len(scs)) * float64(pols) * float64(seeds)
	var requests, kept, peak float64
	for i := range scs {
		c := scs[i].Cost()
		requests += c.Requests * float64(pols) * float64(seeds)
		kept += c.Kept * float64(pols) * float64(seeds)
		peak = max(peak, c.Bytes)
	}
	bytes := kept + 64*runs + float64(min(float64(par), runs))*peak
	switch {
	case requests > MaxCompareRequests:
		return tooLarge("sim: %.3g requests expected over %.0f runs (%d scenarios, %d policies, %d seeds), more than MaxCompareRequests (%d)",
			requests, runs, len(scs), pols, seeds, MaxCompareRequests)
	case bytes > MaxBytes:
		return tooLarge("sim: %.3g bytes expected for %.0f runs (%d scenarios, %d policies, %d seeds, %d at once), more than MaxBytes (%d)",
			bytes, runs, len(scs), pols, seeds, par, MaxBytes)
	}
	return nil
}
