package balancer

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fallbackCase builds a picker over n healthy peers of weight 1 and a
// request that the picker hands to round robin: an empty key for the
// hash methods; for IPHash and the random methods, whose requests always
// hash or draw, a request whose 21 tries all land on peer 0, down.
type fallbackCase struct {
	name string
	max  int // the largest n the picker holds (ConsistentHash: MaxRingWeight)
	new  func(peers []*Peer) (Picker, func() *Request, error)
}

var fallbackCases = []fallbackCase{
	{"Hash", 1 << 20, func(ps []*Peer) (Picker, func() *Request, error) {
		h, err := NewHash(ps)
		return h, func() *Request { return &Request{} }, err
	}},
	{"ConsistentHash", MaxRingWeight, func(ps []*Peer) (Picker, func() *Request, error) {
		c, err := NewConsistentHash(ps)
		return c, func() *Request { return nil }, err
	}},
	{"ConsistentHashBounded", MaxRingWeight, func(ps []*Peer) (Picker, func() *Request, error) {
		c, err := NewConsistentHash(ps, WithBoundedLoad(1.25))
		return c, func() *Request { return &Request{} }, err
	}},
	{"IPHash", 1 << 20, func(ps []*Peer) (Picker, func() *Request, error) {
		// 10.0.0.x: key bytes 10, 0, 0. Over n peers of weight 1 the
		// candidates are the running hash mod n; mark them all down.
		addr := netip.MustParseAddr("10.0.0.1")
		weights := make([]int, len(ps))
		for i := range weights {
			weights[i] = 1
		}
		for _, c := range refIPCandidates(addr, weights, maxHashTries+1) {
			Down()(ps[c])
		}
		h, err := NewIPHash(ps)
		return h, func() *Request { r := &Request{}; r.SetAddr(addr); return r }, err
	}},
	{"Random", 1 << 20, func(ps []*Peer) (Picker, func() *Request, error) {
		Down()(ps[0])
		src := &zeroSource{}
		b, err := NewRandom(ps, WithRand(src))
		return b, func() *Request { return &Request{} }, err
	}},
	{"RandomTwo", 1 << 20, func(ps []*Peer) (Picker, func() *Request, error) {
		Down()(ps[0])
		b, err := NewRandomTwo(ps, WithRand(&zeroSource{}))
		return b, func() *Request { return &Request{} }, err
	}},
}

// zeroSource always returns 0, which an alias table over peers of equal
// weight (every column full) draws as peer 0: the column is the high half
// of x·n.
type zeroSource struct{}

func (zeroSource) Uint64() uint64 { return 0 }

// TestHashPickers_fallbackVisitsNoList checks that nginx's round-robin
// fallback of the hash and random methods does not scan the peers while
// their weights are static. nginx's scan adds every eligible peer's
// effective weight to its current weight, so an O(n) scan moves the stored
// current weight of every eligible peer on every pick; the precomputed
// cycle (up to MaxCycle units of weight) moves none, the scan grouped by
// weight (beyond) only the winner's. So over 2n fallback picks each one
// may change the stored current weight of at most one peer (2n picks cover
// two periods of the cycle; at 70,000 peers 200 picks of the grouped scan). The picks
// themselves are checked against nginx by TestHashPickers_fallbackAsModel
// and the recorded and live nginx tests.
func TestHashPickers_fallbackVisitsNoList(t *testing.T) {
	sizes := []int{100, 1000, 70000} // 70,000 passes MaxCycle
	for _, fc := range fallbackCases {
		for _, n := range sizes {
			if n > fc.max {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", fc.name, n), func(t *testing.T) {
				peers := hashBenchPeers(n)
				p, req, err := fc.new(peers)
				require.NoError(t, err)
				before := make([]int64, n)
				picks := 2 * n
				if n > 1000 {
					picks = 200 // the grouped scan; a period would be 70,000 picks
				}
				for k := range picks {
					for i, q := range peers {
						before[i] = q.currentWeight
					}
					got, err := p.Pick(req())
					require.NoError(t, err)
					require.False(t, got.down.Load())
					moved := 0
					for i, q := range peers {
						if q.currentWeight != before[i] {
							moved++
						}
					}
					require.LessOrEqual(t, moved, 1, "pick %d moved %d stored current weights", k, moved)
					require.NoError(t, p.Done(got, Outcome{}))
				}
			})
		}
	}
}

