package subset_test

import (
	"fmt"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/subset"
)

// A fleet of 6 clients over 12 backends, subsets of 4: client 2 balances
// over its 4 with round robin, and the fleet's subsets hold every backend
// 6·4/12 = 2 times (Ring: ±1, here exact).
func Example() {
	var backends []*balancer.Peer
	var keys []string
	for i := range 12 {
		addr := fmt.Sprintf("10.0.0.%d:80", i+1)
		backends = append(backends, balancer.NewPeer(addr))
		keys = append(keys, addr)
	}
	by, err := subset.Ring(2, 6, 4) // client 2 of 6
	if err != nil {
		panic(err)
	}
	inner, err := balancer.NewRoundRobin(nil)
	if err != nil {
		panic(err)
	}
	lb, err := subset.New(inner, backends, by)
	if err != nil {
		panic(err)
	}
	picked := map[string]bool{}
	for range 8 {
		p, err := lb.Pick(nil)
		if err != nil {
			panic(err)
		}
		picked[p.Addr()] = true
		lb.Done(p, balancer.Outcome{})
	}
	fmt.Println(len(lb.Peers()), "of", len(lb.Backends()), "backends; picks reached", len(picked))

	// Every client's subset, as each computes it for itself.
	held := map[string]int{}
	for c := range 6 {
		s, _ := subset.Ring(c, 6, 4)
		for _, i := range s.Subset(keys) {
			held[keys[i]]++
		}
	}
	lo, hi := 6, 0
	for _, k := range keys {
		lo, hi = min(lo, held[k]), max(hi, held[k])
	}
	fmt.Println("clients per backend:", lo, "to", hi)
	// Output:
	// 4 of 12 backends; picks reached 4
	// clients per backend: 2 to 2
}
