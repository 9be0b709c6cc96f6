package balancer

import (
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// outlierRig is a picker over n peers p0, p1, ... (max_fails=1000, so
// that nginx's own accounting takes no peer out within one instant) on a
// fake clock, with its EventPeerOutlier events and the test's own tally of
// each peer's attempts and failures.
type outlierRig struct {
	t        *testing.T
	pc       pickerCase
	p        Balancer
	peers    []*Peer
	clk      *fakeClock
	mu       sync.Mutex
	outliers []string
	att      map[*Peer]int
	fail     map[*Peer]int
	picks    int
	bad      int // peers p0 .. p(bad-1) fail half their attempts; 1 by default
}

func newOutlierRig(t *testing.T, pc pickerCase, n int, opts ...Option) *outlierRig {
	return newOutlierRigWith(t, pc, []PeerOption{MaxFails(1000)}, n, opts...)
}

// newOutlierRigWith is newOutlierRig with the peers built with peerOpts.
func newOutlierRigWith(t *testing.T, pc pickerCase, peerOpts []PeerOption, n int, opts ...Option) *outlierRig {
	r := &outlierRig{t: t, pc: pc, clk: newFakeClock(), att: map[*Peer]int{}, fail: map[*Peer]int{}, bad: 1}
	r.peers = makePeers(n, numbered, func(int) []PeerOption { return peerOpts })
	hook := WithEvents(func(e Event) {
		if e.Kind == EventPeerOutlier {
			r.mu.Lock()
			r.outliers = append(r.outliers, e.Peer.Addr())
			r.mu.Unlock()
		}
	})
	var err error
	r.p, err = pc.new(r.peers, append([]Option{r.clk.opt(), hook}, opts...)...)
	require.NoError(t, err)
	return r
}

// pick picks one attempt, with a fresh key and address for the keyed
// pickers so that they spread too.
func (r *outlierRig) pick() *Peer {
	r.t.Helper()
	var req *Request
	if r.pc.alg.Keyed {
		req = &Request{}
		req.SetKey(strconv.Itoa(r.picks))
		req.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(r.picks >> 16), byte(r.picks >> 8), byte(r.picks)}))
	}
	r.picks++
	p, err := r.p.Pick(req)
	require.NoError(r.t, err)
	return p
}

// failsAt is the outcome rule: p0 (and the others of the bad) fail their
// odd attempts (50%), every other peer its attempts 99, 199, ... (1%).
func (r *outlierRig) failsAt(p *Peer, k int) bool {
	if slices.Contains(r.peers[:r.bad], p) {
		return k%2 == 1
	}
	return k%100 == 99
}

// run picks and reports until every peer has at least volume attempts
// (or 200,000 picks), all at one instant, and returns whether every peer
// got there.
func (r *outlierRig) run(volume int) bool {
	r.t.Helper()
	for range 200_000 {
		least := math.MaxInt
		for _, q := range r.peers {
			least = min(least, r.att[q])
		}
		if least >= volume {
			return true
		}
		p := r.pick()
		k := r.att[p]
		r.att[p]++
		f := r.failsAt(p, k)
		if f {
			r.fail[p]++
		}
		require.NoError(r.t, r.p.Done(p, Outcome{Failed: f, Latency: time.Millisecond}))
	}
	return false
}

// endInterval moves the clock to d past the start and reports one attempt
// picked before the move, failed: a failure reads the clock before it is
// counted, so the first one past the interval's end evaluates it, and
// counts in the next interval.
func (r *outlierRig) endInterval(d time.Duration) {
	r.t.Helper()
	p := r.pick()
	r.clk.set(time.Unix(100, 0).Add(d))
	require.NoError(r.t, r.p.Done(p, Outcome{Failed: true}))
}

// expected derives, from the test's tally, the peers the rule ejects:
// those with at least volume attempts, if at least minHosts, whose
// success rate is below mean − factor × stdev (population stdev).
func (r *outlierRig) expected(volume, minHosts int, factor float64) []string {
	var rates []float64
	var names []string
	for _, q := range r.peers {
		if a := r.att[q]; a >= volume {
			rates = append(rates, float64(a-r.fail[q])/float64(a))
			names = append(names, q.Addr())
		}
	}
	if len(rates) < minHosts {
		return nil
	}
	var sum float64
	for _, v := range rates {
		sum += v
	}
	mean := sum / float64(len(rates))
	var v2 float64
	for _, v := range rates {
		v2 += (v - mean) * (v - mean)
	}
	thr := mean - factor*math.Sqrt(v2/float64(len(rates)))
	var out []string
	for i, v := range rates {
		if v < thr {
			out = append(out, names[i])
		}
	}
	return out
}

