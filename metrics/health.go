package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbgo/balancer/balancerhttp"
)

// The metrics a HealthCheckCollector exports, each with the constant label
// checker.
const (
	HealthChecksName       = "balancer_health_checks_total"
	HealthChecksFailedName = "balancer_health_checks_failed_total"
	HealthDownName         = "balancer_health_down_peers"
)

// HealthCheckCollector is a prometheus.Collector for one
// balancerhttp.HealthChecker. Each scrape reads its counters
// (HealthChecker.Stats, atomic loads):
//
//   - balancer_health_checks_total (counter): checks made;
//   - balancer_health_checks_failed_total (counter): checks failed;
//   - balancer_health_down_peers (gauge): peers the checker holds down.
//
// Create it with NewHealthCheck. Safe for concurrent scrapes.
type HealthCheckCollector struct {
	h                     *balancerhttp.HealthChecker
	checks, failed, downs *prometheus.Desc
}

// NewHealthCheck returns a HealthCheckCollector for h, labelling its
// series checker=name.
func NewHealthCheck(name string, h *balancerhttp.HealthChecker) *HealthCheckCollector {
	c := prometheus.Labels{"checker": name}
	return &HealthCheckCollector{
		h:      h,
		checks: prometheus.NewDesc(HealthChecksName, "Health checks made.", nil, c),
		failed: prometheus.NewDesc(HealthChecksFailedName, "Health checks failed.", nil, c),
		downs:  prometheus.NewDesc(HealthDownName, "Peers the health checker holds down.", nil, c),
	}
}

// Describe sends the descriptors of the three metrics.
func (c *HealthCheckCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.checks
	ch <- c.failed
	ch <- c.downs
}

// Collect reads the checker's counters and sends them.
func (c *HealthCheckCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.h.Stats()
	ch <- prometheus.MustNewConstMetric(c.checks, prometheus.CounterValue, float64(st.Checks))
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.CounterValue, float64(st.Failed))
	ch <- prometheus.MustNewConstMetric(c.downs, prometheus.GaugeValue, float64(st.Down))
}
