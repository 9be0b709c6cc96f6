package balancer

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ReportedWRR promises nginx's smooth order over weights it derives, which
// a report may change at any recompute: no cycle of the configured
// weights, and an effective weight bounded by the derived one. The fuzz
// model runs it twice: with A58's defaults (the registry's), and with the
// short settings, under which its reports turn into weights at once.
var (
	_ = declareTraits("ReportedWRR", fuzzTrait{zeroWeight: zwAny, sumZero: true, derived: true})
	_ = addFuzzCase(pickerCase{"ReportedWRR", func(peers []*Peer, opts ...Option) (Balancer, error) {
		return NewReportedWRR(peers, append(opts, fastReports...)...)
	}, reportedWRRSpec.algorithm(as(NewReportedWRR))})
)

// fastReports are the short settings the tests use: every report counts
// at once, weights follow within 100 ms, a peer silent for 2 s expires.
var fastReports = []Option{WithBlackoutPeriod(0), WithWeightUpdatePeriod(100 * time.Millisecond), WithWeightExpirationPeriod(2 * time.Second)}

// serve makes k attempts, each reported at once with its peer's load from
// loads (no report for a peer absent there), and returns the picks per
// peer.
func serve(t testing.TB, s *ReportedWRR, loads map[string]ServerLoad, k int) map[string]int {
	t.Helper()
	counts := map[string]int{}
	for range k {
		p, err := s.Pick(nil)
		require.NoError(t, err)
		counts[p.Addr()]++
		o := Outcome{Latency: time.Millisecond}
		if l, ok := loads[p.Addr()]; ok {
			o.Load = &l
		}
		require.NoError(t, s.Done(p, o))
	}
	return counts
}

// derivedWeights returns each peer's PeerState.DerivedWeight.
func derivedWeights(peers []*Peer) []int {
	w := make([]int, len(peers))
	for i, p := range peers {
		w[i] = p.State().DerivedWeight
	}
	return w
}

// load returns a report of utilization u, rps q and eps e.
func load(u, q, e float64) ServerLoad { return ServerLoad{Utilization: u, RPS: q, EPS: e} }

// TestA58Weight checks the weight of one report against A58's formula,
// qps / (utilization + eps/qps × penalty), worked out by hand, and the
// reports it ignores.
func TestA58Weight(t *testing.T) {
	tests := []struct {
		name    string
		l       ServerLoad
		penalty float64
		want    float64 // 0: ignored
	}{
		{"no errors", load(0.5, 100, 0), 1, 200},                 // 100 / 0.5
		{"errors, penalty 1", load(0.5, 100, 10), 1, 100 / 0.6},  // 100 / (0.5 + 0.1)
		{"errors, penalty 2", load(0.5, 100, 10), 2, 100 / 0.7},  // 100 / (0.5 + 0.2)
		{"errors, penalty 0", load(0.5, 100, 10), 0, 200},        // errors ignored
		{"utilization above 1", load(2, 100, 0), 1, 50},          // a server past its capacity
		{"all errors", load(0.5, 100, 100), 1, 100 / 1.5},        // 100 / (0.5 + 1)
		{"utilization 0", load(0, 100, 0), 1, 0},                 // A58: ignored
		{"rps 0", load(0.5, 0, 0), 1, 0},                         // A58: ignored
		{"rps 0 with errors", load(0.5, 0, 5), 1, 0},             // no 0/0
		{"weight overflows", load(1e-300, 1e300, 0), 1, 0},       // +Inf: ignored
		{"weight underflows", load(1e300, 1e-300, 0), 1, 0},      // 0: ignored
		{"error rate overflows", load(0.5, 1e-300, 1e300), 1, 0}, // 1e-300/Inf = 0
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := a58Weight(&tt.l, tt.penalty)
			if tt.want == 0 {
				assert.False(t, ok, "weight %v", got)
				return
			}
			require.True(t, ok)
			assert.InDelta(t, tt.want, got, 1e-9*tt.want)
		})
	}
}

