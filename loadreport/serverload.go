package loadreport

import "github.com/lbgo/balancer"

// ServerLoad returns what a picker reads of r, for balancer.Outcome.Load:
// Utilization is ApplicationUtilization if set (not zero), else
// CPUUtilization, as gRFC A58 chooses; RPS and EPS are RPSFractional and
// EPS; InFlight is named_metrics.rif, the name Middleware sends, with
// HasInFlight set only when r carries it. A report Parse accepted gives a
// ServerLoad every picker accepts.
//
// The conversion lives here, not in package balancer: loadreport imports
// balancer, and balancer imports nothing of loadreport.
func (r Report) ServerLoad() balancer.ServerLoad {
	l := balancer.ServerLoad{Utilization: r.ApplicationUtilization, RPS: r.RPSFractional, EPS: r.EPS}
	if l.Utilization == 0 {
		l.Utilization = r.CPUUtilization
	}
	l.InFlight, l.HasInFlight = r.NamedMetrics[InFlightName]
	return l
}
