package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// A peer whose probes keep failing: with fail_timeout 10s and
// WithEjectionBackoff(35s) it is out 10, 20, 30, then 35 s (the cap).
func ExampleWithEjectionBackoff() {
	now := time.Unix(0, 0)
	a := balancer.NewPeer("a", balancer.FailTimeout(10*time.Second))
	b := balancer.NewPeer("b", balancer.Down())
	lb, _ := balancer.NewRoundRobin([]*balancer.Peer{a, b},
		balancer.WithClock(func() time.Time { return now }), balancer.WithEjectionBackoff(35*time.Second))
	for range 5 {
		p, _ := lb.Pick(nil) // the probe, once the window has passed
		_ = lb.Done(p, balancer.Outcome{Failed: true})
		next, _ := lb.NextEligible()
		fmt.Println("out for", next.Sub(now).Round(time.Second))
		now = next
	}
	// Output:
	// out for 10s
	// out for 20s
	// out for 30s
	// out for 35s
	// out for 35s
}