// TestReportedWRR_shares checks the smooth-step weights derived from given
// reports, and that one cycle of W picks gives each peer exactly its
// weight, worked out as the doc's scheme says: a candidate's share is
// c·r/max r (the mean of the weighted for one without a weight), scaled to
// a budget of 100 per candidate, rounded, at least 1.
func TestReportedWRR_shares(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		loads   map[string]ServerLoad
		want    []int // derived weights, in peer order; their sum W picks give each exactly this
	}{{
		// r = 200, 100, 100: shares 1, 0.5, 0.5 of 2; budget 300: 150, 75, 75.
		name: "A58 weights", weights: []int{1, 1, 1},
		loads: map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0), "c": load(1, 100, 0)},
		want:  []int{150, 75, 75},
	}, {
		// r = 200, 100/0.6 = 166.7 (b's errors cost it), 200: shares 1,
		// 0.8333, 1 of 2.8333; budget 300: 105.88 → 106, 88.24 → 88, 106.
		name: "errors", weights: []int{1, 1, 1},
		loads: map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 100, 10), "c": load(0.5, 100, 0)},
		want:  []int{106, 88, 106},
	}, {
		// r = 300, 100, 200 and d unweighted: shares 1, 1/3, 2/3 and the
		// mean 2/3 for d, of 8/3; budget 400: 150, 50, 100, 100.
		name: "mean for the unweighted", weights: []int{1, 1, 1, 1},
		loads: map[string]ServerLoad{"a": load(1, 300, 0), "b": load(1, 100, 0), "c": load(1, 200, 0)},
		want:  []int{150, 50, 100, 100},
	}, {
		// Equal reports, configured 2 and 1: shares 2, 1 of 3; budget 200:
		// 133.3 → 133, 66.7 → 67.
		name: "configured weight multiplies", weights: []int{2, 1},
		loads: map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 100, 0)},
		want:  []int{133, 67},
	}, {
		// c reports but has weight 0: no candidate, never picked; a, b as
		// in "A58 weights" over a budget of 200: shares 1, 0.5 → 133, 67.
		name: "weight 0 stays out", weights: []int{1, 1, 0},
		loads: map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0), "c": load(0.5, 1000, 0)},
		want:  []int{133, 67, 0},
	}, {
		// b's weight is 1/10^6 of a's: its share rounds to 0 and is
		// raised to 1, so it stays in rotation. Budget 200: 200, 1.
		name: "tiny weight floored at 1", weights: []int{1, 1},
		loads: map[string]ServerLoad{"a": load(0.001, 1000, 0), "b": load(1, 1, 0)},
		want:  []int{200, 1},
	}, {
		// r = 1e300/1e-10 overflows to +Inf: the report is ignored, so
		// only a is weighted: fewer than two, the configured weights.
		name: "one weighted: configured weights", weights: []int{3, 1},
		loads: map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(1e-10, 1e300, 0)},
		want:  []int{3, 1},
	}, {
		// Huge but finite weights (1e300 and 5e299): divided by the
		// largest first, shares 1 and 0.5: 133, 67.
		name: "huge weights", weights: []int{1, 1},
		loads: map[string]ServerLoad{"a": load(1e-8, 1e292, 0), "b": load(2e-8, 1e292, 0)},
		want:  []int{133, 67},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(tt.weights...)
			s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
			require.NoError(t, err)
			serve(t, s, tt.loads, 20) // every peer reports (configured weights' order)
			clk.add(100 * time.Millisecond)
			serve(t, s, tt.loads, 1) // the report that finds the recompute due
			require.Equal(t, tt.want, derivedWeights(peers))
			// The recompute restarted the sequence: the next W picks are
			// one cycle (the reports in it move nothing: the clock stands).
			w := 0
			for _, x := range tt.want {
				w += x
			}
			counts := serve(t, s, tt.loads, w)
			for i, p := range peers {
				assert.Equal(t, tt.want[i], counts[p.Addr()], "%s's picks in %d", p.Addr(), w)
			}
		})
	}
}

// TestReportedWRR_fewerThanTwo: while fewer than two peers have a weight,
// the list is nginx's smooth round robin over the configured weights,
// here {5,1,1}: a a b a c a a (nginx.md section 1), whatever a reports.
func TestReportedWRR_fewerThanTwo(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(5, 1, 1)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.1, 1000, 0)}
	serve(t, s, loads, 7)
	clk.add(time.Second)
	serve(t, s, loads, 7) // due: recomputed, one weighted
	assert.Equal(t, []int{5, 1, 1}, derivedWeights(peers))
	assert.Equal(t, "a a b a c a a a a b a c a a", picks(t, s, 14))
}

