package balancer_test

import (
	"errors"
	"fmt"
	"net/netip"
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
