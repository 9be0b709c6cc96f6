package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// A Prober lets a Prequal picker ask each server for its requests in
// flight; here the busiest of three servers, holding 8 requests from
// other clients, gets none of the client's 20 requests. The servers run
// loadreport's Middleware, which answers the probes.
func ExampleProber() {
	release := make(chan struct{})
	var served [3]atomic.Int64
	var servers [3]*httptest.Server
	var mws [3]*loadreport.Middleware
	for i := range servers {
		m, err := loadreport.New()
		if err != nil {
			panic(err)
		}
		mws[i] = m
		servers[i] = httptest.NewServer(m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/hold" {
				<-release
				return
			}
			served[i].Add(1)
			io.WriteString(w, "ok")
		})))
		defer servers[i].Close()
	}
	// Server 2 is busy: 8 requests from elsewhere stay in flight.
	var held sync.WaitGroup
	for range 8 {
		held.Go(func() {
			if resp, err := http.Get(servers[2].URL + "/hold"); err == nil {
				resp.Body.Close()
			}
		})
	}
	defer held.Wait()
	defer close(release)
	waitFor(func() bool { return mws[2].InFlight() == 8 })

	prober, err := balancerhttp.NewProber() // GET /_lbgo/probe, 250 ms timeout
	if err != nil {
		panic(err)
	}
	var peers []*balancer.Peer
	for _, s := range servers {
		peers = append(peers, balancer.NewPeer(s.Listener.Addr().String()))
	}
	picker, err := balancer.PrequalSettings{Prober: prober}.New(peers)
	if err != nil {
		panic(err)
	}
	defer picker.Close() // closes the prober too

	// A first probe of each server, so that the first pick has answers.
	for _, p := range peers {
		prober.Probe(p, picker)
	}
	settled := func() bool { // every probe answered: the 3 above and the picker's
		s := prober.Stats()
		return s.Answered+s.Failed+s.Dropped == 3+picker.ProbeStats().Sent
	}
	waitFor(settled)

	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}}
	for range 20 {
		resp, err := client.Get("http://service/")
		if err != nil {
			panic(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		waitFor(settled) // a client whose requests are further apart than a probe
	}
	fmt.Println("served:", served[0].Load()+served[1].Load(), "by the idle servers,", served[2].Load(), "by the busy one")
	fmt.Println("probes failed:", prober.Stats().Failed)
	// Output:
	// served: 20 by the idle servers, 0 by the busy one
	// probes failed: 0
}

// waitFor polls cond for up to 5 s.
func waitFor(cond func() bool) {
	for end := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(end); {
		time.Sleep(time.Millisecond)
	}
}
