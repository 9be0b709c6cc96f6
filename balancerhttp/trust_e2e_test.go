package balancerhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// TestPrequal_idleProbeLiar is the mis-wired server of issue 27 over real
// HTTP: four backends behind loadreport's Middleware, one of them ten
// times slower, whose probe path is served by loadreport.ProbeHandler on
// a Tracker that sees none of its traffic, so that every probe says 0 in
// flight and no latency. Prequal with NewProber, 32 client goroutines. The
// slow backend's share is counted by the servers themselves; its fair
// share is a quarter, and a backend ten times slower should get less
// (about 1/31 by speed). Before the trust checks it took more than half;
// it must stay within its fair share, and the picker must count the
// answers it distrusted.
func TestPrequal_idleProbeLiar(t *testing.T) {
	const (
		n        = 4
		clients  = 32
		each     = 40
		fast     = 2 * time.Millisecond * raceSlowdown // the client's own costs well below the service times
		slowBy   = 10
		probeURL = "/_lbgo/probe"
	)
	var served [n]atomic.Int64
	peers := make([]*balancer.Peer, n)
	for i := range n {
		m, err := loadreport.New()
		require.NoError(t, err)
		svc := fast
		if i == 0 {
			svc = slowBy * fast
		}
		work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(svc) // the server's service time, not a wait of the test's
			served[i].Add(1)
		})
		var h http.Handler = m.Handler(work)
		if i == 0 {
			idle, err := loadreport.NewTracker() // sees none of the traffic
			require.NoError(t, err)
			mux := http.NewServeMux()
			mux.Handle(probeURL, loadreport.ProbeHandler(idle))
			mux.Handle("/", h)
			h = mux
		}
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		peers[i] = balancer.NewPeer(addrOf(srv))
	}
	pr, err := balancerhttp.NewProber()
	require.NoError(t, err)
	picker, err := balancer.PrequalSettings{Prober: pr}.New(peers)
	require.NoError(t, err)
	defer picker.Close()
	client := &http.Client{Transport: &balancerhttp.Transport{Picker: picker}, Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	errs := make(chan error, clients*each)
	for range clients {
		wg.Go(func() {
			for range each {
				resp, err := client.Get("http://backend/work")
				if err != nil {
					errs <- err
					continue
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					errs <- fmt.Errorf("status %d", resp.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var total int64
	for i := range served {
		total += served[i].Load()
	}
	require.Equal(t, int64(clients*each), total)
	share := float64(served[0].Load()) / float64(total)
	st := picker.ProbeStats()
	t.Logf("slow backend's share %.3f of %d; probes %+v", share, total, st)
	assert.LessOrEqual(t, share, 1.0/n, "the slow backend whose probes say idle")
	if raceSlowdown == 1 {
		// Under -race the client's own costs (15-60 ms a request) swamp
		// the services' and no reply is 8× slower than the liar's answers
		// imply: its latency floor alone holds it.
		assert.Positive(t, st.Distrusted, "the mis-wired server's answers counted")
	}
}