// TestConsistentHash_boundedTotalAcrossChanges is the reproduction of a
// bounded ConsistentHash's in-flight total going wrong across a list
// change: 40 attempts in flight on 4 peers, then a change that takes the
// busiest peer out (Remove, an Update without it), marks it down, reweighs
// it, or removes it and adds it back before or after its reports. The
// total the bound uses must stay the sum of the held peers' in-flight
// counts, counted here peer by peer, through the change and every report,
// and end at 0. Then the bound must hold against that count, and divert
// no key whose own peer is below it: each pick of a new key lands on its
// unbounded peer (from a ConsistentHash without the bound over the same
// peers) whenever that peer holds fewer than ⌈c·(T+1)·w/L⌉ attempts, T the
// attempts in flight, L the weight of the peers not down.
func TestConsistentHash_boundedTotalAcrossChanges(t *testing.T) {
	const factor = 1.25
	tests := []struct {
		name   string
		change func(c *ConsistentHash, victim *Peer) error
		after  func(c *ConsistentHash, victim *Peer) error // once every report is in
	}{
		{"Remove", func(c *ConsistentHash, v *Peer) error { return c.Remove(v) }, nil},
		{"Update without it", func(c *ConsistentHash, v *Peer) error {
			var snap []*Peer
			for _, q := range c.Peers() {
				if q != v {
					snap = append(snap, NewPeer(q.Addr()))
				}
			}
			return c.Update(snap)
		}, nil},
		{"SetDown", func(c *ConsistentHash, v *Peer) error { return c.SetDown(v, true) }, nil},
		{"SetWeight", func(c *ConsistentHash, v *Peer) error { return c.SetWeight(v, 3) }, nil},
		{"Remove, Add back at once", func(c *ConsistentHash, v *Peer) error {
			if err := c.Remove(v); err != nil {
				return err
			}
			return c.Add(v)
		}, nil},
		{"Remove, Add back after the reports", func(c *ConsistentHash, v *Peer) error { return c.Remove(v) },
			func(c *ConsistentHash, v *Peer) error { return c.Add(v) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := blPeerSet(4)
			c, err := NewConsistentHash(peers, WithBoundedLoad(factor))
			require.NoError(t, err)
			sum := func() (t int64) {
				for _, q := range c.Peers() {
					t += q.inFlight()
				}
				return t
			}
			total := func() int64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.inflight
			}
			var held []*Peer
			for k := range 40 {
				held = append(held, blPick(t, c, blKey(uint64(k%7))))
			}
			require.EqualValues(t, 40, sum())
			victim := peers[0]
			for _, q := range peers {
				if q.inFlight() > victim.inFlight() {
					victim = q
				}
			}
			require.Greater(t, victim.inFlight(), int64(0))
			require.NoError(t, tc.change(c, victim))
			assert.Equal(t, sum(), total(), "after the change")
			for k, q := range held {
				require.NoError(t, c.Done(q, Outcome{}))
				require.Equal(t, sum(), total(), "after report %d", k)
			}
			require.Zero(t, sum())
			if tc.after != nil {
				require.NoError(t, tc.after(c, victim))
			}
			require.Zero(t, total(), "every report is in")

			// The bound against the peers' own count, and no diversion
			// of a key whose own peer is below it.
			var snap []*Peer
			var live int64
			for _, q := range c.Peers() {
				opts := []PeerOption{Weight(int(q.weight.Load()))}
				if q.down.Load() {
					opts = append(opts, Down())
				} else {
					live += q.weight.Load()
				}
				snap = append(snap, NewPeer(q.Addr(), opts...))
			}
			plain, err := NewConsistentHash(snap)
			require.NoError(t, err)
			held = held[:0]
			for k := range 60 {
				key := blKey(uint64(k % 5))
				own := blPick(t, plain, key)
				require.NoError(t, plain.Done(own, Outcome{}))
				limit := func(q *Peer) int64 {
					return int64(math.Ceil(factor * float64(sum()+1) * float64(q.weight.Load()) / float64(live)))
				}
				var ownHere *Peer
				for _, q := range c.Peers() {
					if q.Addr() == own.Addr() {
						ownHere = q
					}
				}
				ownBelow := ownHere.inFlight() < limit(ownHere)
				inFlight := map[*Peer]int64{}
				limits := map[*Peer]int64{}
				for _, q := range c.Peers() {
					inFlight[q], limits[q] = q.inFlight(), limit(q)
				}
				got := blPick(t, c, key)
				require.Less(t, inFlight[got], limits[got], "pick %d: a peer at its bound took an attempt", k)
				if ownBelow {
					require.Equal(t, own.Addr(), got.Addr(), "pick %d: key %q diverted from its peer below the bound", k, key)
				}
				held = append(held, got)
			}
			for _, q := range held {
				require.NoError(t, c.Done(q, Outcome{}))
			}
			assert.Zero(t, total())
		})
	}
}

