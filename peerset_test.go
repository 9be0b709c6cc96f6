package balancer

import (
	"fmt"
	"testing"
)

// BenchmarkUpdate reconciles a discovery snapshot of fresh peers with the
// picker's own addresses, every one kept, at 10 to 10,000 peers: the cost
// a watcher pays per snapshot.
func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			p, err := NewSmoothWRR(benchPeers(n))
			if err != nil {
				b.Fatal(err)
			}
			snaps := [2][]*Peer{benchPeers(n), benchPeers(n)}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if err := p.Update(snaps[i%2]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
