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
	lb, err := balancer.NewPrequal(peers,
		balancer.WithClock(func() time.Time { return now }), balancer.WithRand(rand.NewPCG(1, 2)), balancer.WithProber(pr))
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
