package sim

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer/loadreport"
)

// TestProbeLatencyMirrorsTracker drives a loadreport.Tracker on a fake
// clock and a simulated backend's latencyByLevel with the same jobs, a
// queue of two workers under bursts of load (so RIFs run from 0 to tens,
// and the lower-level and report-window fallbacks all happen), and
// compares their probe answers at random instants: the same in-flight
// count, and latencies within the Tracker's rounding to the microsecond.
func TestProbeLatencyMirrorsTracker(t *testing.T) {
	now := epoch
	tr, err := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return now }), loadreport.WithWindow(ReportWindow))
	require.NoError(t, err)
	b := backendState{workers: []int64{0, 0}, srv: server{byLevel: new(latencyByLevel)}}

	// Jobs: arrivals in bursts, exponential service, first come first
	// served on two workers.
	r := rand.New(rand.NewPCG(1, 2))
	type ev struct {
		at    int64
		begin bool
		job   int
	}
	type job struct {
		arrive, end int64
		rif         int64
		began       loadreport.Began
	}
	var jobs []job
	var evs []ev
	var at int64
	for at < int64(20*time.Second) {
		gap := 30 * ms
		if (at/int64(2*time.Second))%2 == 1 {
			gap = 3 * ms // a burst: the queue grows
		}
		at += int64(r.ExpFloat64() * float64(gap))
		k := b.earliest()
		start := max(at, b.workers[k])
		end := start + int64(r.ExpFloat64()*float64(8*ms))
		b.workers[k] = end
		jobs = append(jobs, job{arrive: at, end: end})
		evs = append(evs, ev{at, true, len(jobs) - 1}, ev{end, false, len(jobs) - 1})
	}
	slices.SortStableFunc(evs, func(a, b ev) int {
		switch {
		case a.at < b.at:
			return -1
		case a.at > b.at:
			return 1
		}
		return 0
	})
	var inFlight int64
	var compared, scaled, top int
	for i, e := range evs {
		now = epoch.Add(time.Duration(e.at))
		j := &jobs[e.job]
		if e.begin {
			j.rif = inFlight
			j.began = tr.Begin()
			inFlight++
		} else {
			tr.End(j.began, false)
			b.srv.ended(j.arrive, j.end, j.rif, false)
			inFlight--
		}
		if i+1 < len(evs) && evs[i+1].at > e.at+1 && r.IntN(4) == 0 {
			// Probe somewhere before the next event.
			pt := e.at + 1 + r.Int64N(evs[i+1].at-e.at-1)
			now = epoch.Add(time.Duration(pt))
			n, want := tr.Probe()
			require.Equal(t, inFlight, n)
			got, ok := b.srv.byLevel.estimate(pt, inFlight)
			if !ok {
				got = b.latencyWindowMean(pt)
			}
			// The Tracker sums whole microseconds: its mean is off by at
			// most half of one, times the scaling.
			assert.InDelta(t, float64(want), float64(got), float64(time.Microsecond)*float64(inFlight+1), "at %d, rif %d", pt, inFlight)
			compared++
			if lv := levelOf(inFlight); b.srv.byLevel.levels[lv].n.total(pt) == 0 {
				scaled++
			}
			top = max(top, int(inFlight))
		}
	}
	assert.Greater(t, compared, 1000)
	assert.Positive(t, scaled, "the lower-level rule never applied")
	assert.Greater(t, top, 16, "the queue never grew")
}
