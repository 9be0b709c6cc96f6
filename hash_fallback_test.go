package balancer

import (
	"fmt"
	"math"
	"net/netip"
	"testing"

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