// TestReportedWRR_timing follows A58's periods on a fake clock, each
// second a round of attempts that all report: blackout 10 s, expiration
// 30 s, update 1 s. a reports 200 and b 100 (derived 133 and 67 once both
// count); the configured weights are 1 and 1.
func TestReportedWRR_timing(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, clk.opt(), WithBlackoutPeriod(10*time.Second),
		WithWeightExpirationPeriod(30*time.Second), WithWeightUpdatePeriod(time.Second))
	require.NoError(t, err)
	both := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
	onlyA := map[string]ServerLoad{"a": both["a"]}
	rr, weightedAB := []int{1, 1}, []int{133, 67}
	steps := []struct {
		at    time.Duration // since the first reports
		loads map[string]ServerLoad
		want  []int
		why   string
	}{
		{0, both, rr, "first reports: blackout"},
		{9 * time.Second, both, rr, "9 s of reports: blackout"},
		{10 * time.Second, both, weightedAB, "10 s of reports: counted"},
		{11 * time.Second, onlyA, weightedAB, "b silent: still fresh"},
		{39 * time.Second, onlyA, weightedAB, "b's last report (at 10 s) 29 s old: fresh"},
		{40 * time.Second, onlyA, rr, "b's last report 30 s old: expired, one weighted"},
		{42 * time.Second, both, rr, "b reports again: blackout from here"},
		{51 * time.Second, both, rr, "b's new run 9 s old"},
		{52 * time.Second, both, weightedAB, "b's new run 10 s old: counted"},
	}
	start := clk.now()
	for _, st := range steps {
		clk.set(start.Add(st.at))
		serve(t, s, st.loads, 4) // every peer picked at least once
		assert.Equal(t, st.want, derivedWeights(peers), "at %v: %s", st.at, st.why)
	}
}

// TestReportedWRR_updatePeriod: weights move at most once per update
// period, at the first report that finds it over.
func TestReportedWRR_updatePeriod(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, clk.opt(), WithBlackoutPeriod(0), WithWeightUpdatePeriod(time.Second))
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
	serve(t, s, loads, 4)
	clk.add(time.Second)
	serve(t, s, loads, 1) // due at construction + 1 s
	require.Equal(t, []int{133, 67}, derivedWeights(peers))
	// a now reports 300: shares 1, 1/3 of 4/3, budget 200: 150, 50.
	loads["a"] = load(0.5, 150, 0)
	clk.add(999 * time.Millisecond)
	serve(t, s, loads, 4)
	assert.Equal(t, []int{133, 67}, derivedWeights(peers), "999 ms after the last recompute")
	clk.add(time.Millisecond)
	serve(t, s, loads, 1)
	assert.Equal(t, []int{150, 50}, derivedWeights(peers), "1 s after it")
}

// TestReportedWRR_restartsDoNotFavourTheFirst: weights that change at
// almost every pick, a always ahead of b (a reports 110 to 112 rps at
// utilization 1, b 90 to 92, a new value at each step), each change
// restarting the sequence. Entered at its first entry, every new cycle
// would give a the next pick (the heaviest, first in order), and a got 75%
// of them when this was checked with the cycle entered at its start.
// Entered where the last left off, a gets about its share, 55%.
func TestReportedWRR_restartsDoNotFavourTheFirst(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	step := func(i int) map[string]ServerLoad {
		return map[string]ServerLoad{"a": load(1, float64(110+i%3), 0), "b": load(1, float64(90+i%3), 0)}
	}
	serve(t, s, step(0), 4)
	counts, last := map[string]int{}, derivedWeights(peers)
	restarts := 0
	for i := range 400 {
		clk.add(100 * time.Millisecond)
		for k, v := range serve(t, s, step(i), 1) {
			counts[k] += v
		}
		w := derivedWeights(peers)
		require.Greater(t, w[0], w[1], "a ahead")
		if w[0] != last[0] {
			restarts++
		}
		last = w
	}
	assert.Greater(t, restarts, 200, "the weights change at most steps")
	assert.InDelta(t, 0.55*400, counts["a"], 0.1*400, "a's picks of 400: %v", counts)
}