// TestHashPickers_fallbackConcurrent runs requests with and without keys
// (half of them fall back to round robin, from the cycle or the scan),
// failures and their retries, peers going down and up, and one peer removed
// and added back, all at once on 40 peers (the grouped scan), with and
// without max_conns on some peers. Under -race it checks the locking; every
// attempt must find its peer below its max_conns, and at the end every
// in-flight count, and a bounded ConsistentHash's total, must be back to 0.
func TestHashPickers_fallbackConcurrent(t *testing.T) {
	pickers := map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
		"ConsistentHashBounded": func(ps []*Peer, o ...Option) (Balancer, error) {
			return NewConsistentHash(ps, append(o, WithBoundedLoad(1.25))...)
		},
	}
	for name, mk := range pickers {
		for _, limited := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/maxconns=%v", name, limited), func(t *testing.T) {
				peers := make([]*Peer, 40)
				for i := range peers {
					opts := []PeerOption{Weight(1 + i%3), FailTimeout(time.Millisecond)}
					if limited && i%8 == 0 {
						opts = append(opts, MaxConns(2))
					}
					peers[i] = NewPeer(fmt.Sprintf("10.0.0.%d:80", i+1), opts...)
				}
				p, err := mk(peers)
				require.NoError(t, err)
				var wg sync.WaitGroup
				for g := range 4 {
					wg.Go(func() {
						var r Request
						for k := range 1500 {
							r.Reset()
							if k%2 == 0 {
								r.SetKey("k" + strconv.Itoa(k%97))
							}
							r.SetAddr(netip.AddrFrom4([4]byte{10, byte(g), byte(k), 1}))
							for range 3 {
								peer, err := p.Pick(&r)
								if err != nil {
									if !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
										t.Error(err)
									}
									break
								}
								if m := peer.maxConns.Load(); m != 0 && peer.inFlight() > m {
									t.Errorf("%s: %d in flight, max_conns %d", peer.Addr(), peer.inFlight(), m)
								}
								failed := k%13 == 0
								if err := p.Done(peer, Outcome{Failed: failed}); err != nil {
									t.Error(err)
								}
								if !failed {
									break
								}
							}
						}
					})
				}
				wg.Go(func() {
					for k := range 100 {
						if err := p.SetDown(peers[1+k%7], k%2 == 0); err != nil {
							t.Error(err)
						}
						if k%10 == 5 {
							if err := p.Remove(peers[9]); err != nil {
								t.Error(err)
							}
							if err := p.Add(peers[9]); err != nil {
								t.Error(err)
							}
						}
					}
				})
				wg.Wait()
				for _, q := range peers {
					assert.Zero(t, q.InFlight(), q.Addr())
				}
				if c, ok := p.(*ConsistentHash); ok {
					c.mu.Lock()
					assert.Zero(t, c.inflight, "the bound's total")
					c.mu.Unlock()
				}
			})
		}
	}
}
