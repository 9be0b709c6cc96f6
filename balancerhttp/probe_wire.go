package balancerhttp

import (
	"fmt"
	"math"
	"time"

	"github.com/lbgo/balancer/loadreport"
)

// The probe's wire format, until loadreport has its own DefaultProbePath
// and ParseProbe: a 200 whose body is a TEXT report with
// named_metrics.rif and named_metrics.latency_ms.
const defaultProbePath = "/_lbgo/probe"

func parseProbe(body []byte) (float64, time.Duration, error) {
	r, err := loadreport.Parse(string(body))
	if err != nil {
		return 0, 0, err
	}
	rif, ok := r.NamedMetrics[loadreport.InFlightName]
	if !ok {
		return 0, 0, fmt.Errorf("%w: no %s", loadreport.ErrMalformed, loadreport.InFlightName)
	}
	ms := r.NamedMetrics[loadreport.LatencyName]
	if ms > float64(math.MaxInt64/int64(time.Millisecond)) {
		return 0, 0, fmt.Errorf("%w: %s=%v", loadreport.ErrInvalidValue, loadreport.LatencyName, ms)
	}
	return rif, time.Duration(ms * float64(time.Millisecond)), nil
}
