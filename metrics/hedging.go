package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbgo/balancer"
)

// The metrics a HedgingCollector exports, each with the constant label
// hedging.
const (
	HedgesSentName    = "balancer_hedges_sent_total"
	HedgesWonName     = "balancer_hedges_won_total"
	HedgesRefusedName = "balancer_hedges_refused_total"
	HedgeDelayName    = "balancer_hedge_delay_seconds"
)

// HedgingCollector is a prometheus.Collector for one balancer.Hedging.
// Each scrape reads its counters (Hedging.Stats, atomic loads):
//
//   - balancer_hedges_sent_total (counter): hedges sent;
//   - balancer_hedges_won_total (counter): requests a hedge answered
//     first;
//   - balancer_hedges_refused_total (counter): hedges the hedge budget
//     refused;
//   - balancer_hedge_delay_seconds (gauge): the delay a hedge waits now,
//     -1 while a percentile delay has too few latencies to hedge.
//
// The hedges sent over the requests (the hedge budget's
// RetryBudgetCollector counts them) is the load hedging added. Create it
// with NewHedging. Safe for concurrent scrapes.
type HedgingCollector struct {
	h                         *balancer.Hedging
	sent, won, refused, delay *prometheus.Desc
}

// NewHedging returns a HedgingCollector for h, labelling its series
// hedging=name.
func NewHedging(name string, h *balancer.Hedging) *HedgingCollector {
	c := prometheus.Labels{"hedging": name}
	return &HedgingCollector{
		h:       h,
		sent:    hedgesSentDesc(c),
		won:     hedgesWonDesc(c),
		refused: hedgesRefusedDesc(c),
		delay:   prometheus.NewDesc(HedgeDelayName, "The delay a hedge waits now; -1 while a percentile delay has too few latencies.", nil, c),
	}
}

// Describe sends the descriptors of the four metrics.
func (c *HedgingCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.sent
	ch <- c.won
	ch <- c.refused
	ch <- c.delay
}

// Collect reads the Hedging's counters and sends them.
func (c *HedgingCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.h.Stats()
	ch <- prometheus.MustNewConstMetric(c.sent, prometheus.CounterValue, float64(st.Sent))
	ch <- prometheus.MustNewConstMetric(c.won, prometheus.CounterValue, float64(st.Won))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused))
	d := st.Delay.Seconds()
	if st.Delay < 0 {
		d = -1
	}
	ch <- prometheus.MustNewConstMetric(c.delay, prometheus.GaugeValue, d)
}

// The descriptors HedgingCollector and HedgeCounterCollector share: one
// help text per name, as a registry holding both requires.
func hedgesSentDesc(c prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(HedgesSentName, "Hedged attempts sent.", nil, c)
}

func hedgesWonDesc(c prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(HedgesWonName, "Requests a hedge answered first.", nil, c)
}

func hedgesRefusedDesc(c prometheus.Labels) *prometheus.Desc {
	return prometheus.NewDesc(HedgesRefusedName, "Hedges the hedge budget refused.", nil, c)
}
