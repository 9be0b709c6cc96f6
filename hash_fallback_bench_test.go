package balancer

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// hashFallbackSizes are the peer counts of the fallback benchmark. A
// ConsistentHash holds at most MaxRingWeight units of weight, so its runs
// stop at 10,000 peers.
var hashFallbackSizes = []int{10, 100, 1000, 10000, 100000}

// BenchmarkHashFallback times Pick+Done of a request with no key, which
// the hash methods hand to nginx's smooth round-robin, over healthy peers
// of weight 1 whose weights do not change.
func BenchmarkHashFallback(b *testing.B) {
	for _, bp := range hashBenchPickers {
		if bp.name == "IPHash" || bp.name == "Random" || bp.name == "RandomTwo" {
			continue // they fall back only past 20 fruitless tries
		}
		for _, n := range hashFallbackSizes {
			if bp.name != "Hash" && n > MaxRingWeight {
				continue
			}
			b.Run(fmt.Sprintf("%s/n=%d", bp.name, n), func(b *testing.B) {
				p, err := bp.new(hashBenchPeers(n))
				require.NoError(b, err)
				var r Request
				b.ReportAllocs()
				for b.Loop() {
					r.Reset()
					peer, err := p.Pick(&r)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Done(peer, Outcome{}); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
