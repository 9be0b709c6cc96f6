package capacity

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/lbgo/balancer"
)

// Oracle is the full-information reference: a picker that every client of
// a fleet shares, so that it sees each server's true requests in flight at
// the pick (every client's, counted from Pick to Done) and its current
// mean service time, and picks the shortest expected delay, (in flight +
// 1) × mean / workers, ties broken at random. No client-side picker can
// know as much; it bounds what one can reach on this machine. Safe for
// concurrent use.
type Oracle struct {
	servers []*Server
	workers []float64
	byAddr  map[string]int
	rif     []atomic.Int64

	mu  sync.Mutex
	rng *rand.Rand // guarded by mu
}

// NewOracle returns the oracle of servers, whose Addr must be set.
func NewOracle(servers []*Server) *Oracle {
	o := &Oracle{servers: servers, byAddr: map[string]int{}, rif: make([]atomic.Int64, len(servers)), rng: rand.New(rand.NewPCG(1, 2))}
	for i, s := range servers {
		o.byAddr[s.Addr] = i
		o.workers = append(o.workers, float64(cap(s.sem)))
	}
	return o
}

// Picker returns client c's view of o over peers, its own Peers of the
// servers' addresses.
func (o *Oracle) Picker(peers []*balancer.Peer) balancer.Picker {
	idx := make([]int, len(peers))
	for i, p := range peers {
		idx[i] = o.byAddr[p.Addr()]
	}
	return &oraclePicker{o: o, peers: peers, idx: idx}
}

type oraclePicker struct {
	o     *Oracle
	peers []*balancer.Peer
	idx   []int // the server of each peer
}

// Pick ignores r: the runs retry nothing.
func (p *oraclePicker) Pick(*balancer.Request) (*balancer.Peer, error) {
	o := p.o
	best, bestD, ties := -1, 0.0, 0
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, s := range p.idx {
		d := float64(o.rif[s].Load()+1) * float64(o.servers[s].Mean()) / o.workers[s]
		switch {
		case best < 0 || d < bestD:
			best, bestD, ties = i, d, 1
		case d == bestD:
			ties++
			if o.rng.IntN(ties) == 0 {
				best = i
			}
		}
	}
	if best < 0 {
		return nil, balancer.ErrNoLivePeer
	}
	o.rif[p.idx[best]].Add(1)
	return p.peers[best], nil
}

func (p *oraclePicker) Done(peer *balancer.Peer, _ balancer.Outcome) error {
	for i, q := range p.peers {
		if q == peer {
			p.o.rif[p.idx[i]].Add(-1)
			return nil
		}
	}
	return balancer.ErrUnknownPeer
}
