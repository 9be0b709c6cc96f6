package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// Three servers report their load with every reply: a serves 100 requests
// a second at half its capacity (A58 weight 100/0.5 = 200), b 50 (100),
// and c sends no report. With no blackout, the first recompute, one update
// period later, weighs them: a 1 and b 0.5 of the largest, c the mean of
// those, 0.75; scaled to 100 a peer, 133, 67 and 100, which the next 300
// picks follow exactly.
func ExampleReportedWRR() {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	lb, err := balancer.ReportedWRRSettings{BlackoutPeriod: -1, WeightUpdatePeriod: 100 * time.Millisecond}.New([]*balancer.Peer{
		balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c"),
	}, balancer.WithClock(clock))
	if err != nil {
		panic(err)
	}
	reports := map[string]*balancer.ServerLoad{
		"a": {Utilization: 0.5, RPS: 100},
		"b": {Utilization: 0.5, RPS: 50},
	}
	serve := func(n int) map[string]int {
		picks := map[string]int{}
		for range n {
			p, _ := lb.Pick(nil)
			picks[p.Addr()]++
			lb.Done(p, balancer.Outcome{Load: reports[p.Addr()]}) // nil for c
		}
		return picks
	}
	fmt.Println("round robin:", serve(3))
	now = now.Add(100 * time.Millisecond)
	serve(1) // the report that finds the recompute due
	for _, p := range lb.Peers() {
		fmt.Printf("%s=%d ", p.Addr(), p.State().DerivedWeight)
	}
	fmt.Println("(derived weights)")
	fmt.Println("next 300:", serve(300))
	// Output:
	// round robin: map[a:1 b:1 c:1]
	// a=133 b=67 c=100 (derived weights)
	// next 300: map[a:133 b:67 c:100]
}
