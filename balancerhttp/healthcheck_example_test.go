package balancerhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// A backend whose health path fails is taken down after three checks in a
// row, and brought up after two passes once it recovers.
func ExampleNewHealthChecker() {
	var sick atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" && sick.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	picker, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(srv.Listener.Addr().String())})
	if err != nil {
		panic(err)
	}
	changed := make(chan bool, 2)
	hc, err := balancerhttp.NewHealthChecker(picker,
		balancerhttp.HealthPath("/healthz"),
		balancerhttp.HealthInterval(20*time.Millisecond),
		balancerhttp.HealthOnChange(func(p *balancer.Peer, down bool) { changed <- down }))
	if err != nil {
		panic(err)
	}
	defer hc.Close()

	sick.Store(true)
	fmt.Println("down:", <-changed)
	sick.Store(false)
	fmt.Println("down:", <-changed)
	// Output:
	// down: true
	// down: false
}
