package balancer_test

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
)

// tableProber answers every probe at once, as a server running
// loadreport's middleware would over a network of no delay: a server's
// requests in flight are its base load plus this client's attempts, and
// its latency estimate its service time × (in flight + 1).
type tableProber struct {
	base map[string]float64
	svc  map[string]time.Duration
}

func (t tableProber) Probe(p *balancer.Peer, to balancer.ProbeReceiver) {
	rif := t.base[p.Addr()] + float64(p.InFlight())
	_ = to.Answer(p, balancer.ProbeAnswer{InFlight: rif, Latency: t.svc[p.Addr()] * time.Duration(rif+1)})
}

// Three servers: a holds 3 requests of other clients, b and c none; a and
// b serve in 10 ms, c in 20. A first answer from each (as the prober
// gives them) fills the pool. The hot threshold is the 0.3 quantile of the
// answered counts, by nearest rank. Pick 1: counts 3 0 0, threshold 0; b
// and c cold, b faster (10 ms against 20). Its probes then find b at 1
// (the attempt held), a at 3, c at 0: threshold still 0 (counts 0 0 0 1 3
// 3), c alone cold. Pick 2: c. Its probes find c at 1 too: every answer
// hot, b and c at 1, b's 20 ms below c's 40. Pick 3: b.
func ExamplePrequal() {
	now := time.Unix(1_700_000_000, 0)
	peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c")}
	pr := tableProber{
		base: map[string]float64{"a": 3},
		svc:  map[string]time.Duration{"a": 10 * time.Millisecond, "b": 10 * time.Millisecond, "c": 20 * time.Millisecond},
	}
	lb, err := balancer.PrequalSettings{Prober: pr}.New(peers,
		balancer.WithClock(func() time.Time { return now }), balancer.WithRand(rand.NewPCG(1, 2)))
	if err != nil {
		panic(err)
	}
	defer lb.Close()
	for _, p := range peers {
		pr.Probe(p, lb)
	}
	for range 3 {
		p, err := lb.Pick(nil)
		if err != nil {
			panic(err)
		}
		fmt.Println(p.Addr()) // the attempts are held: each counts in its server's load
	}
	s := lb.ProbeStats()
	fmt.Println("probes sent", s.Sent, "answers", s.Answered)
	// Output:
	// b
	// c
	// b
	// probes sent 9 answers 12
}

// silentProber sends nothing: it counts the probes and answers none.
type silentProber struct{}

func (silentProber) Probe(*balancer.Peer, balancer.ProbeReceiver) {}

// PrequalSettings set the probing rates. Ten requests on a clock that
// stands still, each of one pick: at 0.5 probes a pick, ⌊(k+1)/2⌋ − ⌊k/2⌋
// probes on the k-th, five in all; at the default 3 a pick, 30; at 3 a
// pick but 1000 a second, the bucket holds a hundredth of a second's
// worth, 10 probes, and refuses the other 20; at -1 (none), 0.
func ExamplePrequalSettings() {
	now := time.Unix(1_700_000_000, 0)
	for _, s := range []balancer.PrequalSettings{
		{Prober: silentProber{}, ProbesPerPick: 0.5},
		{Prober: silentProber{}},
		{Prober: silentProber{}, ProbesPerSecond: 1000},
		{Prober: silentProber{}, ProbesPerPick: -1},
	} {
		peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c")}
		lb, err := s.New(peers, balancer.WithClock(func() time.Time { return now }), balancer.WithRand(rand.NewPCG(1, 2)))
		if err != nil {
			panic(err)
		}
		for range 10 {
			p, _ := lb.Pick(nil)
			lb.Done(p, balancer.Outcome{Latency: time.Millisecond})
		}
		st := lb.ProbeStats()
		fmt.Printf("ProbesPerPick %v, ProbesPerSecond %v: sent %d, rate-limited %d\n", s.ProbesPerPick, s.ProbesPerSecond, st.Sent, st.RateLimited)
		lb.Close()
	}
	_, err := balancer.PrequalSettings{PoolSize: 2000}.New(nil)
	fmt.Println(err)
	// Output:
	// ProbesPerPick 0.5, ProbesPerSecond 0: sent 5, rate-limited 0
	// ProbesPerPick 0, ProbesPerSecond 0: sent 30, rate-limited 0
	// ProbesPerPick 0, ProbesPerSecond 1000: sent 10, rate-limited 20
	// ProbesPerPick -1, ProbesPerSecond 0: sent 0, rate-limited 0
	// balancer: Prequal: PrequalSettings.PoolSize(2000): size 2000 out of [1, 1024]: balancer: invalid configuration
}
