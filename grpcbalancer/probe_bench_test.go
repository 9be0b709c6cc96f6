package grpcbalancer

import (
	"testing"

	lbgo "github.com/lbgo/balancer"
)

// chanReceiver hands each probe answer to a channel.
type chanReceiver chan lbgo.ProbeAnswer

func (c chanReceiver) Answer(_ *lbgo.Peer, a lbgo.ProbeAnswer) error {
	c <- a
	return nil
}

// BenchmarkProber_roundTrip is one probe at a time of a loopback server
// with grpcreport's probe service, from Probe to the answer: the queue's
// hand-off, the probe RPC on the SubConn's connection and the answer's
// checks. Its allocations are the client's and the server's together
// (one process). round-trip-ns is the RoundTrip the prober measured.
func BenchmarkProber_roundTrip(b *testing.B) {
	s := startProbeServer(b, true, false)
	_, lb := dialProbing(b, `{}`, s)
	pr := proberOf(lb)
	peer := peersOf(lb)[s.addr]
	r := make(chanReceiver, 1)
	var rt int64
	b.ReportAllocs()
	for b.Loop() {
		pr.Probe(peer, r)
		a := <-r
		if a.Failed {
			b.Fatal("probe failed")
		}
		rt += int64(a.RoundTrip)
	}
	b.ReportMetric(float64(rt)/float64(b.N), "round-trip-ns")
}
