package balancer_test

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lbgo/balancer"
)

// The {5,1,1} sequence from the nginx commit that introduced smooth
// weighted round-robin.
func ExampleSmoothWRR() {
	lb, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(5)),
		balancer.NewPeer("b"),
		balancer.NewPeer("c"),
	})
	if err != nil {
		panic(err)
	}
	var order []string
	for range 7 {
		p, _ := lb.Pick(nil)
		order = append(order, p.Addr())
		lb.Done(p, balancer.Outcome{})
	}
	fmt.Println(strings.Join(order, " "))
	// Output: a a b a c a a
}

// The same weights under nginx's pre-2012 algorithm: lighter peers first,
// the heavy one bunched.
func ExampleClassicWRR() {
	lb, err := balancer.NewClassicWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(5)),
		balancer.NewPeer("b"),
		balancer.NewPeer("c"),
	})
	if err != nil {
		panic(err)
	}
	var order []string
	for range 7 {
		p, _ := lb.Pick(nil)
		order = append(order, p.Addr())
		lb.Done(p, balancer.Outcome{})
	}
	fmt.Println(strings.Join(order, " "))
	// Output: c b a a a a a
}

// One request retried the way nginx's proxy_next_upstream does: the failed
// peer is not tried again, and with max_fails=1 it stays out of rotation for
// fail_timeout.
func ExampleRequest() {
	clock := time.Unix(1000, 0)
	lb, _ := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(2)),
		balancer.NewPeer("b"),
		balancer.NewPeer("c"),
	}, balancer.WithClock(func() time.Time { return clock }))

	broken := map[string]bool{"a": true}
	serve := func() {
		var r balancer.Request
		var tried []string
		for {
			p, err := lb.Pick(&r)
			if err != nil {
				fmt.Println(tried, "gave up:", err)
				return
			}
			tried = append(tried, p.Addr())
			failed := broken[p.Addr()]
			lb.Done(p, balancer.Outcome{Failed: failed, Latency: time.Millisecond})
			if !failed {
				fmt.Println(tried)
				return
			}
		}
	}
	serve() // a (cw 2) fails; among b and c, tied at 2, b comes first
	serve() // a is out for 10s
	serve()
	// Output:
	// [a b]
	// [c]
	// [b]
}

// Errors wrap sentinels for errors.Is and name the offending value.
func ExampleNewSmoothWRR_errors() {
	_, err := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("10.0.0.1:80", balancer.Weight(-3)),
	})
	fmt.Println(errors.Is(err, balancer.ErrInvalidConfig))
	fmt.Println(err)

	lb, _ := balancer.NewSmoothWRR(nil)
	_, err = lb.Pick(nil)
	fmt.Println(errors.Is(err, balancer.ErrNoPeers))
	// Output:
	// true
	// balancer: peer "10.0.0.1:80": weight -3 out of range [0, 1073741824]: balancer: invalid configuration
	// true
}
