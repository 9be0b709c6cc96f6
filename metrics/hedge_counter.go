package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
)

// The metrics a HedgeCounterCollector exports besides
// balancer_hedges_sent_total, balancer_hedges_won_total and
// balancer_hedges_refused_total, each with the constant label hedging.
const (
	HedgedRequestsName  = "balancer_hedged_requests_total"
	HedgesNoBackendName = "balancer_hedges_no_backend_total"
)

// HedgeCounter is a hedging client that gives its counters as plain
// numbers, so that this module reads it without importing it:
// grpcbalancer.Hedging is one, and the metrics module does not depend on
// gRPC. Each count only grows. requests are the requests of a method that
// hedges; sent the attempts of a request that reached a backend after its
// first one did; won the requests that sent one and that an attempt after
// the first ended with an OK answer; refused the attempts the budget
// refused; noBackend the attempts, the first included, that found no
// backend the request's other attempts had not tried, and so were not
// sent (grpcbalancer.HedgingStats says when each is counted).
type HedgeCounter interface {
	HedgeCounts() (requests, sent, won, refused, noBackend uint64)
}

// HedgeCounterCollector is a prometheus.Collector for one HedgeCounter.
// Each scrape calls HedgeCounts once (for grpcbalancer.Hedging, atomic
// loads) and exports, labelled hedging=name:
//
//   - balancer_hedged_requests_total (counter): requests;
//   - balancer_hedges_sent_total (counter): sent;
//   - balancer_hedges_won_total (counter): won;
//   - balancer_hedges_refused_total (counter): refused;
//   - balancer_hedges_no_backend_total (counter): noBackend.
//
// The three it shares with HedgingCollector have the same help and
// labels, so a registry may hold both, and a dashboard reads net/http's
// and gRPC's hedges alike; sent over requests is the load hedging added.
// Create it with NewHedgeCounter. Safe for concurrent scrapes.
type HedgeCounterCollector struct {
	h                                     HedgeCounter
	requests, sent, won, refused, noBackd *prometheus.Desc
}

// NewHedgeCounter returns a HedgeCounterCollector for h, labelling its
// series hedging=name:
//
//	reg.MustRegister(metrics.NewHedgeCounter("api", hedging)) // a *grpcbalancer.Hedging
func NewHedgeCounter(name string, h HedgeCounter) *HedgeCounterCollector {
	c := prometheus.Labels{"hedging": name}
	return &HedgeCounterCollector{
		h:        h,
		requests: prometheus.NewDesc(HedgedRequestsName, "Requests of a method that hedges.", nil, c),
		sent:     hedgesSentDesc(c),
		won:      hedgesWonDesc(c),
		refused:  hedgesRefusedDesc(c),
		noBackd:  prometheus.NewDesc(HedgesNoBackendName, "Attempts not sent: no backend the request's other attempts had not tried.", nil, c),
	}
}

// Describe sends the descriptors of the five counters.
func (c *HedgeCounterCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.sent
	ch <- c.won
	ch <- c.refused
	ch <- c.noBackd
}

// Collect reads the counters and sends them.
func (c *HedgeCounterCollector) Collect(ch chan<- prometheus.Metric) {
	requests, sent, won, refused, noBackend := c.h.HedgeCounts()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(requests))
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(sent))
	ch <- prometheus.MustNewConstMetric(c.won, prometheus.CounterValue, float64(won))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(refused))
	ch <- prometheus.MustNewConstMetric(c.noBackd, prometheus.CounterValue, float64(noBackend))
}
