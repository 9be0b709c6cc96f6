package balancer

import (
	"fmt"
	"math"
)

// ServerLoad is what a server said of its own load in its reply to one
// attempt: the fields of an ORCA load report (gRFC A51) that a picker
// reads. gRFC A58's weighted round robin weighs a peer by
// RPS / (Utilization + EPS/RPS × penalty); a load-aware picker may use
// InFlight, the server's count over every client, as C3 does.
//
// Every value is finite and not negative, or Done rejects the outcome.
// A zero value is "not reported", as in ORCA's proto3 message.
// Package loadreport converts its Report to a ServerLoad
// (loadreport.Report.ServerLoad), and the integrations (balancerhttp,
// grpcbalancer) fill Outcome.Load from each reply's report.
type ServerLoad struct {
	// Utilization is the server's utilization, usually a fraction of its
	// capacity (it may pass 1): application_utilization if the server
	// set it, else cpu_utilization, as gRFC A58 chooses.
	Utilization float64

	// RPS is the requests per second the server completes
	// (rps_fractional); EPS its errors per second (eps).
	RPS, EPS float64

	// InFlight is the server's requests in flight, from every client
	// (named_metrics.rif), when HasInFlight is set.
	InFlight    float64
	HasInFlight bool
}

// check returns an error wrapping ErrInvalidOutcome that names the first
// value of l that is NaN, infinite or negative, and which peer's it is.
func (l *ServerLoad) check(addr string) error {
	for _, f := range [...]struct {
		name string
		v    float64
	}{
		{"Utilization", l.Utilization},
		{"RPS", l.RPS},
		{"EPS", l.EPS},
		{"InFlight", l.InFlight},
	} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0 {
			return fmt.Errorf("balancer: Done(%q): Load.%s %v: %w", addr, f.name, f.v, ErrInvalidOutcome)
		}
	}
	return nil
}
