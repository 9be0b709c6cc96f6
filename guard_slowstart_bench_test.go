package balancer

import (
	"fmt"
	"testing"
	"time"
)

// BenchmarkGuardSlowStart times Pick+Done of every picker that accepts
// WithSlowStart at 10 to 10,000 peers (benchPeers' weights, lognormal
// latencies reported), serially, in three states: off (no option, the
// baseline), idle (the option on, no peer warming: the peers given at
// construction do not warm), and warming (one peer in ten added after
// construction, warming for the whole run: a window of an hour on the
// default clock).
func BenchmarkGuardSlowStart(b *testing.B) {
	lat := benchLognormal(4096, 1)
	for _, name := range slowStartPickers {
		a, err := AlgorithmNamed(name)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range benchLatencySizes {
			for _, state := range []string{"off", "idle", "warming"} {
				b.Run(fmt.Sprintf("%s/peers=%d/%s", name, n, state), func(b *testing.B) {
					peers := benchPeers(n)
					var opts []Option
					if state != "off" {
						opts = append(opts, WithSlowStart(time.Hour, 1, 10))
					}
					initial := peers
					if state == "warming" {
						initial = peers[:n-n/10]
					}
					p, err := a.New(initial, opts...)
					if err != nil {
						b.Fatal(err)
					}
					if state == "warming" {
						if err := p.(Updater).Add(peers[n-n/10:]...); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportAllocs()
					i := 0
					for b.Loop() {
						peer, _ := p.Pick(nil)
						_ = p.Done(peer, Outcome{Latency: lat[i&4095]})
						i++
					}
				})
			}
		}
	}
}
