package sim

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// single returns a scenario of one backend at rate requests per second, no
// failure accounting and a timeout no request reaches.
func single(b Backend, rate float64, d time.Duration) Scenario {
	return Scenario{
		Name:        "single",
		Backends:    []Backend{b},
		Rate:        rate,
		Duration:    d,
		Timeout:     time.Hour,
		PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)},
		Watch:       -1,
	}
}

func policy(t *testing.T, name string) Policy {
	t.Helper()
	p, ok := PolicyByName(name)
	require.True(t, ok, "policy %s", name)
	return p
}

// seeds is how many independent runs the analytic checks average over.
const seeds = 8

// t995 is Student's t 0.995 quantile with seeds−1 = 7 degrees of freedom.
// The analytic checks use 99% intervals: six checks at 95% would raise a
// false alarm on a quarter of all seed choices.
const t995 = 3.499

// meanOver returns the mean latency in seconds over seeds 1..seeds and
// the half-width of its 99% confidence interval.
func meanOver(t *testing.T, sc Scenario, p Policy) (mean, ci float64) {
	t.Helper()
	v := make([]float64, seeds)
	for i := range v {
		r, err := Run(&sc, p, uint64(i+1))
		require.NoError(t, err)
		v[i] = r.Mean.Seconds()
	}
	s := stat(v)
	return s.Mean, s.CI / tq(seeds-1) * t995
}

// TestRunQueueingTheory checks the engine against closed-form means: each
// simulated mean, over independent seeds, must hold the analytic value
// inside its 99% confidence interval.
func TestRunQueueingTheory(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name    string
		backend Backend
		rate    float64
		want    float64 // seconds
	}{
		{"M/M/1 at 50%", Backend{Workers: 1, Mean: 10 * ms}, 50, MM1Mean(50, 100)},
		{"M/M/1 at 80%", Backend{Workers: 1, Mean: 10 * ms}, 80, MM1Mean(80, 100)},
		{"M/M/4 at 70%", Backend{Workers: 4, Mean: 40 * ms}, 70, MMcMean(70, 25, 4)},
		// With unlimited workers nobody waits: the mean service time.
		{"M/M/inf", Backend{Mean: 40 * ms}, 100, 0.040},
		{"lognormal, no queue", Backend{Mean: 40 * ms, Dist: LogNormal, Sigma: 1}, 100, 0.040},
	}
	p := policy(t, "SmoothWRR")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mean, ci := meanOver(t, single(tt.backend, tt.rate, 200*time.Second), p)
			assert.InDelta(t, tt.want, mean, ci, "simulated %v ± %v s, analytic %v s", mean, ci, tt.want)
		})
	}
}

// TestRunTStar replays the square-root split on the uneven M/M/1 backends
// of the hetero scenario, without the late bloomer: the simulated mean must
// hold the analytic T* inside its 99% confidence interval.
func TestRunTStar(t *testing.T) {
	sc, ok := Lookup("hetero")
	require.True(t, ok)
	sc.Backends[9].Phases = nil
	sc.Steady = 0
	tstar, _, ok := TStar(&sc)
	require.True(t, ok)
	mean, ci := meanOver(t, sc, policy(t, OracleSplit))
	assert.InDelta(t, tstar, mean, ci, "simulated %v ± %v s, T* %v s", mean, ci, tstar)
}

// recorder wraps a picker and keeps every outcome reported to it.
type recorder struct {
	balancer.Picker
	outcomes map[string][]balancer.Outcome
}

func (r *recorder) Done(p *balancer.Peer, o balancer.Outcome) error {
	r.outcomes[p.Addr()] = append(r.outcomes[p.Addr()], o)
	return r.Picker.Done(p, o)
}

// recording returns a SmoothWRR policy that records outcomes in rec.
func recording(rec *recorder) Policy {
	return Policy{Name: "recorder", New: func(peers []*balancer.Peer, now func() time.Time, _ rand.Source) (balancer.Picker, error) {
		p, err := balancer.NewSmoothWRR(peers, balancer.WithClock(now))
		rec.Picker = p
		return rec, err
	}}
}

