package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// TestHedgingCollector scrapes a Hedging after three requests over two
// peers, each slow (its timer fires before any answer), with a hedge
// budget of ratio 0.5 and no reserve (still clock): the first request's
// hedge is refused (0.5 allowed), the second's sent (1 allowed) and won,
// the third's refused (1.5 allowed, 1 made).
func TestHedgingCollector(t *testing.T) {
	clk := &clock{time.Unix(1000, 0)}
	lb, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a", balancer.MaxFails(0)), balancer.NewPeer("b", balancer.MaxFails(0))}, balancer.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	bud, err := retrybudget.New(0.5, 0, time.Second, retrybudget.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	var decided chan balancer.EventKind
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: 20 * time.Millisecond, Budget: bud,
		Timer: func(time.Duration) (<-chan time.Time, func() bool) {
			c := make(chan time.Time, 1)
			c <- time.Time{}
			return c, func() bool { return true }
		},
		Events: func(e balancer.Event) { decided <- e.Kind }})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		decided = make(chan balancer.EventKind, 2)
		var first *balancer.Peer
		picker := pickFirst{lb, &first}
		loop := balancer.Attempts{Picker: picker, Now: clk.now}
		err := loop.RunHedged(context.Background(), h, func(ctx context.Context, p *balancer.Peer) balancer.Verdict {
			if p != first {
				return balancer.Verdict{} // the hedge answers
			}
			if <-decided == balancer.EventHedgeRefused {
				return balancer.Verdict{}
			}
			<-ctx.Done()
			return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true}}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewHedging("client", h)); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP balancer_hedge_delay_seconds The delay a hedge waits now; -1 while a percentile delay has too few latencies.
# TYPE balancer_hedge_delay_seconds gauge
balancer_hedge_delay_seconds{hedging="client"} 0.02
# HELP balancer_hedges_refused_total Hedges the hedge budget refused.
# TYPE balancer_hedges_refused_total counter
balancer_hedges_refused_total{hedging="client"} 2
# HELP balancer_hedges_sent_total Hedged attempts sent.
# TYPE balancer_hedges_sent_total counter
balancer_hedges_sent_total{hedging="client"} 1
# HELP balancer_hedges_won_total Requests a hedge answered first.
# TYPE balancer_hedges_won_total counter
balancer_hedges_won_total{hedging="client"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// pickFirst notes each request's first peer, picked before its attempt's
// goroutine starts.
type pickFirst struct {
	balancer.Balancer
	first **balancer.Peer
}

func (p pickFirst) Pick(r *balancer.Request) (*balancer.Peer, error) {
	peer, err := p.Balancer.Pick(r)
	if err == nil && r.Attempts() == 1 {
		*p.first = peer
	}
	return peer, err
}
