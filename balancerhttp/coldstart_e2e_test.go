package balancerhttp_test

import (
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/internal/capacity"
)

// The cold start end to end: the simulator's coldstart (sim/coldstart.go)
// on loopback HTTP servers behind loadreport's Middleware, time scaled so
// that a run takes seconds. Eight servers of four workers each (the
// simulator's M/M/4) of speeds 1, 1, 1, 1, 2, 2, 4, 4, a speed-1 server
// taking 160 ms a request on average (lognormal, capacity.Drawer): 25 to
// 100 requests a second, 400 in all (the simulator's, over 4: one
// client's HTTP on a loaded 2-core machine).
// One client per fleet sends Poisson arrivals at 68% of that, 272 a
// second, from its first request, for 8 s. ReportedWRR runs with A58's
// periods scaled down: a blackout of 3 s (75 services of a slow server,
// where A58's 10 s is 250 of the simulator's 40 ms), an update
// period of 300 ms; the servers' report window is 1 s, as in the capacity
// test. Under equal shares a slow server gets 34 requests a second where it
// serves 25, and the 3 s blackout leaves it about 27 queued (a second of
// its work).

// coldSpeeds are the servers' speeds, coldMean a speed-1 server's mean
// service time, coldLoad the load, coldRun a run's length.
var coldSpeeds = []float64{1, 1, 1, 1, 2, 2, 4, 4}

const (
	coldMean = 160 * time.Millisecond
	coldWork = 4 // workers a server
	coldLoad = 0.68
	coldRun  = 8 * time.Second
)

// coldWRROptions are A58's periods scaled down (see above).
var coldWRROptions = []balancer.Option{balancer.ReportedWRRSettings{
	BlackoutPeriod:         3 * time.Second,
	WeightUpdatePeriod:     300 * time.Millisecond,
	WeightExpirationPeriod: time.Minute,
}.Option()}

// coldResult is one fleet's run: each request's latency, the requests
// each server served of those arriving in the run's second half (from 4 s:
// the weights count from 3 s, and the report windows hold only such
// requests from 4 s), and the failures.
type coldResult struct {
	latencies []time.Duration
	late      []int
	failed    int
}

// runColdFleet runs one fleet of its own servers for coldRun with a
// client over newPicker's picker, the arrivals drawn from seed.
func runColdFleet(t *testing.T, newPicker func([]*balancer.Peer) (balancer.Balancer, error), seed uint64) *coldResult {
	t.Helper()
	var servers []*capacity.Server
	peers := make([]*balancer.Peer, len(coldSpeeds))
	index := map[string]int{}
	for i, v := range coldSpeeds {
		s := newCapServer(t, capacity.Spec{Name: fmt.Sprintf("s%d", i), Workers: coldWork, Mean: time.Duration(float64(coldMean) / v), Seed: seed*10 + uint64(i)})
		servers = append(servers, s)
		peers[i] = balancer.NewPeer(s.Addr)
		index[s.Name] = i
	}
	p, err := newPicker(peers)
	require.NoError(t, err)
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.MaxIdleConnsPerHost = 256
	t.Cleanup(base.CloseIdleConnections)
	var (
		mu  sync.Mutex
		res = &coldResult{late: make([]int, len(coldSpeeds))}
	)
	client := &http.Client{Timeout: 10 * time.Second, Transport: &balancerhttp.Transport{Picker: p, Base: base}}
	var rate float64
	for _, v := range coldSpeeds {
		rate += coldWork * v / coldMean.Seconds()
	}
	rate *= coldLoad
	rng := rand.New(rand.NewPCG(seed, 7))
	start := time.Now()
	var wg sync.WaitGroup
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= coldRun {
			break
		}
		time.Sleep(time.Until(start.Add(at))) // the arrivals are real time: real servers
		wg.Go(func() {
			began := time.Now()
			resp, err := client.Get("http://service/")
			var name []byte
			if err == nil {
				name, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			d := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			res.latencies = append(res.latencies, d)
			if err != nil || resp.StatusCode != http.StatusOK {
				res.failed++
				return
			}
			if i, ok := index[string(name)]; ok && at >= coldRun/2 {
				res.late[i]++
			}
		})
	}
	wg.Wait()
	return res
}