func TestRunFaults(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name       string
		fault      Fault
		tries      int
		wantFailed time.Duration // the latency of every failed attempt on b1
		wantErrors bool          // some requests fail
	}{
		{"fast error", Fault{Mode: FastError, Prob: 1}, 1, FastErrorDelay, true},
		{"stall", Fault{Mode: Stall, Prob: 1}, 1, timeout, true},
		{"fast error, retried", Fault{Mode: FastError, Prob: 1}, 0, FastErrorDelay, false},
		{"stall, retried", Fault{Mode: Stall, Prob: 1}, 0, timeout, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := Backend{Workers: 4, Mean: 10 * time.Millisecond}
			sc := Scenario{
				Name:        "faults",
				Backends:    []Backend{b, b},
				Rate:        100,
				Duration:    10 * time.Second,
				Timeout:     timeout,
				Tries:       tt.tries,
				PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)},
				Watch:       1,
			}
			tt.fault.From, tt.fault.To = 2*time.Second, 8*time.Second
			sc.Backends[1].Faults = []Fault{tt.fault}
			rec := &recorder{outcomes: map[string][]balancer.Outcome{}}
			r, err := Run(&sc, recording(rec), 1)
			require.NoError(t, err)

			var failed int
			for _, o := range rec.outcomes["b1"] {
				if o.Failed {
					failed++
					assert.Equal(t, tt.wantFailed, o.Latency)
				}
			}
			for _, o := range rec.outcomes["b0"] {
				assert.False(t, o.Failed, "healthy backend failed")
			}
			assert.Positive(t, failed)
			assert.Equal(t, failed, r.FailedAttempts)
			if tt.wantErrors {
				// Without retries every failed attempt is a failed request.
				assert.Equal(t, failed, r.Failed)
			} else {
				assert.Zero(t, r.Failed)
			}
			assert.Equal(t, len(rec.outcomes["b0"])+len(rec.outcomes["b1"]), r.Attempts)
		})
	}
}

// TestRunTimeoutKeepsWorkerBusy: an attempt the client gives up on still
// occupies the worker, so with one worker and service far beyond the
// timeout, every attempt after the first times out too.
func TestRunTimeoutKeepsWorkerBusy(t *testing.T) {
	sc := single(Backend{Workers: 1, Mean: 10 * time.Second}, 10, 5*time.Second)
	sc.Timeout = 100 * time.Millisecond
	sc.Tries = 1
	r, err := Run(&sc, policy(t, "SmoothWRR"), 1)
	require.NoError(t, err)
	assert.Greater(t, r.ErrorRate(), 0.95)
	assert.Equal(t, sc.Timeout, r.P50)
}

func TestRunDeterministic(t *testing.T) {
	scs := []Scenario{mustLookup(t, "brownout"), mustLookup(t, "herd")}
	for i := range scs {
		scs[i].Duration = 20 * time.Second
	}
	pols := append([]Policy{policy(t, "SmoothWRR")}, Oracles()...)
	render := func(seed uint64, parallel int) []byte {
		rep, err := Compare(scs, pols, Options{Seeds: 2, Seed: seed, Parallel: parallel})
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, rep.Write(&b, true))
		return b.Bytes()
	}
	first := render(1, 1)
	assert.Equal(t, first, render(1, 1), "same seed, different output")
	assert.Equal(t, first, render(1, 3), "output depends on parallelism")
	assert.NotEqual(t, first, render(7, 2), "different seeds, same output")
}

// TestRunSamePolicyInputs: arrivals and request sizes do not depend on the
// policy, so two policies see the same number of requests.
func TestRunSamePolicyInputs(t *testing.T) {
	sc := mustLookup(t, "uniform")
	sc.Duration = 10 * time.Second
	a, err := Run(&sc, policy(t, "SmoothWRR"), 3)
	require.NoError(t, err)
	b, err := Run(&sc, policy(t, OracleSED), 3)
	require.NoError(t, err)
	assert.Equal(t, a.Requests, b.Requests)
}

