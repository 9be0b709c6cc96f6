package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbgo/balancer/retrybudget"
)

// TestRetryBudgetCollector scrapes a budget of ratio 0.5 and no reserve
// (1 s window, clock still): 7 requests allow 3.5, so of 5 retries asked
// 3 are allowed and 2 refused.
func TestRetryBudgetCollector(t *testing.T) {
	clk := &clock{time.Unix(1000, 0)}
	b, err := retrybudget.New(0.5, 0, time.Second, retrybudget.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	for range 7 {
		b.Deposit()
	}
	for range 5 {
		b.TryWithdraw()
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewRetryBudget("client", b)); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP balancer_retry_budget_refused_total Retries the retry budget refused.
# TYPE balancer_retry_budget_refused_total counter
balancer_retry_budget_refused_total{budget="client"} 2
# HELP balancer_retry_budget_requests_total Requests counted by the retry budget.
# TYPE balancer_retry_budget_requests_total counter
balancer_retry_budget_requests_total{budget="client"} 7
# HELP balancer_retry_budget_retries_total Retries the retry budget allowed.
# TYPE balancer_retry_budget_retries_total counter
balancer_retry_budget_retries_total{budget="client"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
