package metrics

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// TestCollector_blind: Prequal (with balancerhttp's Prober) and LeastConn
// with WithReportedLoad, each in front of four real servers on loopback of
// which the first two run loadreport's Middleware (the probe path, a
// report on every reply) and the last two do not (a plain 404 on the
// probe path, no report). 300 requests through a Transport, 10 ms apart
// on the pickers' clock: the scrape shows balancer_peer_blind 1 for
// exactly the last two and balancer_blind_total 2, one per
// EventPeerBlind, each of which came within 2 s of the first request.
func TestCollector_blind(t *testing.T) {
	var addrs []string
	for i := range 4 {
		var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == loadreport.DefaultProbePath {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write([]byte("ok"))
		})
		if i < 2 {
			m, err := loadreport.New()
			if err != nil {
				t.Fatal(err)
			}
			h = m.Handler(h)
		}
		srv := httptest.NewServer(h)
		defer srv.Close()
		addrs = append(addrs, strings.TrimPrefix(srv.URL, "http://"))
	}
	start := time.Unix(1000, 0)
	for _, name := range []string{"Prequal", "LeastConn"} {
		t.Run(name, func(t *testing.T) {
			var ns atomic.Int64
			clock := func() time.Time { return start.Add(time.Duration(ns.Load())) }
			var peers []*balancer.Peer
			for _, a := range addrs {
				peers = append(peers, balancer.NewPeer(a))
			}
			var mu sync.Mutex // Prequal's events come from the Prober's workers
			var blindAt []time.Duration
			var blindPeers []string
			opts := []balancer.Option{balancer.WithClock(clock), balancer.WithEvents(func(e balancer.Event) {
				mu.Lock()
				defer mu.Unlock()
				if e.Kind == balancer.EventPeerBlind {
					blindAt = append(blindAt, e.Time.Sub(start))
					blindPeers = append(blindPeers, e.Peer.Addr())
				}
			})}
			var b balancer.Balancer
			var settled func() bool
			if name == "Prequal" {
				pr, err := balancerhttp.NewProber()
				if err != nil {
					t.Fatal(err)
				}
				q, err := balancer.PrequalSettings{Prober: pr}.New(peers, opts...)
				if err != nil {
					t.Fatal(err)
				}
				defer q.Close()
				b = q
				settled = func() bool {
					s := pr.Stats()
					return s.Answered+s.Failed+s.Dropped == q.ProbeStats().Sent
				}
			} else {
				lc, err := balancer.NewLeastConn(peers, append(opts, balancer.WithReportedLoad(10*time.Second, 4))...)
				if err != nil {
					t.Fatal(err)
				}
				b = lc
				settled = func() bool { return true }
			}
			reg := prometheus.NewPedanticRegistry()
			if err := reg.Register(New("lb", b)); err != nil {
				t.Fatal(err)
			}
			client := &http.Client{Transport: &balancerhttp.Transport{Picker: b}, Timeout: 5 * time.Second}
			for range 300 {
				resp, err := client.Get("http://service/")
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				for end := time.Now().Add(5 * time.Second); !settled(); { // the probes' answers, in the clock's order
					if time.Now().After(end) {
						t.Fatal("probes unanswered")
					}
					time.Sleep(time.Millisecond)
				}
				ns.Add(int64(10 * time.Millisecond))
			}
			var want strings.Builder
			want.WriteString("# HELP balancer_peer_blind 1 while the picker hears nothing it can use of the peer's load (no probe answer, no load report) and falls back for it.\n# TYPE balancer_peer_blind gauge\n")
			sorted := slices.Sorted(slices.Values(addrs)) // the exposition's order
			for _, a := range sorted {
				v := 0
				if i := slices.Index(addrs, a); i >= 2 {
					v = 1
				}
				fmt.Fprintf(&want, "balancer_peer_blind{peer=%q,picker=\"lb\"} %d\n", a, v)
			}
			want.WriteString("# HELP balancer_blind_total Times the picker went blind to a peer (EventPeerBlind).\n# TYPE balancer_blind_total counter\nbalancer_blind_total{picker=\"lb\"} 2\n")
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want.String()), BlindName, BlindTotalName); err != nil {
				t.Error(err)
			}
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(blindPeers)
			if !slices.Equal(blindPeers, slices.Sorted(slices.Values(addrs[2:]))) {
				t.Errorf("EventPeerBlind for %v, want %v", blindPeers, addrs[2:])
			}
			for _, d := range blindAt {
				if d > 2*time.Second {
					t.Errorf("EventPeerBlind %v after the first request, want within 2s", d)
				}
			}
		})
	}
}