// TestReportedWRR_coldStartEndToEnd: the cold start on loopback, each
// picker on a fleet of its own, the fleets run at once (so that their
// latencies come from the same moments of the machine), 3 seeds.
// ReportedWRR's p99 must stay within 1.5× LeastConn's, and its shares of
// the second half within capacity.ShareTol (8 points) of capacity, a
// server's speed over 16. SmoothWRR, round robin over the equal
// weights, the rule ReportedWRR's blackout followed before, is the
// control: its p99 must pass 1.5× LeastConn's. The run takes about 8 s a
// seed; -short and -race skip it.
func TestReportedWRR_coldStartEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("8 s a seed on real servers: skipped with -short")
	}
	if raceSlowdown > 1 {
		// Measured: the three clients then cannot keep their 816
		// requests a second on time on a loaded 2-core machine, and
		// every fleet's p99 is the clients' own delay (the control
		// came to 0.77 of LeastConn's). The picker's races are the
		// root package's concurrent tests'.
		t.Skip("latencies under -race measure the race detector: skipped")
	}
	seeds := []uint64{1, 2, 3}
	want := make([]float64, len(coldSpeeds))
	for i, v := range coldSpeeds {
		want[i] = v / 16
	}
	var ratios, controls []float64
	for _, seed := range seeds {
		fleets := []struct {
			name string
			new  func([]*balancer.Peer) (balancer.Balancer, error)
			res  *coldResult
		}{
			{name: "ReportedWRR", new: capAlgorithm(t, "ReportedWRR", coldWRROptions...)},
			{name: "LeastConn", new: capAlgorithm(t, "LeastConn")},
			{name: "SmoothWRR", new: capAlgorithm(t, "SmoothWRR")},
		}
		var wg sync.WaitGroup
		for i := range fleets {
			wg.Go(func() { fleets[i].res = runColdFleet(t, fleets[i].new, seed) })
		}
		wg.Wait()
		p99 := map[string]time.Duration{}
		for _, f := range fleets {
			p99[f.name] = capacity.Percentile(f.res.latencies, 0.99)
			var total int
			for _, n := range f.res.late {
				total += n
			}
			got := make([]float64, len(f.res.late))
			for i, n := range f.res.late {
				got[i] = float64(n) / float64(max(total, 1))
			}
			t.Logf("seed %d %s: %d requests, %d failed, p99 %v; shares from 4 s %s", seed, f.name, len(f.res.latencies), f.res.failed, p99[f.name].Round(time.Millisecond), capacity.FormatShares(got))
			if f.name == "ReportedWRR" {
				assert.InDeltaSlice(t, want, got, capacity.ShareTol, "seed %d: ReportedWRR's shares from 4 s", seed)
				assert.Zero(t, f.res.failed, "seed %d", seed)
			}
		}
		r := float64(p99["ReportedWRR"]) / float64(p99["LeastConn"])
		c := float64(p99["SmoothWRR"]) / float64(p99["LeastConn"])
		ratios, controls = append(ratios, r), append(controls, c)
		assert.LessOrEqual(t, r, 1.5, "seed %d: ReportedWRR's p99 %v, LeastConn's %v", seed, p99["ReportedWRR"], p99["LeastConn"])
		assert.Greater(t, c, 1.5, "seed %d: the control, SmoothWRR's p99 %v, LeastConn's %v", seed, p99["SmoothWRR"], p99["LeastConn"])
	}
	slices.Sort(ratios)
	slices.Sort(controls)
	t.Logf("p99 over LeastConn's, over %d seeds: ReportedWRR median %.2f (%.2f-%.2f), SmoothWRR median %.2f (%.2f-%.2f)",
		len(seeds), ratios[len(ratios)/2], ratios[0], ratios[len(ratios)-1], controls[len(controls)/2], controls[0], controls[len(controls)-1])
}
