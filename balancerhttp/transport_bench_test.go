package balancerhttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/retrybudget"
)

// okBase answers every request at once with an empty 200, so that a
// benchmark over it times the Transport alone, not a network.
type okBase struct{}

func (okBase) RoundTrip(*http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Body: io.NopCloser(strings.NewReader("")), Header: http.Header{}}, nil
}

// BenchmarkTransport_roundTrip is one GET through a Transport over two
// peers (RoundRobin) and okBase, its body closed: the Transport's own cost
// per request, the hedging path's when Hedging is set (no hedge is sent:
// okBase answers before any delay).
func BenchmarkTransport_roundTrip(b *testing.B) {
	lb, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a:1"), balancer.NewPeer("b:1")})
	if err != nil {
		b.Fatal(err)
	}
	bud, err := retrybudget.New(0.05, 1, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Second, Budget: bud})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"off", "hedging"} {
		b.Run(name, func(b *testing.B) {
			tr := &balancerhttp.Transport{Picker: lb, Base: okBase{}}
			if name == "hedging" {
				tr.Hedging = h
			}
			req, err := http.NewRequest(http.MethodGet, "http://service/x", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
		})
	}
}

// BenchmarkTransport_loopback is one GET through a Transport over two
// peers (RoundRobin), real HTTP servers on loopback that answer "ok" at
// once, its body read to the end: the hedging path's cost per request
// beside a real round trip, no hedge sent (the 1 s delay never passes).
func BenchmarkTransport_loopback(b *testing.B) {
	var peers []*balancer.Peer
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = io.WriteString(w, "ok")
		}))
		b.Cleanup(srv.Close)
		peers = append(peers, balancer.NewPeer(srv.Listener.Addr().String()))
	}
	lb, err := balancer.NewRoundRobin(peers)
	if err != nil {
		b.Fatal(err)
	}
	bud, err := retrybudget.New(0.05, 1, 10*time.Second)
	if err != nil {
		b.Fatal(err)
	}
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Second, Budget: bud})
	if err != nil {
		b.Fatal(err)
	}
	for _, name := range []string{"off", "hedging"} {
		b.Run(name, func(b *testing.B) {
			base := http.DefaultTransport.(*http.Transport).Clone()
			b.Cleanup(base.CloseIdleConnections)
			tr := &balancerhttp.Transport{Picker: lb, Base: base}
			if name == "hedging" {
				tr.Hedging = h
			}
			req, err := http.NewRequest(http.MethodGet, "http://service/x", nil)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				resp, err := tr.RoundTrip(req)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := io.Copy(io.Discard, resp.Body); err != nil {
					b.Fatal(err)
				}
				_ = resp.Body.Close()
			}
			b.StopTimer()
			if st := h.Stats(); st.Sent != 0 {
				b.Fatalf("%d hedges sent: the benchmark times the path with none", st.Sent)
			}
		})
	}
}