// TestReportedWRR_expiryWithoutReports: with no report arriving, Pick
// notices the expiration within checkEvery picks; a picker nobody calls
// changes nothing.
func TestReportedWRR_expiryWithoutReports(t *testing.T) {
	clk := newFakeClock()
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
	serve(t, s, loads, 4)
	clk.add(100 * time.Millisecond)
	serve(t, s, loads, 1)
	require.Equal(t, []int{133, 67}, derivedWeights(peers))
	clk.add(time.Hour)
	assert.Equal(t, []int{133, 67}, derivedWeights(peers), "no call: nothing recomputed")
	serve(t, s, nil, checkEvery)
	assert.Equal(t, []int{1, 1}, derivedWeights(peers), "expired within %d picks", checkEvery)
}

// TestReportedWRR_ignoredReports: a report A58 ignores, or whose weight is
// not a positive finite number, changes no weight and does not keep a
// weight fresh; one out of range is refused by Done and changes nothing.
func TestReportedWRR_ignoredReports(t *testing.T) {
	tests := []struct {
		name string
		l    ServerLoad
	}{
		{"utilization 0", load(0, 100, 0)},
		{"rps 0", load(0.5, 0, 0)},
		{"weight +Inf", load(1e-300, 1e300, 0)},
		{"weight 0", load(1e300, 1e-300, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			peers := weighted(1, 1)
			s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
			require.NoError(t, err)
			loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
			serve(t, s, loads, 4)
			clk.add(100 * time.Millisecond)
			serve(t, s, loads, 1)
			require.Equal(t, []int{133, 67}, derivedWeights(peers))
			// a's reports turn bad: its last good weight stands...
			loads["a"] = tt.l
			clk.add(time.Second)
			serve(t, s, loads, 10)
			assert.Equal(t, []int{133, 67}, derivedWeights(peers), "bad reports ignored")
			// ...until it expires, 2 s after the last good report.
			clk.add(time.Second)
			serve(t, s, loads, 10)
			assert.Equal(t, []int{1, 1}, derivedWeights(peers), "a expired despite its bad reports")
		})
	}
	t.Run("out of range", func(t *testing.T) {
		clk := newFakeClock()
		peers := weighted(1, 1)
		s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
		require.NoError(t, err)
		p, err := s.Pick(nil)
		require.NoError(t, err)
		err = s.Done(p, Outcome{Load: &ServerLoad{Utilization: 0.5, RPS: math.NaN()}})
		assert.ErrorIs(t, err, ErrInvalidOutcome)
		assert.Equal(t, int64(noReport), rwrrOf(p).last.Load(), "nothing recorded")
		assert.Equal(t, 1, p.InFlight(), "the attempt is still in flight")
	})
}

// TestReportedWRR_failures: nginx's failure model over the derived weights.
// a (max_fails 2) and b (max_fails 1) derive 133 and 67.
func TestReportedWRR_failures(t *testing.T) {
	clk := newFakeClock()
	a, b := NewPeer("a", MaxFails(2)), NewPeer("b", FailTimeout(10*time.Second))
	peers := []*Peer{a, b}
	s, err := NewReportedWRR(peers, clk.opt(), WithBlackoutPeriod(0), WithWeightUpdatePeriod(100*time.Millisecond))
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
	serve(t, s, loads, 4)
	clk.add(100 * time.Millisecond)
	serve(t, s, loads, 1)
	require.Equal(t, []int{133, 67}, derivedWeights(peers))

	// b fails (max_fails 1): its effective weight drops by 67/1 to 0 and
	// it is out for its fail_timeout: every pick goes to a.
	failOn(t, s, b)
	assert.Equal(t, 0, b.State().EffectiveWeight)
	assert.Equal(t, map[string]int{"a": 50}, serve(t, s, nil, 50))

	// a fails once (max_fails 2): 133 − 133/2 = 67, still eligible.
	failOn(t, s, a)
	assert.Equal(t, 67, a.State().EffectiveWeight)

	// a's report changes its weight to 300 (shares 1, 1/3 of 4/3, budget
	// 200: 150, 50). The pick that carries the report steps a's effective
	// weight to 68 (nginx's +1 in each scan it is eligible in); the
	// recompute keeps its fraction, 68·150/133 = 76.7, rounded down to 76;
	// b's stays 0.
	loads["a"] = load(0.5, 150, 0)
	clk.add(100 * time.Millisecond)
	serve(t, s, map[string]ServerLoad{"a": loads["a"]}, 1)
	assert.Equal(t, []int{150, 50}, derivedWeights(peers))
	assert.Equal(t, 76, a.State().EffectiveWeight)
	assert.Equal(t, 0, b.State().EffectiveWeight)

	// Past b's fail_timeout b is probed; a success readmits it. Its
	// effective weight recovers by one per scan in which it is eligible,
	// as in nginx, and reaches its weight, 50.
	clk.add(10 * time.Second)
	got := serve(t, s, loads, 400)
	assert.Positive(t, got["b"], "b probed and readmitted")
	assert.Equal(t, 0, b.State().Fails)
	assert.Equal(t, 50, b.State().EffectiveWeight)
}

