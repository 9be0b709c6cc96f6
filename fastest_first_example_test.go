package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// FastestFirstSettings tune how far latency moves the weights: a peer's
// derived weight is 100 × min(1, Tolerance·fastest/estimate)^Exponent. Two
// peers answer once each on a virtual clock, a in 10 ms and b in 100 ms,
// so b's ratio fastest/estimate is 0.1. With the defaults (Tolerance 3,
// Exponent 2) b's weight is 100 × 0.3² = 9; with Tolerance 2 and Exponent
// 1, 100 × 0.2 = 20; with Exponent -1 (α = 0) latency is ignored: 100.
func ExampleFastestFirstSettings() {
	for _, s := range []balancer.FastestFirstSettings{
		{},
		{Tolerance: 2, Exponent: 1},
		{Exponent: -1},
	} {
		now := time.Unix(1000, 0)
		a, b := balancer.NewPeer("a"), balancer.NewPeer("b")
		lb, err := s.New([]*balancer.Peer{a, b}, balancer.WithClock(func() time.Time { return now }))
		if err != nil {
			panic(err)
		}
		latency := map[*balancer.Peer]time.Duration{a: 10 * time.Millisecond, b: 100 * time.Millisecond}
		for range 2 {
			p, _ := lb.Pick(nil)
			now = now.Add(latency[p])
			lb.Done(p, balancer.Outcome{Latency: latency[p]})
		}
		fmt.Printf("%+v: a %d, b %d\n", s, a.Stats().DerivedWeight, b.Stats().DerivedWeight)
	}
	_, err := balancer.FastestFirstSettings{Band: 0.5}.New(nil)
	fmt.Println(err)
	// Output:
	// {Band:0 Exponent:0 Floor:0 Tolerance:0}: a 100, b 9
	// {Band:0 Exponent:1 Floor:0 Tolerance:2}: a 100, b 20
	// {Band:0 Exponent:-1 Floor:0 Tolerance:0}: a 100, b 100
	// balancer: FastestFirst: FastestFirstSettings.Band(0.5): out of (1, 16]: balancer: invalid configuration
}
