package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// handRuns returns runs of one policy, one per p99 in ms: 1000 requests,
// probes of them probed, over 600 buckets of 10 backends where backend 4
// gets watched attempts a bucket and every other 10.
func handRuns(p99s []float64, probes []int, watched int32) []*Result {
	var out []*Result
	for k, p := range p99s {
		r := &Result{Seed: uint64(k + 1), P99: time.Duration(p * float64(time.Millisecond)), Requests: 1000, Probes: probes[k], Backends: 10}
		r.Picks = make([]int32, 600*10)
		for b := range 600 {
			for i := range 10 {
				r.Picks[b*10+i] = 10
			}
			r.Picks[b*10+4] = watched
		}
		out = append(out, r)
	}
	return out
}

// TestProbeChecks measures hand-made runs against the targets, with the
// verdicts worked out here from their numbers.
func TestProbeChecks(t *testing.T) {
	fleet, ff := mustLookup(t, "fleet16"), mustLookup(t, "fastfail16")
	three := []int{3000, 2900, 3000}
	tests := []struct {
		name            string
		cand, sed, base []float64
		probes          []int
		candWatched     int32
		want            map[string]bool
	}{{
		// p99 − 1.5 × 90: −5, 5, −15 ms, mean −5: within. Against the
		// baseline 0, −1, −1: no worse. Backend 4 gets 10 of 100 under
		// both. 3 probes a request at most.
		name: "every target met",
		cand: []float64{130, 140, 120}, sed: []float64{90, 90, 90}, base: []float64{130, 141, 121},
		probes: three, candWatched: 10,
		want: map[string]bool{
			"fleet16: p99 within 1.5× Oracle SED":                                      true,
			"fleet16: p99 no worse than P2CPeakEWMA":                                   true,
			"fastfail16: fast-failing backend's share no more than under FastestFirst": true,
			"fleet16: at most 3 probes per request":                                    true,
			"fastfail16: at most 3 probes per request":                                 true,
		},
	}, {
		// p99 − 135: 5, 5, 6 ms: not within. 10, 9, 10 ms above the
		// baseline, significantly. Backend 4 gets 20 of 110 against 10
		// of 100. One run sends 3.001 probes a request.
		name: "every target missed",
		cand: []float64{140, 140, 141}, sed: []float64{90, 90, 90}, base: []float64{130, 131, 131},
		probes: []int{3000, 3001, 2000}, candWatched: 20,
		want: map[string]bool{
			"fleet16: p99 within 1.5× Oracle SED":                                      false,
			"fleet16: p99 no worse than P2CPeakEWMA":                                   false,
			"fastfail16: fast-failing backend's share no more than under FastestFirst": false,
			"fleet16: at most 3 probes per request":                                    false,
		},
	}, {
		// Above the baseline by −20, 30, 5 ms: mean 5, but the interval
		// holds 0: not significantly worse.
		name: "worse within noise",
		cand: []float64{110, 160, 135}, sed: []float64{100, 100, 100}, base: []float64{130, 130, 130},
		probes: three, candWatched: 10,
		want: map[string]bool{
			"fleet16: p99 within 1.5× Oracle SED":    true,
			"fleet16: p99 no worse than P2CPeakEWMA": true,
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep := &Report{Seeds: []uint64{1, 2, 3}, Scenarios: []Scenario{fleet, ff}}
			for range rep.Scenarios {
				rep.Summaries = append(rep.Summaries, []Summary{
					summarize(Policy{Name: "Prequal"}, handRuns(tt.cand, tt.probes, tt.candWatched)),
					summarize(Policy{Name: OracleSED, oracle: newSED}, handRuns(tt.sed, []int{0, 0, 0}, 10)),
					summarize(Policy{Name: ProbeBaseline}, handRuns(tt.base, []int{0, 0, 0}, 10)),
					summarize(Policy{Name: SinkBaseline}, handRuns(tt.base, []int{0, 0, 0}, 10)),
				})
			}
			checks, err := rep.ProbeChecks("Prequal")
			require.NoError(t, err)
			got := map[string]bool{}
			for _, c := range checks {
				got[c.Scenario+": "+c.Target] = c.Pass
			}
			for k, v := range tt.want {
				pass, ok := got[k]
				if assert.True(t, ok, "missing %q in %v", k, got) {
					assert.Equal(t, v, pass, k)
				}
			}
			_, ok := got["fastfail16: p99 within 1.5× Oracle SED"]
			assert.False(t, ok, "the oracle target is fleet16's and fleet64's")
		})
	}

	rep := &Report{Seeds: []uint64{1}, Scenarios: []Scenario{fleet}, Summaries: [][]Summary{{summarize(Policy{Name: "Prequal"}, handRuns([]float64{1}, []int{0}, 10))}}}
	_, err := rep.ProbeChecks("Prequal")
	assert.ErrorContains(t, err, OracleSED)
	_, err = rep.ProbeChecks("Missing")
	assert.Error(t, err)
}
