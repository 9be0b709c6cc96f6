package balancerhttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// chanReceiver hands each answer to a channel.
type chanReceiver chan balancer.ProbeAnswer

func (c chanReceiver) Answer(_ *balancer.Peer, a balancer.ProbeAnswer) error {
	c <- a
	return nil
}

// BenchmarkProber_roundTrip is one probe at a time of a loopback server
// behind loadreport's Middleware, from Probe to the answer: the queue's
// hand-off, the GET over a kept connection, the Middleware's answer and
// ParseProbe. Its allocations are the client's and the server's together
// (one process). round-trip-ns is the RoundTrip the prober measured.
func BenchmarkProber_roundTrip(b *testing.B) {
	m, err := loadreport.New()
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(m.Handler(http.NotFoundHandler()))
	defer srv.Close()
	pr, err := balancerhttp.NewProber()
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	peer := balancer.NewPeer(srv.Listener.Addr().String())
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

// BenchmarkProber_probe is Probe alone, on a full queue (it drops): what
// a pick pays per probe.
func BenchmarkProber_probe(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	defer srv.Close()
	pr, err := balancerhttp.NewProber(balancerhttp.WithProbeWorkers(1), balancerhttp.WithProbeQueue(1))
	if err != nil {
		b.Fatal(err)
	}
	defer pr.Close()
	peer := balancer.NewPeer(srv.Listener.Addr().String())
	r := make(chanReceiver, 1)
	b.ReportAllocs()
	for b.Loop() {
		pr.Probe(peer, r)
	}
}