// failOn picks until p comes up and reports that attempt failed; the
// other attempts succeed.
func failOn(t *testing.T, s *ReportedWRR, p *Peer) {
	t.Helper()
	for range 1000 {
		q, err := s.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, s.Done(q, Outcome{Failed: q == p}))
		if q == p {
			return
		}
	}
	t.Fatalf("%s never picked", p)
}

// TestReportedWRR_backups: each list is weighed on its own; the backups'
// weights count once no primary is eligible.
func TestReportedWRR_backups(t *testing.T) {
	clk := newFakeClock()
	peers := []*Peer{NewPeer("a"), NewPeer("x", Backup()), NewPeer("y", Backup())}
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	// Only backups are picked while a is down; they report 300 and 100:
	// shares 1, 1/3 of 4/3, budget 200: 150, 50.
	require.NoError(t, s.SetDown(peers[0], true))
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "x": load(1, 300, 0), "y": load(1, 100, 0)}
	serve(t, s, loads, 4)
	clk.add(100 * time.Millisecond)
	serve(t, s, loads, 1)
	assert.Equal(t, []int{1, 150, 50}, derivedWeights(peers))
	got := serve(t, s, loads, 200)
	assert.Equal(t, map[string]int{"x": 150, "y": 50}, got)
}

func TestReportedWRR_options(t *testing.T) {
	tests := []struct {
		name string
		opt  Option
		msg  string // "" for a valid value
	}{
		{"blackout 0", WithBlackoutPeriod(0), ""},
		{"blackout negative", WithBlackoutPeriod(-time.Second), "WithBlackoutPeriod(-1s): negative"},
		{"expiration 1ns", WithWeightExpirationPeriod(1), ""},
		{"expiration 0", WithWeightExpirationPeriod(0), "WithWeightExpirationPeriod(0s): not above 0"},
		{"update 1ms", WithWeightUpdatePeriod(time.Millisecond), ""},
		{"update below 1ms", WithWeightUpdatePeriod(999 * time.Microsecond), "WithWeightUpdatePeriod(999µs): below 1ms"},
		{"update huge", WithWeightUpdatePeriod(math.MaxInt64), ""},
		{"penalty 0", WithErrorUtilizationPenalty(0), ""},
		{"penalty negative", WithErrorUtilizationPenalty(-1), "WithErrorUtilizationPenalty(-1): not a finite number ≥ 0"},
		{"penalty NaN", WithErrorUtilizationPenalty(math.NaN()), "WithErrorUtilizationPenalty(NaN)"},
		{"penalty Inf", WithErrorUtilizationPenalty(math.Inf(1)), "WithErrorUtilizationPenalty(+Inf)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := NewReportedWRR(weighted(1, 1), tt.opt)
			if tt.msg == "" {
				require.NoError(t, err)
				_, err = s.Pick(nil)
				assert.NoError(t, err)
				return
			}
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.ErrorContains(t, err, tt.msg)
		})
	}
}

