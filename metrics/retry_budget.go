package metrics

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbgo/balancer/retrybudget"
)

// The metrics a RetryBudgetCollector exports, each with the constant label
// budget.
const (
	BudgetRequestsName = "balancer_retry_budget_requests_total"
	BudgetRetriesName  = "balancer_retry_budget_retries_total"
	BudgetRefusedName  = "balancer_retry_budget_refused_total"
)

// RetryBudgetCollector is a prometheus.Collector for one
// retrybudget.Budget. Each scrape reads its counters (retrybudget.Stats,
// atomic loads):
//
//   - balancer_retry_budget_requests_total (counter): requests deposited;
//   - balancer_retry_budget_retries_total (counter): retries allowed and
//     made (not given back);
//   - balancer_retry_budget_refused_total (counter): retries refused.
//
// The retries over the requests is the load the budget let retries add.
// Create it with NewRetryBudget. Safe for concurrent scrapes.
type RetryBudgetCollector struct {
	b                          *retrybudget.Budget
	requests, retries, refused *prometheus.Desc
}

// NewRetryBudget returns a RetryBudgetCollector for b, labelling its series
// budget=name.
func NewRetryBudget(name string, b *retrybudget.Budget) *RetryBudgetCollector {
	c := prometheus.Labels{"budget": name}
	return &RetryBudgetCollector{
		b:        b,
		requests: prometheus.NewDesc(BudgetRequestsName, "Requests counted by the retry budget.", nil, c),
		retries:  prometheus.NewDesc(BudgetRetriesName, "Retries the retry budget allowed.", nil, c),
		refused:  prometheus.NewDesc(BudgetRefusedName, "Retries the retry budget refused.", nil, c),
	}
}

// Describe sends the descriptors of the three counters.
func (c *RetryBudgetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.requests
	ch <- c.retries
	ch <- c.refused
}

// Collect reads the budget's counters and sends them.
func (c *RetryBudgetCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.b.Stats()
	ch <- prometheus.MustNewConstMetric(c.requests, prometheus.CounterValue, float64(st.Deposits))
	ch <- prometheus.MustNewConstMetric(c.retries, prometheus.CounterValue, float64(st.Retries))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(st.Refused))
}
