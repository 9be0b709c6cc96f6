package balancerhttp_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// stallFleet is a few loopback servers sharing one rule on the arrivals of
// each request (told apart by its X-Request-Id): an arrival that stall
// selects (by its rank among the request's arrivals, 0 for the first)
// reads the request's body, says so on arrived (for the hedge's timer)
// and on held (for the test), and holds the request until its context
// ends (the client went away) or the test releases every stall
// (releaseAll), then says so on ended; every other arrival reads the body and
// answers at once with reply. HedgePolicy.Timer is timer: the hedge's
// delay ends when a stalled server has the request, not on the wall clock.
// Each arrival is logged.
type stallFleet struct {
	stall   func(rank int) bool
	reply   func(w http.ResponseWriter, server int, id string)
	arrived chan time.Time
	held    chan struct{}
	ended   chan struct{}
	release chan struct{}
	freed   sync.Once
	timers  atomic.Int64 // how often the hedge's delay was asked for
	servers []*httptest.Server
	peers   []*balancer.Peer

	mu   sync.Mutex
	log  []stallArrival
	seen map[string]int
}

type stallArrival struct {
	server, rank int
	id           string
	body         []byte
	stalled      bool
	cancelled    bool // the stall ended with the request's context
}

// newStallFleet starts n servers; reply nil answers "<server> <id>".
func newStallFleet(t *testing.T, n int, stall func(rank int) bool, reply func(w http.ResponseWriter, server int, id string)) *stallFleet {
	f := &stallFleet{
		stall: stall, reply: reply,
		arrived: make(chan time.Time, 64), held: make(chan struct{}, 64), ended: make(chan struct{}, 64), release: make(chan struct{}),
		seen: map[string]int{},
	}
	if f.reply == nil {
		f.reply = func(w http.ResponseWriter, server int, id string) { _, _ = fmt.Fprintf(w, "%d %s", server, id) }
	}
	for i := range n {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { f.serve(w, r, i) }))
		f.servers = append(f.servers, srv)
		f.peers = append(f.peers, balancer.NewPeer(addrOf(srv), balancer.MaxFails(0)))
	}
	t.Cleanup(func() {
		f.releaseAll() // a stall the test did not end
		for _, s := range f.servers {
			s.Close()
		}
	})
	return f
}

func (f *stallFleet) serve(w http.ResponseWriter, r *http.Request, server int) {
	id := r.Header.Get("X-Request-Id")
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return // the client went away while sending it
	}
	f.mu.Lock()
	rank := f.seen[id]
	f.seen[id]++
	k := len(f.log)
	stall := f.stall(rank)
	f.log = append(f.log, stallArrival{server: server, rank: rank, id: id, body: body, stalled: stall})
	f.mu.Unlock()
	if stall {
		f.arrived <- time.Time{}
		f.held <- struct{}{}
		select {
		case <-r.Context().Done():
			f.mu.Lock()
			f.log[k].cancelled = true
			f.mu.Unlock()
			f.ended <- struct{}{}
			return
		case <-f.release:
			f.ended <- struct{}{}
		}
	}
	f.reply(w, server, id)
}

// timer is a HedgePolicy.Timer whose delay ends at a stalled arrival.
func (f *stallFleet) timer(time.Duration) (<-chan time.Time, func() bool) {
	f.timers.Add(1)
	return f.arrived, func() bool { return true }
}

// hedging returns a Hedging on f's timer, MaxAttempts 2, with a budget
// that allows every hedge.
func (f *stallFleet) hedging(t *testing.T) *balancer.Hedging {
	bud, err := retrybudget.New(1, 0, time.Minute)
	require.NoError(t, err)
	h, err := balancer.NewHedging(balancer.HedgePolicy{MaxAttempts: 2, Delay: time.Hour, Budget: bud, Timer: f.timer})
	require.NoError(t, err)
	return h
}

// waitEnded waits for k stalls to end, failing the test after a patience
// far beyond what a cancellation takes on loopback.
func (f *stallFleet) waitEnded(t *testing.T, k int) {
	t.Helper()
	patience := time.NewTimer(10 * time.Second)
	defer patience.Stop()
	for range k {
		select {
		case <-f.ended:
		case <-patience.C:
			t.Fatalf("a stalled server still holds its request after 10 s: its client's cancellation never reached it")
		}
	}
}

// arrivals returns a copy of the log.
func (f *stallFleet) arrivals() []stallArrival {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]stallArrival(nil), f.log...)
}

// releaseAll ends every stall, now and to come.
func (f *stallFleet) releaseAll() { f.freed.Do(func() { close(f.release) }) }

// doWithin sends req through tr, failing the test if no answer comes
// within 10 s, far beyond what any of these tests waits on loopback: a
// regression that leaves an attempt waiting fails the test instead of
// hanging it (the fleet's cleanup then releases its stalls).
func doWithin(t *testing.T, tr http.RoundTripper, req *http.Request) (*http.Response, error) {
	t.Helper()
	type result struct {
		resp *http.Response
		err  error
	}
	c := make(chan result, 1)
	go func() {
		resp, err := (&http.Client{Transport: tr}).Do(req)
		c <- result{resp, err}
	}()
	patience := time.NewTimer(10 * time.Second)
	defer patience.Stop()
	select {
	case r := <-c:
		return r.resp, r.err
	case <-patience.C:
		t.Fatalf("%s %s: no answer within 10 s", req.Method, req.URL)
		return nil, nil
	}
}

// patient is a client of tr whose requests give up after 10 s, as
// doWithin does, for requests sent from goroutines of their own.
func patient(tr http.RoundTripper) *http.Client {
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}