// TestOutlier_roundRobinDerived: ten peers under RoundRobin take exactly
// 200 attempts each. p0's success rate is 0.5, the others' 0.99: mean =
// (0.5 + 9 × 0.99)/10 = 0.941; variance = (0.441² + 9 × 0.049²)/10 =
// (0.194481 + 0.021609)/10 = 0.021609, stdev 0.147; threshold = 0.941 −
// 1.9 × 0.147 = 0.6617. p0 (0.5) is ejected at the first report past the
// interval's end (10s), the others (0.99) are not; a report at the end's
// instant is still inside the interval.
func TestOutlier_roundRobinDerived(t *testing.T) {
	r := newOutlierRig(t, pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)},
		10, WithSuccessRateEjection(SuccessRateEjection{}))
	require.True(t, r.run(200))
	for _, q := range r.peers {
		require.Equal(t, 200, r.att[q], q.Addr())
	}
	r.endInterval(10 * time.Second) // at the end: inside
	assert.Empty(t, r.outliers)
	r.endInterval(10*time.Second + 1)
	assert.Equal(t, []string{"p0"}, r.outliers)
	assert.Equal(t, []string{"p0"}, r.expected(100, 5, 1.9), "the test's derivation")
	assert.Equal(t, HealthFailed, r.peers[0].Stats().Health)
	for _, q := range r.peers[1:] {
		assert.Equal(t, HealthOK, q.Stats().Health, q.Addr())
	}
}

// TestOutlier_everyPicker runs the same workload on every picker until
// every peer has 200 attempts, and compares the ejections with the rule
// applied to the test's own tally; p0 must be among them. Then no pick
// returns an ejected peer, whatever the picker keeps derived from its
// list (a precomputed cycle, weight groups, a list of failing peers).
func TestOutlier_everyPicker(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		r := newOutlierRig(t, pc, 10, WithSuccessRateEjection(SuccessRateEjection{}))
		require.True(t, r.run(200), "every peer reaches the volume")
		want := r.expected(100, 5, 1.9)
		require.Contains(t, want, "p0")
		r.endInterval(10*time.Second + 1)
		assert.ElementsMatch(t, want, r.outliers)
		for range 200 {
			p := r.pick()
			require.NotContains(t, want, p.Addr(), "picked while ejected")
			require.NoError(t, r.p.Done(p, Outcome{}))
		}
	})
}

// TestOutlier_gates: MinimumHosts and RequestVolume, at their boundaries,
// under RoundRobin's exact 200 attempts a peer (p0 at 0.5, as derived in
// TestOutlier_roundRobinDerived).
func TestOutlier_gates(t *testing.T) {
	tests := []struct {
		name string
		cfg  SuccessRateEjection
		want []string
	}{
		{"10 hosts, 10 needed", SuccessRateEjection{MinimumHosts: 10}, []string{"p0"}},
		{"10 hosts, 11 needed", SuccessRateEjection{MinimumHosts: 11}, nil},
		{"volume 200 reached", SuccessRateEjection{RequestVolume: 200}, []string{"p0"}},
		{"volume 201 missed", SuccessRateEjection{RequestVolume: 201}, nil},
		// A factor of 10: threshold 0.941 − 1.47 < 0: nobody.
		{"factor 10", SuccessRateEjection{StdevFactor: 10}, nil},
		// A factor of 0.3: threshold 0.941 − 0.0441 = 0.8969: p0 only.
		{"factor 0.3", SuccessRateEjection{StdevFactor: 0.3}, []string{"p0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newOutlierRig(t, pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)},
				10, WithSuccessRateEjection(tt.cfg))
			require.True(t, r.run(200))
			r.endInterval(10*time.Second + 1)
			assert.Equal(t, tt.want, r.outliers)
		})
	}
}

// constSource is a rand.Source that always returns x.
type constSource uint64

func (s constSource) Uint64() uint64 { return uint64(s) }

