package balancer

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

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
					peers := hashBenchPeers(n)
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
// weight, then O(W·d)) or, past MaxCycle, the groups (O(n log n)).
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
