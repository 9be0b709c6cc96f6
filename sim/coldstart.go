package sim

import (
	"time"

	"github.com/lbgo/balancer"
)

// coldStart is a heterogeneous fleet at a client's start: eight M/M/4
// backends of speeds 1, 1, 1, 1, 2, 2, 4, 4 (40 ms over the speed: 100 to
// 400 requests a second each, 1600 in all), equal configured weights, 68%
// of the capacity offered from the first instant, for 30 s, with a 5 s
// timeout (long enough that a queue shows as latency rather than as
// retries) and one retry (which keeps the requests a run may hold in
// flight, rate × timeout × tries, within what Compare's bounds allow at
// 64 runs at once). Under equal shares each backend gets 136 requests a second,
// 1.36 times what a slow one serves. ReportedWRR runs beside its variant
// with A58's periods (+a58: a blackout of 10 s, an update period of 1 s,
// an expiration of 3 min), whose weights count only from 10 s on. Steady
// is 15 s: the shares after the handover.
func coldStart() Scenario {
	s := Scenario{
		Name:     coldStartName,
		Title:    "8 M/M/4 backends of speeds {1,1,1,1,2,2,4,4} (40 ms at speed 1), equal weights, from the start; timeout 5 s, one retry",
		Load:     0.68,
		Duration: 30 * time.Second,
		Timeout:  5 * time.Second,
		Tries:    2,
		Watch:    -1,
		Steady:   15 * time.Second,
		Pickers:  []string{"SmoothWRR", "LeastConn", "FastestFirst", "ReportedWRR"},
		Guards:   []Guard{{Suffix: a58Suffix, Options: a58Options}},
	}
	for _, v := range coldStartSpeeds {
		s.Backends = append(s.Backends, Backend{Workers: 4, Mean: time.Duration(float64(40*time.Millisecond) / v), Weight: 1})
	}
	return s
}

// coldStartName names the cold start's scenario.
const coldStartName = "coldstart"

// coldStartSpeeds are the cold start's backend speeds, each a multiple of
// 100 requests a second.
var coldStartSpeeds = []float64{1, 1, 1, 1, 2, 2, 4, 4}

// a58Suffix names ReportedWRR's variant with A58's periods, a58Options:
// gRFC A58's defaults, which are ReportedWRR's own, in place of the short
// settings the simulator otherwise gives it.
const a58Suffix = "+a58"

// a58Options are ReportedWRR's A58 defaults (see a58Suffix).
var a58Options = []balancer.Option{balancer.ReportedWRRSettings{
	BlackoutPeriod:         10 * time.Second,
	WeightUpdatePeriod:     time.Second,
	WeightExpirationPeriod: 3 * time.Minute,
}.Option()}
