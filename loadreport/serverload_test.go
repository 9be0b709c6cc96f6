package loadreport

import (
	"testing"

	"github.com/lbgo/balancer"
	"github.com/stretchr/testify/assert"
)

// The expected values are gRFC A58's choice of utilization
// (application_utilization when non-zero, else cpu_utilization) and
// the field names of OrcaLoadReport, written out by hand.
func TestReport_ServerLoad(t *testing.T) {
	for _, tt := range []struct {
		name string
		in   string // a header value
		want balancer.ServerLoad
	}{
		{"empty report", "TEXT ", balancer.ServerLoad{}},
		{"cpu only", "TEXT cpu_utilization=0.25", balancer.ServerLoad{Utilization: 0.25}},
		{"application wins over cpu", "TEXT cpu_utilization=0.25,application_utilization=0.75", balancer.ServerLoad{Utilization: 0.75}},
		{"application 0 is unset: cpu", "JSON {\"cpu_utilization\":0.5,\"application_utilization\":0}", balancer.ServerLoad{Utilization: 0.5}},
		{"rates", "TEXT rps_fractional=812.5,eps=1.25", balancer.ServerLoad{RPS: 812.5, EPS: 1.25}},
		{"rif", "TEXT named_metrics.rif=7", balancer.ServerLoad{InFlight: 7, HasInFlight: true}},
		{"rif 0 is known", "JSON {\"named_metrics\":{\"rif\":0}}", balancer.ServerLoad{HasInFlight: true}},
		{"other named metrics are not rif", "TEXT named_metrics.queue=9,utilization.rif=0.5", balancer.ServerLoad{}},
		{"mem is not read", "TEXT mem_utilization=0.9", balancer.ServerLoad{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Parse(tt.in)
			if !assert.NoError(t, err) {
				return
			}
			assert.Equal(t, tt.want, r.ServerLoad())
		})
	}
}

// Checking and converting a valid report allocates nothing, so a client
// may do it on every response (what gRPC's policies do with the report
// grpc/orca decoded).
func TestReport_validateAndConvertAllocs(t *testing.T) {
	r := Report{CPUUtilization: 0.5, RPSFractional: 10, NamedMetrics: map[string]float64{"rif": 2, "queue": 1},
		Utilization: map[string]float64{"gpu": 0.5}, RequestCost: map[string]float64{"db": 3}}
	allocs := testing.AllocsPerRun(1000, func() {
		if r.Validate() != nil {
			t.Fatal("valid report rejected")
		}
		_ = r.ServerLoad()
	})
	assert.Zero(t, allocs)
}
