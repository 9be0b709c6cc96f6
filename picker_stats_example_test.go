package balancer_test

import (
	"fmt"

	"github.com/lbgo/balancer"
)

// A monitoring loop reads any picker's counters through balancer.Stats:
// here both peers are down, so the pick finds no live peer and counts one.
func ExampleStats() {
	a, b := balancer.NewPeer("10.0.0.1:80"), balancer.NewPeer("10.0.0.2:80")
	var picker balancer.Balancer
	picker, err := balancer.NewRoundRobin([]*balancer.Peer{a, b})
	if err != nil {
		panic(err)
	}
	_ = picker.SetDown(a, true)
	_ = picker.SetDown(b, true)
	if _, err := picker.Pick(nil); err != nil {
		fmt.Println(err)
	}
	if s, ok := picker.(balancer.Stats); ok {
		st := s.Stats()
		fmt.Printf("no live peer %d, panics %d, in panic %v\n", st.NoLivePeer, st.Panics, st.InPanic)
	}
	// Output:
	// balancer: no live peer
	// no live peer 1, panics 0, in panic false
}