// TestOutlier_enforcement: an outlier is ejected when the draw, a float64
// in [0, 1) made of the source's top 53 bits (rand.Float64), times 100 is
// below EnforcementPercent.
func TestOutlier_enforcement(t *testing.T) {
	tests := []struct {
		x    uint64
		pct  float64
		want []string
	}{
		{0, 50, []string{"p0"}},               // 0 < 50
		{1 << 63, 50, nil},                    // 0.5 × 100 = 50, not below
		{1<<63 - 1<<11, 50, []string{"p0"}},   // 0.5 − 2^-53: below
		{math.MaxUint64, 100, []string{"p0"}}, // (1 − 2^-53) × 100 < 100
		{math.MaxUint64, 99.9, nil},           // 99.99…  ≥ 99.9
		{1 << 62, 25.000001, []string{"p0"}},  // 25 < 25.000001
		{1 << 62, 25, nil},                    // 25, not below
	}
	for _, tt := range tests {
		t.Run(strconv.FormatUint(tt.x, 16)+"/"+strconv.FormatFloat(tt.pct, 'g', -1, 64), func(t *testing.T) {
			r := newOutlierRig(t, pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)},
				10, WithSuccessRateEjection(SuccessRateEjection{EnforcementPercent: tt.pct, Rand: constSource(tt.x)}))
			require.True(t, r.run(200))
			r.endInterval(10*time.Second + 1)
			assert.Equal(t, tt.want, r.outliers)
		})
	}
}

// TestOutlier_outStateAndBackoff: the ejected peer is out as nginx's
// failures take it out: through its fail_timeout (10s, nginx's default,
// from the ejection at 10s+1ns), probed at the next instant; with
// WithEjectionBackoff its ejection counts, so a failed probe takes it out
// for 2 × 10s. Every other peer keeps serving meanwhile.
func TestOutlier_outStateAndBackoff(t *testing.T) {
	r := newOutlierRig(t, pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)},
		10, WithSuccessRateEjection(SuccessRateEjection{Interval: time.Hour}), WithEjectionBackoff(time.Minute))
	require.True(t, r.run(200))
	r.endInterval(time.Hour + 1)
	require.Equal(t, []string{"p0"}, r.outliers)
	ejected := time.Unix(100, 0).Add(time.Hour + 1)
	p0 := r.peers[0]
	seen := func() bool {
		for range 2 * len(r.peers) {
			p := r.pick()
			require.NoError(t, r.p.Done(p, Outcome{Failed: p == p0}))
			if p == p0 {
				return true
			}
		}
		return false
	}
	r.clk.set(ejected.Add(10 * time.Second))
	assert.False(t, seen(), "out through fail_timeout")
	r.clk.set(ejected.Add(10*time.Second + 1))
	assert.True(t, seen(), "probed after it; the probe fails")
	r.clk.set(ejected.Add(30*time.Second + 1)) // the failed probe at 10s+1ns, out 2 × 10s
	assert.False(t, seen(), "out for the backed-off window")
	r.clk.set(ejected.Add(30*time.Second + 2))
	assert.True(t, seen())
}

// TestOutlier_skipsUnejectable: a peer nginx's model never takes out,
// max_fails 0, is never ejected, though its rate (0.5 against 1.0) is an
// outlier's.
func TestOutlier_skipsUnejectable(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(10, numbered, func(i int) []PeerOption {
		if i == 0 {
			return []PeerOption{MaxFails(0)}
		}
		return []PeerOption{MaxFails(1000)}
	})
	var outliers atomic.Int64
	p, err := NewRoundRobin(peers, clk.opt(), WithSuccessRateEjection(SuccessRateEjection{}),
		WithEvents(func(e Event) {
			if e.Kind == EventPeerOutlier {
				outliers.Add(1)
			}
		}))
	require.NoError(t, err)
	k := 0 // p0's attempts: it fails every other one, 50%
	for range 2000 {
		q := mustPick(t, p, nil)
		failed := q == peers[0] && k%2 == 0
		if q == peers[0] {
			k++
		}
		require.NoError(t, p.Done(q, Outcome{Failed: failed}))
	}
	require.Equal(t, 200, k)
	q := mustPick(t, p, nil)
	clk.add(10*time.Second + 1)
	require.NoError(t, p.Done(q, Outcome{Failed: true}))
	assert.Zero(t, outliers.Load(), "max_fails 0: failure accounting off")
}

