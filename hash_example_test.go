package balancer_test

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/lbgo/balancer"
)

// Requests with one key go to one peer; removing a peer moves only the
// keys that were on it (here erin and frank, from cache-b).
func ExampleConsistentHash() {
	peers := []*balancer.Peer{
		balancer.NewPeer("10.0.0.1:80", balancer.HashKey("cache-a")),
		balancer.NewPeer("10.0.0.2:80", balancer.HashKey("cache-b")),
		balancer.NewPeer("10.0.0.3:80", balancer.HashKey("cache-c")),
	}
	b, err := balancer.NewConsistentHash(peers)
	if err != nil {
		panic(err)
	}
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace"}
	show := func() {
		var r balancer.Request
		var out []string
		for _, k := range keys {
			r.Reset()
			r.SetKey(k)
			p, err := b.Pick(&r)
			if err != nil {
				panic(err)
			}
			out = append(out, k+"→"+p.HashKey())
			_ = b.Done(p, balancer.Outcome{})
		}
		fmt.Println(strings.Join(out, " "))
	}
	show()
	_ = b.Remove(peers[1])
	show()
	// Output:
	// alice→cache-c bob→cache-c carol→cache-a dave→cache-c erin→cache-b frank→cache-b grace→cache-a
	// alice→cache-c bob→cache-c carol→cache-a dave→cache-c erin→cache-a frank→cache-c grace→cache-a
}

// One client /24 goes to one peer; a retry after a failure continues
// nginx's hash sequence to another peer, and the Request carries it.
func ExampleIPHash() {
	var peers []*balancer.Peer
	for _, addr := range []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80"} {
		peers = append(peers, balancer.NewPeer(addr))
	}
	b, err := balancer.NewIPHash(peers)
	if err != nil {
		panic(err)
	}
	pick := func(r *balancer.Request, failed bool) *balancer.Peer {
		p, err := b.Pick(r)
		if err != nil {
			panic(err)
		}
		_ = b.Done(p, balancer.Outcome{Failed: failed})
		return p
	}
	var r balancer.Request
	for _, client := range []string{"192.0.2.17", "192.0.2.200", "198.51.100.7"} {
		r.Reset()
		r.SetAddr(netip.MustParseAddr(client))
		fmt.Println(client, "→", pick(&r, false))
	}
	r.Reset()
	r.SetAddr(netip.MustParseAddr("198.51.100.7"))
	first := pick(&r, true)
	fmt.Println(first, "failed; the retry goes to", pick(&r, false))
	// Output:
	// 192.0.2.17 → 10.0.0.4:80
	// 192.0.2.200 → 10.0.0.4:80
	// 198.51.100.7 → 10.0.0.1:80
	// 10.0.0.1:80 failed; the retry goes to 10.0.0.2:80
}
