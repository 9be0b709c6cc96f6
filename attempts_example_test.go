package balancer_test

import (
	"context"
	"fmt"

	"github.com/lbgo/balancer"
)

// One request over SmoothWRR's a (weight 3), b (2) and c (1), which
// nginx's smooth order tries a first, then b. a's reply is a failure worth
// a retry and b's the answer: the loop picks a, then b, and reports both
// (a's failure is counted); MaxTries allows two attempts.
func ExampleAttempts() {
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(3)),
		balancer.NewPeer("b", balancer.Weight(2)),
		balancer.NewPeer("c"),
	})
	if err != nil {
		panic(err)
	}
	loop := balancer.Attempts{Picker: lb, MaxTries: 2}
	err = loop.Run(context.Background(), func(ctx context.Context, peer *balancer.Peer) balancer.Verdict {
		fmt.Println("attempt on", peer.Addr())
		if peer.Addr() == "a" {
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true}, Retry: true}
		}
		return balancer.Verdict{} // a success, reported as the attempt ends
	})
	fmt.Println("stopped by the loop:", err)
	fmt.Println("a's failures:", lb.Peers()[0].State().Fails)
	// Output:
	// attempt on a
	// attempt on b
	// stopped by the loop: <nil>
	// a's failures: 1
}