// TestOutlier_badValues: every picker refuses each bad field, naming it
// and its value.
func TestOutlier_badValues(t *testing.T) {
	tests := []struct {
		cfg  SuccessRateEjection
		want string
	}{
		{SuccessRateEjection{Interval: -1}, "Interval -1ns"},
		{SuccessRateEjection{StdevFactor: math.NaN()}, "StdevFactor NaN"},
		{SuccessRateEjection{StdevFactor: -0.5}, "StdevFactor -0.5"},
		{SuccessRateEjection{StdevFactor: math.Inf(1)}, "StdevFactor +Inf"},
		{SuccessRateEjection{EnforcementPercent: 101}, "EnforcementPercent 101"},
		{SuccessRateEjection{EnforcementPercent: math.NaN()}, "EnforcementPercent NaN"},
		{SuccessRateEjection{EnforcementPercent: -1}, "EnforcementPercent -1"},
		{SuccessRateEjection{MinimumHosts: -1}, "MinimumHosts -1"},
		{SuccessRateEjection{RequestVolume: -1}, "RequestVolume -1"},
		{SuccessRateEjection{RequestVolume: 1<<31 + 1}, "RequestVolume 2147483649"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			forEachPicker(t, func(t *testing.T, pc pickerCase) {
				_, err := pc.new([]*Peer{NewPeer("a")}, WithSuccessRateEjection(tt.cfg))
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.ErrorContains(t, err, "WithSuccessRateEjection")
				assert.ErrorContains(t, err, tt.want)
				assert.ErrorContains(t, err, pc.name)
			})
		})
	}
	// The longest interval is accepted: its end saturates.
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, err := pc.new([]*Peer{NewPeer("a")}, WithSuccessRateEjection(SuccessRateEjection{Interval: math.MaxInt64}))
		assert.NoError(t, err)
	})
}

// TestOutlier_concurrent: four goroutines pick and report at once while
// one moves the clock (1s every 100 reports, so an interval of 10s holds
// about 1,000 reports, 100 a peer); p0 fails every other attempt, the
// others never. Under -race: the counts, the evaluation and the ejection
// race nothing; only p0 is ever an outlier (a rate of 1.0 is never below
// the mean), and, but under the latency-aware pickers, which starve it,
// it is one at least once.
func TestOutlier_concurrent(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		peers := makePeers(10, numbered, func(int) []PeerOption { return []PeerOption{MaxFails(1000)} })
		var mu sync.Mutex
		ejected := map[string]int{}
		p, err := pc.new(peers, clk.opt(), WithSuccessRateEjection(SuccessRateEjection{RequestVolume: 20}), WithEjectionBackoff(time.Minute),
			WithEvents(func(e Event) {
				if e.Kind == EventPeerOutlier {
					mu.Lock()
					ejected[e.Peer.Addr()]++
					mu.Unlock()
				}
			}))
		require.NoError(t, err)
		var reports, p0 atomic.Int64
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var req Request
				for i := range 2500 {
					req.Reset()
					req.SetKey(strconv.Itoa(g*10000 + i))
					// IPHash keys on the first three octets: the third
					// changes every request, so that every interval
					// spreads over the peers (with it fixed for 256
					// requests at a time, four keys at once reached fewer
					// than MinimumHosts peers in some intervals).
					req.SetClientAddr(netip.AddrFrom4([4]byte{10, byte(g), byte(i), byte(i >> 8)}))
					q, err := p.Pick(&req)
					if err != nil {
						continue
					}
					failed := q == peers[0] && p0.Add(1)%2 == 0
					if err := p.Done(q, Outcome{Failed: failed, Latency: time.Millisecond}); err != nil {
						t.Error(err)
						return
					}
					if reports.Add(1)%100 == 0 {
						clk.add(time.Second)
					}
				}
			}()
		}
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		if pc.alg.Latency {
			// The latency-aware pickers give a failing peer its failure
			// penalty's latency: p0 may never reach the volume.
			assert.Subset(t, []string{"p0"}, slices.Sorted(maps.Keys(ejected)))
			return
		}
		assert.Equal(t, []string{"p0"}, slices.Sorted(maps.Keys(ejected)))
	})
}

// TestOutlier_pickDoneAllocs: counting allocates nothing on Pick + Done,
// nor does the evaluation once its scratch has grown.
func TestOutlier_pickDoneAllocs(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClock()
		p, err := pc.new(benchPeers(100), clk.opt(), WithSuccessRateEjection(SuccessRateEjection{Interval: time.Second, MinimumHosts: 1, RequestVolume: 1}), WithEjectionBackoff(time.Minute))
		require.NoError(t, err)
		var req Request
		step := func() {
			req.Reset()
			q, err := p.Pick(&req)
			if err == nil {
				_ = p.Done(q, Outcome{Latency: time.Millisecond})
			}
			clk.add(time.Millisecond) // an evaluation every 1,000 reports
		}
		for range 2000 {
			step()
		}
		assert.Zero(t, testing.AllocsPerRun(3000, step))
	})
}

