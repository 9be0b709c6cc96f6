package sim

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// Lie is what a backend misstates about its load, to test how far a picker
// trusts what servers say: a mis-wired server (a probe handler on a
// tracker that sees none of the traffic) looks the same. The backend's
// real load is what it is served, and grows with the share the lie wins
// it.
type Lie int

const (
	// Truthful is the default: the backend's probes and reports say what
	// package loadreport's Tracker would.
	Truthful Lie = iota
	// LieProbeIdle answers every probe with 0 in flight and 0 latency.
	LieProbeIdle
	// LieUtilization reports a utilization of 1e-9 with every reply, so
	// that gRFC A58's weight, rps / utilization, is a billion times its
	// rps.
	LieUtilization
	// LieInFlight reports 0 requests in flight with every reply.
	LieInFlight

	lies // the number of lies, for validation
)

// String names the lie as the scenarios' titles do.
func (l Lie) String() string {
	switch l {
	case Truthful:
		return "truthful"
	case LieProbeIdle:
		return "probes answered idle (0 in flight, 0 latency)"
	case LieUtilization:
		return "utilization 1e-9 reported"
	case LieInFlight:
		return "0 in flight reported"
	}
	return fmt.Sprintf("Lie(%d)", int(l))
}

// lieProbe applies the backend's lie, if it lies in its probe answers.
func (b *backendState) lieProbe(a *balancer.ProbeAnswer) {
	if b.lie == LieProbeIdle {
		a.InFlight, a.Latency = 0, 0
	}
}

// lieReport applies the backend's lie, if it lies in its reports.
func (b *backendState) lieReport(l *balancer.ServerLoad) {
	switch b.lie {
	case LieUtilization:
		l.Utilization = 1e-9
	case LieInFlight:
		l.InFlight = 0
	}
}

// liar is uniform with 16 clients, backend 0 telling lie: ten identical
// M/M/1 backends (10 ms) at 70% of their capacity. Its pickers are those
// the lie could fool and a baseline that reads no claim.
func liar(name string, lie Lie, pickers ...string) Scenario {
	s := Scenario{
		Name:     name,
		Title:    "10 identical M/M/1 backends (10 ms), backend 0 lying: " + lie.String() + "; K=16",
		Load:     0.7,
		Clients:  16,
		Duration: 60 * time.Second,
		Watch:    -1,
		Pickers:  pickers,
	}
	for range 10 {
		s.Backends = append(s.Backends, mm1(100, 1))
	}
	s.Backends[0].Lie = lie
	return s
}

// Liars returns the trust scenarios, which run by name (Lookup; balance
// sim -scenario liar-probe) and not with Scenarios: one backend of ten
// lying in its probe answers, its reported utilization, its reported
// requests in flight. Each call returns fresh values.
func Liars() []Scenario {
	return []Scenario{
		liar("liar-probe", LieProbeIdle, "Prequal", "P2CPeakEWMA"),
		liar("liar-util", LieUtilization, "ReportedWRR", "SmoothWRR"),
		liar("liar-rif", LieInFlight, "LeastConn+rif", "P2CPeakEWMA+rif", "FastestFirst+rif", "RandomTwo+rif", "LeastConn"),
	}
}