func mustLookup(t *testing.T, name string) Scenario {
	t.Helper()
	s, ok := Lookup(name)
	require.True(t, ok, "scenario %s", name)
	return s
}

func TestRunRejectsBadScenarios(t *testing.T) {
	good := func() Scenario { return single(Backend{Workers: 1, Mean: time.Millisecond}, 10, time.Second) }
	tests := []struct {
		name   string
		break_ func(*Scenario)
	}{
		{"no backends", func(s *Scenario) { s.Backends = nil }},
		{"no duration", func(s *Scenario) { s.Duration = 0 }},
		{"no rate", func(s *Scenario) { s.Rate = 0 }},
		{"load of unlimited workers", func(s *Scenario) { s.Rate, s.Load, s.Backends[0].Workers = 0, 0.5, 0 }},
		{"zero mean", func(s *Scenario) { s.Backends[0].Mean = 0 }},
		{"negative workers", func(s *Scenario) { s.Backends[0].Workers = -1 }},
		{"bad phase", func(s *Scenario) { s.Backends[0].Phases = []Phase{{From: 0, To: time.Second, Factor: 0}} }},
		{"bad fault mode", func(s *Scenario) { s.Backends[0].Faults = []Fault{{To: time.Second, Prob: 1}} }},
		{"bad fault probability", func(s *Scenario) { s.Backends[0].Faults = []Fault{{To: time.Second, Mode: Stall, Prob: 2}} }},
		{"watch out of range", func(s *Scenario) { s.Watch = 1 }},
		{"negative tries", func(s *Scenario) { s.Tries = -1 }},
		{"bad jitter", func(s *Scenario) { s.Jitter = Jitter{Every: time.Second, Lo: 2, Hi: 1} }},
		{"negative round trip", func(s *Scenario) { s.Backends[0].RTT = -time.Millisecond }},
		{"round trip above an hour", func(s *Scenario) { s.Backends[0].RTT = time.Hour + 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.break_(&s)
			_, err := Run(&s, policy(t, "SmoothWRR"), 1)
			assert.ErrorIs(t, err, ErrInvalid)
		})
	}
	s := good()
	_, err := Run(&s, Policy{Name: "empty"}, 1)
	assert.Error(t, err, "a policy without a constructor")
}

// TestRunPickerError: a factory error is reported, naming the policy.
func TestRunPickerError(t *testing.T) {
	s := single(Backend{Workers: 1, Mean: time.Millisecond}, 10, time.Second)
	bad := Policy{Name: "bad", New: func(peers []*balancer.Peer, now func() time.Time, src rand.Source) (balancer.Picker, error) {
		return balancer.NewSmoothWRR(peers, balancer.WithRand(src)) // SmoothWRR takes no source
	}}
	_, err := Run(&s, bad, 1)
	require.Error(t, err)
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "bad")
}

// TestPickersBuild: every picker of the table accepts what its factory
// passes it.
func TestPickersBuild(t *testing.T) {
	for _, p := range Pickers() {
		t.Run(p.Name, func(t *testing.T) {
			peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b")}
			pk, err := p.New(peers, time.Now, rand.NewPCG(1, 2))
			require.NoError(t, err)
			assert.NotNil(t, pk)
			assert.False(t, p.IsOracle())
			if p.Probed != nil {
				w := &world{clients: []client{{}}}
				fresh := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b")}
				pk, err := p.Probed(fresh, time.Now, rand.NewPCG(1, 2), &prober{w: w})
				require.NoError(t, err)
				_, ok := pk.(balancer.ProbeReceiver)
				assert.True(t, ok, "a probing picker takes probe answers")
			}
		})
	}
	for _, p := range Oracles() {
		assert.True(t, p.IsOracle(), p.Name)
	}
}
