package balancer_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
)

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