// TestReportedWRR_allocs: Pick and Done allocate nothing, with or without a
// report, while the clock moves and recomputes that change nothing run.
func TestReportedWRR_allocs(t *testing.T) {
	for _, n := range []int{2, 10, 1000} {
		clk := newFakeClock()
		peers := benchPeers(n)
		// Nothing expires in the test's 3 s.
		s, err := NewReportedWRR(peers, clk.opt(), WithBlackoutPeriod(0), WithWeightUpdatePeriod(100*time.Millisecond))
		require.NoError(t, err)
		l := load(0.5, 100, 1)
		withLoad := Outcome{Latency: time.Millisecond, Load: &l}
		for range 2 * n {
			p, _ := s.Pick(nil)
			_ = s.Done(p, withLoad)
		}
		clk.add(time.Second)
		p, _ := s.Pick(nil)
		require.NoError(t, s.Done(p, withLoad)) // the weights settle
		for _, tt := range []struct {
			name string
			o    Outcome
		}{{"without load", Outcome{Latency: time.Millisecond}}, {"with load", withLoad}} {
			run := func() {
				clk.add(time.Millisecond) // a recompute every 100 runs
				p, err := s.Pick(nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := s.Done(p, tt.o); err != nil {
					t.Fatal(err)
				}
			}
			assert.Zero(t, testing.AllocsPerRun(1000, run), "%d peers, Pick and Done %s", n, tt.name)
			// AllocsPerRun rounds the mean down, which would hide a
			// recompute's allocations: count them all.
			var before, after runtime.MemStats
			procs := runtime.GOMAXPROCS(1)
			runtime.ReadMemStats(&before)
			for range 1000 {
				run()
			}
			runtime.ReadMemStats(&after)
			runtime.GOMAXPROCS(procs)
			assert.Zero(t, after.Mallocs-before.Mallocs, "%d peers, 1000 Pick and Done %s, 10 recomputes", n, tt.name)
		}
	}
}

// TestReportedWRR_concurrent runs picks and reports from many goroutines
// while the clock moves, reports change and the peers are updated; run
// with -race. Every attempt is reported, so nothing stays in flight.
func TestReportedWRR_concurrent(t *testing.T) {
	clk := newFakeClock()
	peers := benchPeers(20)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			var r Request
			for i := range 2000 {
				r.Reset()
				p, err := s.Pick(&r)
				if err != nil {
					continue // a peer removed or down meanwhile
				}
				l := load(0.1+float64((i+g)%10)/10, float64(50+(i*7+g)%200), float64(i%3))
				o := Outcome{Failed: i%97 == 0, Latency: time.Millisecond}
				if i%2 == 0 {
					o.Load = &l
				}
				if err := s.Done(p, o); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Go(func() {
		for range 500 {
			clk.add(7 * time.Millisecond)
		}
	})
	wg.Go(func() {
		for i := range 50 {
			snap := benchPeers(20 - i%5)
			if err := s.Update(snap); err != nil {
				t.Error(err)
				return
			}
			cur := s.Peers()
			_ = s.SetWeight(cur[i%len(cur)], 1+i%4)
			_ = cur[0].State()
		}
	})
	wg.Wait()
	for _, p := range s.Peers() {
		assert.Zero(t, p.InFlight(), "%s", p)
		st := p.State()
		assert.LessOrEqual(t, st.EffectiveWeight, st.DerivedWeight, "%s", p)
	}
}

// reportingPeers returns benchPeers(n) and the report each sends: rps
// 100 to 160 in seven steps at utilization 0.5, 1% errors, so that the
// derived weights differ.
func reportingPeers(n int) ([]*Peer, map[string]ServerLoad) {
	peers := benchPeers(n)
	loads := make(map[string]ServerLoad, n)
	for i, p := range peers {
		q := float64(100 + 10*(i%7))
		loads[p.Addr()] = load(0.5, q, q/100)
	}
	return peers, loads
}

// weighedReportedWRR returns a ReportedWRR over reportingPeers(n) whose
// weights come from every peer's report, with A58's update period (1 s),
// no blackout and the default clock: once every peer has reported, the
// deadline is moved to now, so that the next report recomputes.
func weighedReportedWRR(tb testing.TB, n int) (*ReportedWRR, map[string]ServerLoad) {
	tb.Helper()
	peers, loads := reportingPeers(n)
	s, err := NewReportedWRR(peers, WithBlackoutPeriod(0))
	require.NoError(tb, err)
	serve(tb, s, loads, 3*n)
	s.next.Store(0)
	serve(tb, s, loads, 1)
	derived := false
	for _, p := range peers {
		derived = derived || p.State().DerivedWeight != p.Weight()
	}
	require.True(tb, derived, "weights derived from the reports")
	return s, loads
}

// BenchmarkReportedWRR_pick times a first attempt's Pick of ReportedWRR,
// its weights derived from every peer's report, against SmoothWRR over the
// same peers' configured weights and against SmoothWRR configured with the
// weights ReportedWRR derived, in the same run: the cycle's fast path for
// all three, plus ReportedWRR's look at the counter.
func BenchmarkReportedWRR_pick(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		b.Run(fmt.Sprintf("SmoothWRR/peers=%d", n), func(b *testing.B) {
			s, err := NewSmoothWRR(benchPeers(n))
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.Pick(nil)
			}
		})
		s, _ := weighedReportedWRR(b, n)
		require.NotNil(b, s.cycle.Load(), "served from the cycle")
		b.Run(fmt.Sprintf("ReportedWRR/peers=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = s.Pick(nil)
			}
		})
		// SmoothWRR configured with the weights ReportedWRR derived: the
		// same cycle, so the difference is ReportedWRR's own code.
		b.Run(fmt.Sprintf("SmoothWRR-derived/peers=%d", n), func(b *testing.B) {
			d, err := NewSmoothWRR(makePeers(n, ipAddr, weightsOf(derivedWeights(s.Peers()))))
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				_, _ = d.Pick(nil)
			}
		})
	}
}

