// Package capacity is test support, not part of the library: the harness
// the capacity end-to-end tests share (balancerhttp's over HTTP,
// loadreport/grpcreport's over gRPC). It holds what does not depend on the
// transport: the servers' workers and their bookkeeping (Server), the
// utilization they report (BusyMeter), the service times (Drawer), the
// schedule (Phases), the client loops (Fleet, Run) and the share checks.
// The tests keep their HTTP and gRPC servers and clients.
//
// Two scenarios share those parts. The capacity scenario, below, checks
// that report-driven weights follow capacity (Run). The herding one,
// Shifting (Fleet16, RunShifting), is the simulator's fleet16 on real
// servers: ten one-worker servers whose speeds are redrawn every 0.5 to
// 3.5 s, sixteen clients sending open-loop Poisson arrivals, where the
// pickers' p99s are compared with each other and with a full-information
// Oracle.
//
// The capacity scenario: three servers of different capacities, Clients
// clients each with its own picker, and the big server slowing down
// mid-run. Capacity is workers / mean service time. Before the change:
//
//	big:    4 workers × 20 ms → 200 requests/s  (4/7 = 57.1%)
//	medium: 2 workers × 20 ms → 100 requests/s  (2/7 = 28.6%)
//	small:  2 workers × 40 ms →  50 requests/s  (1/7 = 14.3%)
//
// then big's mean service time becomes 80 ms: 50 requests/s, and the
// shares 25%, 50%, 25%. The clients keep Clients × Conc requests in
// flight (closed loop), more than the 8 workers, so requests queue.
//
// The standard library and, for Oracle's picker, the balancer package
// only; safe for concurrent use where the docs say so.
package capacity

import "time"

// The scenario's sizes.
const (
	Clients = 4
	Conc    = 3           // requests in flight per client
	Sigma   = 1.0         // the service times' lognormal shape
	Window  = time.Second // the servers' rps window
	// ShareTol is how far a share may be from capacity (see shareTol).
	ShareTol = shareTol
	Strata   = 16 // draws per block, one from each stratum
)

// shareTol is ShareTol, derived.
//
// Why a report-driven weighted round robin must give the capacity shares:
// gRFC A58 weighs a server by qps / utilization. The server reports as
// utilization its busy workers over its workers, averaged over the window
// of its qps (BusyMeter), so the weight is workers / the mean service
// time of the window's requests: the server's capacity as those requests
// realized it, whatever the load.
//
// The tolerance. Service times are lognormal of shape 1 (coefficient of
// variation 1.31, p99 6× the mean), drawn in shuffled blocks of 16, one
// from each sixteenth of the distribution (Drawer), so that the mean
// of n consecutive draws varies by about 12% at n = 30, 8.5% at 50 and
// 5.5% at 100, where independent draws vary by 22%, 16% and 12%
// (TestCapDrawer). The weights come from the last second's requests:
// before the change big's 170 or so, small's 45; after, big's and small's
// 40, medium's 80. That noise moves a share by 2 points or less (one
// standard deviation; after the change big's by 25% × 10% × (1 − 25%) =
// 1.9, medium's by 50% × 6.5% × 50% = 1.6; before, big's and small's by
// about 1.1). ShareTol, 8 points, is four of those. A busy machine's
// late timers take nothing from the capacities (Server serves on its own
// schedule), but they slow the clients: fewer requests a second, so the
// measured windows stretch to hold as many (Schedule). It is less than
// the distance from the equal split RoundRobin gives (24 points for big
// before, 17 for medium after): the control must miss.
// The servers' seeds are fixed, so every run draws the same sequences and
// a share's offset from capacity recurs from run to run: with these
// seeds, small's share after the change ran from 2 points low to 6
// high over 50 runs, mostly high.
const shareTol = 0.08

// Phases is a run's schedule: warm, measured before the change, change,
// settle (the report windows refill), measured after. Run stretches each
// measured window past its length until every fleet has begun Requests
// requests in it, to at most Stretch times its length, and returns the
// phases as they ran.
type Phases struct {
	Warm, Before, Settle, After time.Duration
	Requests, Stretch           int
}

// Change is when the big server slows down, since the run began.
func (p Phases) Change() time.Duration { return p.Warm + p.Before }

// AfterFrom is when the window measured after the change begins.
func (p Phases) AfterFrom() time.Duration { return p.Change() + p.Settle }

// End is when the run ends.
func (p Phases) End() time.Duration { return p.AfterFrom() + p.After }

// Schedule is the tests' schedule. The settle time is the rps window plus
// 20%: by then every report counts only requests served after the change
// (but for the few that began before it and ended after). The windows
// measured last a second on a quiet machine, where RoundRobin's fleet,
// the slowest (it queues at small), begins 130 to 155 requests a second
// and the others 145 to 320; on a busy one, where the clients get too
// little of the CPU to keep the servers busy, a second holds a third to a
// half of that, so a window lasts until the slowest fleet has begun 120.
// Why: the shares' noise comes from the weights', which each come from
// one report window of the servers' requests (shareTol). A measured
// window of n seconds averages the weights of about n report windows, so
// its shares vary about as 1/√(requests a second × n), as 1/√(requests
// in the window): the same count keeps the noise the tolerance was
// derived for, however slow the machine. Three CPU hogs beside other
// builds, with one-second windows: shares off by up to 10 points, the
// share-checked fleets missing in 3 and 5 of 12 first runs; with the
// windows stretched, none in 24 (gRPC and HTTP, worst 6.6 points). A
// window stops at five times its length (5 s), however few requests it
// holds: the run is then short (Result.Short).
var Schedule = Phases{Warm: 500 * time.Millisecond, Before: time.Second, Settle: 1200 * time.Millisecond, After: time.Second, Requests: 120, Stretch: 5}

// ChangedMean is the big server's mean service time after the change.
const ChangedMean = 80 * time.Millisecond