// TestOutlier_capped: WithMaxEjectionPercent caps outlier ejections as it
// caps failures. p0 and p1 at 0.5, the 8 others at 0.99, 200 attempts each
// under RoundRobin: mean = (2 × 0.5 + 8 × 0.99)/10 = 0.892, variance =
// (2 × 0.392² + 8 × 0.098²)/10 = 0.038416, stdev 0.196, threshold = 0.892
// − 1.9 × 0.196 = 0.5196: both are outliers. A cap of 10% of 10 peers lets
// the first out (none out yet) and keeps the second in (100 × (1+1) > 10 ×
// 10), with EventEjectionCapped; without the cap both go.
func TestOutlier_capped(t *testing.T) {
	rr := pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)}
	for _, tt := range []struct {
		name   string
		opts   []Option
		out    int
		capped int
	}{
		{"no cap", nil, 2, 0},
		{"cap 10%", []Option{WithMaxEjectionPercent(10)}, 1, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var capped atomic.Int64
			opts := append([]Option{WithSuccessRateEjection(SuccessRateEjection{}), WithEvents(func(e Event) {
				if e.Kind == EventEjectionCapped {
					capped.Add(1)
				}
			})}, tt.opts...)
			r := newOutlierRig(t, rr, 10, opts...)
			r.bad = 2
			require.True(t, r.run(200))
			r.endInterval(10*time.Second + 1)
			out := 0
			for _, q := range r.peers {
				if q.Stats().Health == HealthFailed {
					out++
					assert.Contains(t, []string{"p0", "p1"}, q.Addr())
				}
			}
			assert.Equal(t, tt.out, out)
			assert.Equal(t, int64(tt.capped), capped.Load())
		})
	}
}

// TestOutlier_successesSeeTheEnd: successes alone read the clock once in
// 16 reports of their peer, when its count of the interval reaches a
// multiple of 16. After RoundRobin's 200 attempts a peer (p0 at 0.5), the
// clock moves past the interval's end and only successes follow, in the
// same rotation: 7 rounds (70 reports) bring every peer to 207, and the
// 71st brings the first of the rotation to 208 = 13 × 16, which sees the
// end and ejects p0 (counted with its 7 or 8 successes: 107/207 or
// 108/208, still below the threshold of about 0.66).
func TestOutlier_successesSeeTheEnd(t *testing.T) {
	r := newOutlierRig(t, pickerCase{"RoundRobin", func(ps []*Peer, o ...Option) (Balancer, error) { return NewRoundRobin(ps, o...) }, roundRobinSpec.algorithm(nil)},
		10, WithSuccessRateEjection(SuccessRateEjection{}))
	require.True(t, r.run(200))
	r.clk.set(time.Unix(100, 0).Add(10*time.Second + 1))
	n := 0
	for len(r.outliers) == 0 && n < 1000 {
		p := r.pick()
		require.NoError(t, r.p.Done(p, Outcome{}))
		n++
	}
	assert.Equal(t, 71, n)
	assert.Equal(t, []string{"p0"}, r.outliers)
}

// TestOutlier_cleanPeerEjected: an outlier whose failures nginx has
// already cleared (a success after its window was checked) is clean, so
// the lock-free paths (a precomputed cycle, a first draw) may hold it; its
// ejection must reach them. Peers with fail_timeout 1s: 200 attempts each
// at 0s (p0 fails half), then at 1s+1ns successes only (past p0's window:
// its first pick there is checked, and the success clears its failures)
// until every peer has 20 more, then successes past the interval's end
// until one sees it. p0's rate, at most (100 + 40 + 16)/(200 + 40 + 16) =
// 0.61 with the keyed pickers' uneven spread, is still below the threshold
// (about 0.66), and after the ejection no pick returns p0.
func TestOutlier_cleanPeerEjected(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		r := newOutlierRigWith(t, pc, []PeerOption{MaxFails(1000), FailTimeout(time.Second)}, 10, WithSuccessRateEjection(SuccessRateEjection{}))
		require.True(t, r.run(200))
		r.clk.set(time.Unix(100, 0).Add(time.Second + 1))
		more := map[*Peer]int{}
		for n := 0; n < 10_000 && len(more) < 10 || slices.ContainsFunc(r.peers, func(q *Peer) bool { return more[q] < 20 }); n++ {
			p := r.pick()
			more[p]++
			require.NoError(t, r.p.Done(p, Outcome{}))
		}
		require.Zero(t, r.peers[0].State().Fails, "p0's failures cleared")
		r.clk.set(time.Unix(100, 0).Add(10*time.Second + 1))
		for n := 0; len(r.outliers) == 0 && n < 10_000; n++ {
			p := r.pick()
			require.NoError(t, r.p.Done(p, Outcome{}))
		}
		require.Contains(t, r.outliers, "p0")
		for range 200 {
			p := r.pick()
			require.NotEqual(t, "p0", p.Addr(), "picked while ejected")
			require.NoError(t, r.p.Done(p, Outcome{}))
		}
	})
}

