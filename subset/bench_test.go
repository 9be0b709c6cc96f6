package subset

import (
	"fmt"
	"github.com/lbgo/balancer"
	"testing"
)

// BenchmarkSubsetPick is a pick and its report through a Subset of 30 out
// of n backends beside the same inner picker holding those 30 alone: the
// wrapper's cost is one call.
func BenchmarkSubsetPick(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		by := mustSubsetter(Ring(7, 100, 30))
		for _, wrapped := range []bool{false, true} {
			name := fmt.Sprintf("backends=%d/plain", n)
			if wrapped {
				name = fmt.Sprintf("backends=%d/subset", n)
			}
			b.Run(name, func(b *testing.B) {
				backends := benchPeers(n)
				inner, err := balancer.NewP2CPeakEWMA(nil)
				if err != nil {
					b.Fatal(err)
				}
				var lb balancer.Balancer = inner
				if wrapped {
					if lb, err = New(inner, backends, by); err != nil {
						b.Fatal(err)
					}
				} else {
					keys := make([]string, n)
					for i, p := range backends {
						keys[i] = p.HashText()
					}
					var sub []*balancer.Peer
					for _, i := range by.Subset(keys) {
						sub = append(sub, backends[i])
					}
					if err := inner.Update(sub); err != nil {
						b.Fatal(err)
					}
				}
				var r balancer.Request
				b.ReportAllocs()
				for b.Loop() {
					r.Reset()
					p, err := lb.Pick(&r)
					if err != nil {
						b.Fatal(err)
					}
					_ = lb.Done(p, balancer.Outcome{})
				}
			})
		}
	}
}

// BenchmarkSubsetUpdate is a discovery update of n backends through a
// Subset of 30: the subset recomputed (hashing and sorting the n keys) and
// the inner Update of 30.
func BenchmarkSubsetUpdate(b *testing.B) {
	for _, n := range []int{100, 1000, 10000} {
		b.Run(fmt.Sprintf("backends=%d", n), func(b *testing.B) {
			inner, err := balancer.NewRoundRobin(nil)
			if err != nil {
				b.Fatal(err)
			}
			s, err := New(inner, benchPeers(n), mustSubsetter(Ring(7, 100, 30)))
			if err != nil {
				b.Fatal(err)
			}
			snapshot := benchPeers(n)
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Update(snapshot); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
