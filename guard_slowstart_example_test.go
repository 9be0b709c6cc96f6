package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// A peer added to a running SmoothWRR under WithSlowStart(10 s, 1, 10)
// takes 10% of its weight's share at once, half at 5 s, all of it at 10 s:
// of 1000 picks among three peers and the new one, about 1000·0.1/3.1,
// 1000·0.5/3.5 and 1000/4.
func ExampleWithSlowStart() {
	now := time.Unix(0, 0)
	clock := func() time.Time { return now }
	b, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c"),
	}, balancer.WithClock(clock), balancer.WithSlowStart(10*time.Second, 1, 10))
	if err != nil {
		panic(err)
	}
	d := balancer.NewPeer("d")
	if err := b.Add(d); err != nil {
		panic(err)
	}
	start := now
	for _, t := range []time.Duration{0, 5 * time.Second, 10 * time.Second} {
		now = start.Add(t)
		got := 0
		for range 1000 {
			p, _ := b.Pick(nil)
			if p == d {
				got++
			}
			_ = b.Done(p, balancer.Outcome{})
		}
		fmt.Printf("at %v: %d of 1000\n", t, got)
	}
	// Output:
	// at 0s: 32 of 1000
	// at 5s: 143 of 1000
	// at 10s: 250 of 1000
}
