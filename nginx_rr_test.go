package balancer

import (
	"fmt"
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
		return h, func() *Request { r := &Request{}; r.SetClientAddr(addr); return r }, err
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
// cycle (up to maxCycle units of weight) moves none, the scan grouped by
// weight (beyond) only the winner's. So over 2n fallback picks each one
// may change the stored current weight of at most one peer (2n picks cover
// two periods of the cycle; at 70,000 peers 200 picks of the grouped scan). The picks
// themselves are checked against nginx by TestHashPickers_fallbackAsModel
// and the recorded and live nginx tests.
func TestHashPickers_fallbackVisitsNoList(t *testing.T) {
	sizes := []int{100, 1000, 70000} // 70,000 passes maxCycle
	for _, fc := range fallbackCases {
		for _, n := range sizes {
			if n > fc.max {
				continue
			}
			t.Run(fmt.Sprintf("%s/n=%d", fc.name, n), func(t *testing.T) {
				peers := addrPeers(n, 0)
				p, req, err := fc.new(peers)
				require.NoError(t, err)
				before := make([]int64, n)
				picks := 2 * n
				if n > 1000 {
					picks = 200 // the grouped scan; a period would be 70,000 picks
					if underRace {
						// One goroutine: the race detector has nothing to
						// watch, and it made the 200 picks' comparisons of
						// 70,000 weights most of this test's 62 s under it.
						// 20 picks still each check the grouped scan; the
						// plain run keeps 200.
						picks = 20
					}
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
							r.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(g), byte(k), 1}))
							attemptUpTo(t, p, &r, 3, k%13 == 0, func(peer *Peer) {
								if m := peer.maxConns.Load(); m != 0 && peer.inFlight() > m {
									t.Errorf("%s: %d in flight, max_conns %d", peer.Addr(), peer.inFlight(), m)
								}
							})
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

// hashFallbackSizes are the peer counts of the fallback benchmarks. A
// ConsistentHash holds at most MaxRingWeight units of weight, so its runs
// stop at 10,000 peers.
var hashFallbackSizes = []int{10, 100, 1000, 10000, 100000}

// hashFallbackPickers are the pickers whose requests with no key go to
// round robin (IPHash and the random methods fall back only past 20
// fruitless tries).
var hashFallbackPickers = []string{"Hash", "ConsistentHash", "ConsistentHashBounded"}

// forHashFallback runs bench for each fallback picker and size, with a
// fresh picker over n healthy peers of weight 1.
func forHashFallback(b *testing.B, bench func(b *testing.B, p Picker, peers []*Peer)) {
	for _, bp := range hashBenchPickers {
		for _, name := range hashFallbackPickers {
			if bp.name != name {
				continue
			}
			for _, n := range hashFallbackSizes {
				if name != "Hash" && n > MaxRingWeight {
					continue
				}
				b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
					peers := addrPeers(n, 0)
					p, err := bp.new(peers)
					require.NoError(b, err)
					b.ReportAllocs()
					bench(b, p, peers)
				})
			}
		}
	}
}

// fallbackPickDone is one request with no key, r (reset) or a nil Request
// if r is nil: Pick and its report.
func fallbackPickDone(b *testing.B, p Picker, r *Request) {
	if r != nil {
		r.Reset()
	}
	peer, err := p.Pick(r)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Done(peer, Outcome{}); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkHashFallback times Pick+Done of a request with no key, which
// the hash methods hand to nginx's smooth round-robin, while the weights
// are static: healthy peers of weight 1, after the list's first fallback
// (which builds the cycle or the groups; see
// BenchmarkHashFallbackAfterChange). req: a reused Request, reset for each
// request (Reset and the first attempt clear its tried set, one bit a
// peer); nil: a nil Request, one that is never retried.
func BenchmarkHashFallback(b *testing.B) {
	forHashFallback(b, func(b *testing.B, p Picker, _ []*Peer) {
		for _, nilReq := range []bool{false, true} {
			name := "req"
			if nilReq {
				name = "nil"
			}
			b.Run(name, func(b *testing.B) {
				r := &Request{}
				if nilReq {
					r = nil
				}
				b.ReportAllocs()
				fallbackPickDone(b, p, r)
				for b.Loop() {
					fallbackPickDone(b, p, r)
				}
			})
		}
	})
}

// BenchmarkHashFallbackAfterChange times a list change (one peer marked
// down or up again, which restarts the smooth sequence) followed by one
// request with no key: the change's own O(n) work and the fallback's first
// pick on the new list, which builds the cycle (a sort of the peers by
// weight, then O(W·d)) or, past maxCycle, the groups (O(n log n)).
func BenchmarkHashFallbackAfterChange(b *testing.B) {
	forHashFallback(b, func(b *testing.B, p Picker, peers []*Peer) {
		down := false
		for b.Loop() {
			down = !down
			if err := p.(Updater).SetDown(peers[0], down); err != nil {
				b.Fatal(err)
			}
			fallbackPickDone(b, p, nil)
		}
	})
}
