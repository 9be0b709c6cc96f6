package balancer_test

import (
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// Three peers fail at once and all go out (max_fails 1). nginx would have
// no live peer for fail_timeout; with WithPanicThreshold(50) (0 of 3
// eligible, below 50%) the picker ignores the fail windows, and the
// success of the pick readmits its peer.
func ExampleWithPanicThreshold() {
	now := time.Unix(1000, 0)
	clock := func() time.Time { return now }
	peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c")}
	picker, _ := balancer.NewSmoothWRR(peers, balancer.WithClock(clock), balancer.WithPanicThreshold(50),
		balancer.WithEvents(func(e balancer.Event) {
			if e.Kind == balancer.EventPanic || e.Kind == balancer.EventPeerReadmitted {
				fmt.Println("event:", e.Kind, e.Peer)
			}
		}))
	var held []*balancer.Peer
	for range peers {
		p, _ := picker.Pick(nil)
		held = append(held, p)
	}
	for _, p := range held {
		_ = picker.Done(p, balancer.Outcome{Failed: true})
	}
	p, err := picker.Pick(nil)
	fmt.Println("picked", p, err)
	_ = picker.Done(p, balancer.Outcome{})
	fmt.Println("fails of", p, p.Stats().Fails, "in panic:", picker.InPanic())
	// Output:
	// event: Panic <nil>
	// picked a <nil>
	// event: PeerReadmitted a
	// fails of a 0 in panic: true
}
