package capacity

import (
	"math/rand/v2"
	"sync"

	"github.com/lbgo/balancer"
)

// Oracle is the full-information reference: one picker that every client
// of a fleet shares, so that it sees each server's true requests in flight
// at the pick (every client's, counted from the pick to the attempt's
// end) and its current mean service time, and picks the shortest expected
// delay, (in flight + 1) × mean / workers, ties broken at random: the
// simulator's full-information oracle on real servers. No client-side
// picker can know as much; it bounds what one can reach on this machine.
// Safe for concurrent use.
type Oracle struct {
	servers []*Server
	byAddr  map[string]int

	mu  sync.Mutex
	rif []int64    // guarded by mu: each server's attempts in flight
	rng *rand.Rand // guarded by mu
}

// NewOracle returns the oracle of servers, whose Addr must be set.
func NewOracle(servers []*Server) *Oracle {
	o := &Oracle{servers: servers, byAddr: map[string]int{}, rif: make([]int64, len(servers)), rng: rand.New(rand.NewPCG(1, 2))}
	for i, s := range servers {
		o.byAddr[s.Addr] = i
	}
	return o
}

// Index returns the index of the server at addr.
func (o *Oracle) Index(addr string) (int, bool) {
	i, ok := o.byAddr[addr]
	return i, ok
}

// Choose returns the position in among (server indexes) of the server of
// the shortest expected delay, and counts an attempt on it; -1 for none.
func (o *Oracle) Choose(among []int) int {
	best, bestD, ties := -1, 0.0, 0
	o.mu.Lock()
	defer o.mu.Unlock()
	for i, s := range among {
		srv := o.servers[s]
		d := float64(o.rif[s]+1) * float64(srv.Mean()) / float64(cap(srv.workers))
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
	if best >= 0 {
		o.rif[among[best]]++
	}
	return best
}

// Release ends an attempt on server s that Choose counted.
func (o *Oracle) Release(s int) {
	o.mu.Lock()
	o.rif[s]--
	o.mu.Unlock()
}

// Picker returns one client's view of o, a balancer.Picker over Peers of
// its own of the servers' addresses.
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

// Pick ignores its request: the runs retry nothing.
func (p *oraclePicker) Pick(*balancer.Request) (*balancer.Peer, error) {
	i := p.o.Choose(p.idx)
	if i < 0 {
		return nil, balancer.ErrNoLivePeer
	}
	return p.peers[i], nil
}

func (p *oraclePicker) Done(peer *balancer.Peer, _ balancer.Outcome) error {
	for i, q := range p.peers {
		if q == peer {
			p.o.Release(p.idx[i])
			return nil
		}
	}
	return balancer.ErrUnknownPeer
}
