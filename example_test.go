package balancer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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
		balancer.NewPeer("10.0.0.1:80", balancer.HashText("cache-a")),
		balancer.NewPeer("10.0.0.2:80", balancer.HashText("cache-b")),
		balancer.NewPeer("10.0.0.3:80", balancer.HashText("cache-c")),
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
			out = append(out, k+"→"+p.HashText())
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
		r.SetClientAddr(netip.MustParseAddr(client))
		fmt.Println(client, "→", pick(&r, false))
	}
	r.Reset()
	r.SetClientAddr(netip.MustParseAddr("198.51.100.7"))
	first := pick(&r, true)
	fmt.Println(first, "failed; the retry goes to", pick(&r, false))
	// Output:
	// 192.0.2.17 → 10.0.0.4:80
	// 192.0.2.200 → 10.0.0.4:80
	// 198.51.100.7 → 10.0.0.1:80
	// 10.0.0.1:80 failed; the retry goes to 10.0.0.2:80
}

// addrs returns the peers' addresses.
func addrs(peers []*balancer.Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.Addr()
	}
	return out
}

// A service-discovery watcher needs only the Updater half of a picker: it
// hands each snapshot of addresses to Update, which refuses a bad one
// whole and leaves the peers as they were. An address listed twice is two
// peers, as two nginx server lines with one address are.
func ExampleUpdater() {
	watch := func(u balancer.Updater, snapshots [][]string) {
		for _, snap := range snapshots {
			peers := make([]*balancer.Peer, len(snap))
			for i, a := range snap {
				peers[i] = balancer.NewPeer(a)
			}
			if err := u.Update(peers); err != nil {
				fmt.Println("kept", addrs(u.Peers()), "after:", err)
				continue
			}
			fmt.Println(addrs(u.Peers()))
		}
	}
	lb, _ := balancer.NewLeastConn(nil)
	watch(lb, [][]string{
		{"10.0.0.1:80", "10.0.0.2:80"},
		{"10.0.0.2:80", "10.0.0.3:80"},
		{"10.0.0.3:80", ""},
		{"10.0.0.3:80", "10.0.0.3:80"},
	})
	// Output:
	// [10.0.0.1:80 10.0.0.2:80]
	// [10.0.0.2:80 10.0.0.3:80]
	// kept [10.0.0.2:80 10.0.0.3:80] after: balancer: empty peer address: balancer: invalid configuration
	// [10.0.0.3:80 10.0.0.3:80]
}

// When every peer is out for its failures, NextEligible says how long to
// wait before picking again.
func ExampleUpdater_nextEligible() {
	now := time.Unix(1000, 0)
	lb, _ := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.FailTimeout(10*time.Second)),
		balancer.NewPeer("b", balancer.FailTimeout(3*time.Second)),
	}, balancer.WithClock(func() time.Time { return now }))
	for range 2 {
		p, _ := lb.Pick(nil)
		lb.Done(p, balancer.Outcome{Failed: true})
	}
	_, err := lb.Pick(nil)
	fmt.Println(err)
	at, ok := lb.NextEligible()
	fmt.Println(ok, at.Sub(now))
	now = at
	p, _ := lb.Pick(nil)
	fmt.Println(p)
	// Output:
	// balancer: no live peer
	// true 3.000000001s
	// b
}

// A discovery snapshot reconciled with Update: the kept address keeps its
// peer, with its failure and its attempt in flight, and takes the new
// weight; the dropped peer's attempt can still be reported.
func ExampleSmoothWRR_Update() {
	lb, _ := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("10.0.0.1:80", balancer.MaxFails(3)),
		balancer.NewPeer("10.0.0.2:80"),
	})
	first, _ := lb.Pick(nil)
	lb.Done(first, balancer.Outcome{Failed: true}) // one failure of three
	second, _ := lb.Pick(nil)
	third, _ := lb.Pick(nil)
	fmt.Println("in flight:", second, third)

	err := lb.Update([]*balancer.Peer{
		balancer.NewPeer("10.0.0.1:80", balancer.Weight(4), balancer.MaxFails(3)),
		balancer.NewPeer("10.0.0.3:80"),
	})
	fmt.Println(err, addrs(lb.Peers()))
	kept := lb.Peers()[0]
	s := kept.State()
	fmt.Println(kept == third, "weight", s.Weight, "fails", s.Fails, "in flight", s.InFlight)
	fmt.Println(lb.Done(second, balancer.Outcome{}), lb.Done(third, balancer.Outcome{}))
	// Output:
	// in flight: 10.0.0.2:80 10.0.0.1:80
	// <nil> [10.0.0.1:80 10.0.0.3:80]
	// true weight 4 fails 1 in flight 1
	// <nil> <nil>
}

