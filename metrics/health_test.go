package metrics

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestHealthCheckCollector scrapes a checker with fall 2 over one loopback
// backend whose every check fails (503): once the peer is down, the
// checker has made at least 2 checks, all failed, and holds 1 peer down.
// The checker is closed first, so the counts stand still for the scrape.
func TestHealthCheckCollector(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	bal, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(srv.Listener.Addr().String())})
	if err != nil {
		t.Fatal(err)
	}
	down := make(chan struct{})
	hc, err := balancerhttp.NewHealthChecker(bal, balancerhttp.HealthInterval(10*time.Millisecond), balancerhttp.HealthFall(2),
		balancerhttp.HealthOnChange(func(*balancer.Peer, bool) { close(down) }))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-down:
	case <-time.After(5 * time.Second):
		t.Fatal("the peer was not taken down in 5 s")
	}
	hc.Close()
	st := hc.Stats()
	if st.Checks < 2 || st.Failed != st.Checks || st.Down != 1 {
		t.Fatalf("Stats = %+v, want at least 2 checks, all failed, 1 down", st)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(NewHealthCheck("checker", hc)); err != nil {
		t.Fatal(err)
	}
	n := strconv.FormatUint(st.Checks, 10)
	want := `
# HELP balancer_health_checks_failed_total Health checks failed.
# TYPE balancer_health_checks_failed_total counter
balancer_health_checks_failed_total{checker="checker"} ` + n + `
# HELP balancer_health_checks_total Health checks made.
# TYPE balancer_health_checks_total counter
balancer_health_checks_total{checker="checker"} ` + n + `
# HELP balancer_health_down_peers Peers the health checker holds down.
# TYPE balancer_health_down_peers gauge
balancer_health_down_peers{checker="checker"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