// BenchmarkReportedWRR_done times Pick and Done together, with and without
// the server's report (each peer its own, steady), on the real clock with
// the 1 s update period: a recompute, which finds nothing changed, every
// second. The difference is the cost of taking a report.
func BenchmarkReportedWRR_done(b *testing.B) {
	for _, n := range []int{10, 1000} {
		s, loads := weighedReportedWRR(b, n)
		byIndex := make([]ServerLoad, n)
		for i, p := range s.Peers() {
			byIndex[i] = loads[p.Addr()]
		}
		b.Run(fmt.Sprintf("peers=%d/withoutLoad", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, _ := s.Pick(nil)
				_ = s.Done(p, Outcome{})
			}
		})
		b.Run(fmt.Sprintf("peers=%d/withLoad", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p, _ := s.Pick(nil)
				_ = s.Done(p, Outcome{Load: &byIndex[p.index]})
			}
		})
	}
}

// BenchmarkReportedWRR_recompute times one recompute at 10, 1000 and 10,000
// peers: one that finds every weight as it was (O(n), what runs once per
// update period while reports hold steady) and one where every report has
// moved, which builds the new cycle (O(n + W·d)), outside the lock.
func BenchmarkReportedWRR_recompute(b *testing.B) {
	for _, n := range []int{10, 1000, 10000} {
		s, loads := weighedReportedWRR(b, n)
		b.Run(fmt.Sprintf("peers=%d/unchanged", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.reweigh(s.now())
			}
		})
		b.Run(fmt.Sprintf("peers=%d/changed", n), func(b *testing.B) {
			peers := s.Peers()
			st := make([]*rwrrPeer, n)
			w := make([]float64, n)
			for i, p := range peers {
				st[i] = rwrrOf(p)
				l := loads[p.Addr()]
				w[i], _ = a58Weight(&l, 1)
			}
			b.ReportAllocs()
			k := 0
			for b.Loop() {
				// Rotate the reports by one peer: the weights move.
				k++
				for i := range st {
					st[i].weight.Store(math.Float64bits(w[(i+k)%n]))
				}
				s.reweigh(s.now())
			}
		})
	}
}

// TestReportedWRR_reportAtUnixZero: a report made when the clock reads
// unix time 0 is a report. Both peers report at 0; at 100 ms the recompute
// finds one new report (the picked peer's) and the other's from 0, both
// fresh: weights 133, 67 as in TestReportedWRR_shares ("A58 weights" with
// two peers), not the configured 1, 1 of "fewer than two".
func TestReportedWRR_reportAtUnixZero(t *testing.T) {
	clk := newFakeClock()
	clk.set(time.Unix(0, 0))
	peers := weighted(1, 1)
	s, err := NewReportedWRR(peers, append([]Option{clk.opt()}, fastReports...)...)
	require.NoError(t, err)
	loads := map[string]ServerLoad{"a": load(0.5, 100, 0), "b": load(0.5, 50, 0)}
	serve(t, s, loads, 4)
	clk.add(100 * time.Millisecond)
	serve(t, s, loads, 1)
	assert.Equal(t, []int{133, 67}, derivedWeights(peers))
}