// FastestFirst on a virtual clock: two peers answer in 10 ms, one in
// 200 ms, twenty times slower. After its first reply the slow one's
// derived weight is a few percent of theirs, and it gets no more traffic
// while the fast ones keep up.
func ExampleFastestFirst() {
	now := time.Unix(1000, 0)
	peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("slow")}
	lb, _ := balancer.NewFastestFirst(peers, balancer.WithClock(func() time.Time { return now }))
	latency := map[string]time.Duration{"a": 10 * time.Millisecond, "b": 10 * time.Millisecond, "slow": 200 * time.Millisecond}
	count := map[string]int{}
	for range 300 {
		p, _ := lb.Pick(nil)
		count[p.Addr()]++
		now = now.Add(latency[p.Addr()])
		lb.Done(p, balancer.Outcome{Latency: latency[p.Addr()]})
	}
	for _, p := range peers {
		fmt.Println(p, "weight", p.State().DerivedWeight, "picks", count[p.Addr()])
	}
	// Output:
	// a weight 100 picks 150
	// b weight 100 picks 149
	// slow weight 6 picks 1
}

// LeastConn sends each attempt to the peer with the fewest in flight per
// unit of weight, smooth round-robin breaking ties.
func ExampleLeastConn() {
	lb, _ := balancer.NewLeastConn([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(2)),
		balancer.NewPeer("b"),
	})
	var held []*balancer.Peer
	for range 3 {
		p, _ := lb.Pick(nil) // held: nothing reported yet
		held = append(held, p)
	}
	fmt.Println(addrs(held))
	lb.Done(held[0], balancer.Outcome{}) // a: one left in flight
	p, _ := lb.Pick(nil)
	fmt.Println(p) // a: (1+1)/2 = 1 is less than b's (1+1)/1 = 2
	// Output:
	// [a b a]
	// a
}

// P2CPeakEWMA with a seeded source and a virtual clock: of two random
// peers it takes the one with the lower latency estimate × (in flight + 1).
// The slow peer gets one attempt, the probe of a peer not yet measured,
// and then loses every pair it is drawn in; a, faster than b, wins their
// pairs: a takes the pairs (a, b) and (a, slow), two thirds of the picks,
// and b the pairs (b, slow).
func ExampleP2CPeakEWMA() {
	now := time.Unix(1000, 0)
	peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("slow")}
	lb, _ := balancer.NewP2CPeakEWMA(peers,
		balancer.WithClock(func() time.Time { return now }),
		balancer.WithRand(rand.NewPCG(1, 2)))
	latency := map[string]time.Duration{"a": 10 * time.Millisecond, "b": 20 * time.Millisecond, "slow": 200 * time.Millisecond}
	count := map[string]int{}
	for range 300 {
		p, _ := lb.Pick(nil)
		count[p.Addr()]++
		now = now.Add(latency[p.Addr()])
		lb.Done(p, balancer.Outcome{Latency: latency[p.Addr()]})
	}
	fmt.Println(count)
	// Output:
	// map[a:188 b:111 slow:1]
}

// Do runs the Pick/Done loop: a failed attempt is retried on another
// peer, and when no peer is left the error matches both the picker's
// reason and the last attempt's error.
func ExampleDo() {
	lb, _ := balancer.NewSmoothWRR([]*balancer.Peer{
		balancer.NewPeer("a", balancer.Weight(2)),
		balancer.NewPeer("b"),
	})
	errRefused := errors.New("connection refused")
	broken := map[string]bool{"a": true}
	call := func(ctx context.Context, p *balancer.Peer) error {
		fmt.Println("trying", p)
		if broken[p.Addr()] {
			return errRefused
		}
		return nil
	}
	fmt.Println(balancer.Do(context.Background(), lb, nil, call))

	broken["b"] = true // a is out for fail_timeout after its failure
	err := balancer.Do(context.Background(), lb, nil, call)
	fmt.Println(errors.Is(err, balancer.ErrNoLivePeer), errors.Is(err, errRefused))
	fmt.Println(err)
	// Output:
	// trying a
	// trying b
	// <nil>
	// trying b
	// true true
	// balancer: Do: balancer: no live peer (last attempt on "b": connection refused)
}

// A TCP proxy keeps each session open for as long as its client does. It
// reports the established connection with Connected, as nginx's stream
// module does, and the session's end with Done: a peer whose probe
// connects is readmitted at once, so the sessions that follow go to it
// while the probe is still open, instead of to the backup.
func ExampleConnector() {
	now := time.Unix(0, 0)
	clock := balancer.WithClock(func() time.Time { return now })
	db := balancer.NewPeer("10.0.0.1:5432", balancer.MaxFails(1), balancer.FailTimeout(10*time.Second))
	spare := balancer.NewPeer("10.0.0.2:5432", balancer.Backup())
	var lb balancer.Balancer
	lb, _ = balancer.NewSmoothWRR([]*balancer.Peer{db, spare}, clock)

	// The connection to db is refused: out for fail_timeout.
	peer, _ := lb.Pick(nil)
	_ = lb.Done(peer, balancer.Outcome{Failed: true})

	now = now.Add(11 * time.Second)
	var open []*balancer.Peer
	for range 4 {
		peer, _ := lb.Pick(nil)
		// ... the connection to peer is established ...
		_ = lb.(balancer.Connector).Connected(peer)
		open = append(open, peer)
	}
	fmt.Println("sessions on", addrs(open))
	fmt.Println("db in flight:", db.InFlight(), "failures:", db.State().Fails)

	for _, peer := range open { // each session's end
		_ = lb.Done(peer, balancer.Outcome{})
	}
	// Output:
	// sessions on [10.0.0.1:5432 10.0.0.1:5432 10.0.0.1:5432 10.0.0.1:5432]
	// db in flight: 4 failures: 0
}