// TestStress_backoffAndOutliers runs, for every picker with both of this
// file's guards (short intervals: 100 ms, 20 attempts, 3 peers) and the
// ejection cap, four callers that retry (p0 fails every other attempt,
// the others one in fifty; max_fails 1000, so that the success rate takes
// p0 out), on a clock moving 1 ms every 10 requests (about 1,000 requests
// an interval), while another goroutine marks a peer down and up, removes
// and adds one, and sends the same peers through Update. Afterwards:
// every pick was reported and accepted, nothing is in flight, the outlier
// events match OutlierEjectionCount, and but for the latency-aware
// pickers (which starve p0) p0 was ejected. Run it under -race.
func TestStress_backoffAndOutliers(t *testing.T) {
	const workers, requests = 4, 800
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		clk := newFakeClockAt(time.Unix(1_700_000_000, 0))
		opts := func(int) []PeerOption { return []PeerOption{FailTimeout(50 * time.Millisecond), MaxFails(1000)} }
		peers := makePeers(8, numbered, opts)
		extra := NewPeer("x", opts(0)...)
		var outliers atomic.Int64
		b, err := pc.new(peers, clk.opt(), WithEjectionBackoff(time.Second), WithMaxEjectionPercent(50),
			WithSuccessRateEjection(SuccessRateEjection{Interval: 100 * time.Millisecond, RequestVolume: 20, MinimumHosts: 3}),
			WithEvents(func(e Event) {
				if e.Kind == EventPeerOutlier {
					outliers.Add(1)
				}
			}))
		require.NoError(t, err)
		var mu sync.Mutex
		var errs []string
		fail := func(format string, args ...any) {
			mu.Lock()
			errs = append(errs, fmt.Sprintf(format, args...))
			mu.Unlock()
		}
		var picked, reported, p0, seq atomic.Int64
		var work sync.WaitGroup
		for g := range workers {
			work.Add(1)
			go func() {
				defer work.Done()
				var r Request
				for k := range requests {
					if seq.Add(1)%10 == 0 {
						clk.add(time.Millisecond)
					}
					r.Reset()
					r.SetKey(strconv.Itoa(g*requests + k))
					r.SetClientAddr(netip.AddrFrom4([4]byte{byte(k), byte(k >> 8), byte(g), 1})) // IPHash reads the first three bytes
					tryRequest(b, &r, func(p *Peer) Outcome {
						failed := k%50 == 0
						if p.Addr() == "p0" {
							failed = p0.Add(1)%2 == 0
						}
						return Outcome{Failed: failed, Latency: time.Millisecond}
					}, &picked, &reported, fail)
				}
			}()
		}
		stop := make(chan struct{})
		var upd sync.WaitGroup
		upd.Go(func() {
			snapshot := func() []*Peer {
				snap := make([]*Peer, len(peers))
				for j, p := range peers {
					snap[j] = NewPeer(p.Addr(), opts(j)...)
				}
				return snap
			}
			if err := churnList(toSet(b), peers[7], extra, nil, snapshot, stop); err != nil {
				fail("%v", err)
			}
		})
		work.Wait()
		close(stop)
		upd.Wait()
		require.Empty(t, errs)
		assert.Equal(t, picked.Load(), reported.Load())
		for _, p := range append(toSet(b).Peers(), extra) {
			assert.Zero(t, p.InFlight(), "peer %s", p)
		}
		assert.Equal(t, uint64(outliers.Load()), b.(interface{ OutlierEjectionCount() uint64 }).OutlierEjectionCount())
		if !pc.alg.Latency {
			assert.Positive(t, outliers.Load(), "p0 ejected")
		}
	})
}
