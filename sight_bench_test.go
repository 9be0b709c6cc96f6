package balancer

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkSight_done measures Pick+Done of the pickers the watch runs in,
// with a usable report on every reply (the watch reads one word), with
// none (each reply a compare-and-swap until the peer is blind; the clock
// stands still, so it never is: the watch's worst case) and with none from
// peers already blind (a read again).
func BenchmarkSight_done(b *testing.B) {
	at := time.Unix(1000, 0)
	clock := func() time.Time { return at }
	peers := func() []*Peer {
		var ps []*Peer
		for i := range 8 {
			ps = append(ps, NewPeer("p"+strconv.Itoa(i)))
		}
		return ps
	}
	usable := &ServerLoad{Utilization: .5, RPS: 100, InFlight: 2, HasInFlight: true}
	for _, c := range []struct {
		name string
		new  func() (Balancer, error)
	}{
		{"LeastConn+WithReportedLoad", func() (Balancer, error) {
			return NewLeastConn(peers(), WithClock(clock), WithReportedLoad(10*time.Second, 4))
		}},
		{"ReportedWRR", func() (Balancer, error) { return NewReportedWRR(peers(), WithClock(clock)) }},
	} {
		for _, load := range []struct {
			name string
			l    *ServerLoad
		}{{"report", usable}, {"none", nil}} {
			b.Run(c.name+"/"+load.name, func(b *testing.B) {
				p, err := c.new()
				if err != nil {
					b.Fatal(err)
				}
				o := Outcome{Latency: time.Millisecond, Load: load.l}
				b.ReportAllocs()
				for b.Loop() {
					q, err := p.Pick(nil)
					if err != nil {
						b.Fatal(err)
					}
					if err := p.Done(q, o); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
