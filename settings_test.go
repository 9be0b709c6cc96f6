package balancer

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The pickers' own settings: a zero field takes the default the field's
// doc states, a field given is used as given, -1 stands for 0 where 0 is
// meaningful, and a value out of range is refused naming the field. The
// expected values are the docs' (the defaults written out, not read from
// the constants).

// ffKnobs are a FastestFirst's tuning as built: band, exponent, floor,
// tolerance.
type ffKnobs struct {
	band, exponent float64
	floor          int64
	tol            float64
}

func TestFastestFirstSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    FastestFirstSettings
		want ffKnobs
		err  string // the refusal's text, "" for none
	}{
		{name: "zero: every default", want: ffKnobs{1.25, 2, 1, 3}},
		{name: "each given", s: FastestFirstSettings{Band: 2, Exponent: 1, Floor: 5, Tolerance: 1.5}, want: ffKnobs{2, 1, 5, 1.5}},
		{name: "exponent -1 is 0", s: FastestFirstSettings{Exponent: -1}, want: ffKnobs{1.25, 0, 1, 3}},
		{name: "exponent -2", s: FastestFirstSettings{Exponent: -2}, err: "FastestFirstSettings.Exponent(-2): out of [0, 8]"},
		{name: "exponent 9", s: FastestFirstSettings{Exponent: 9}, err: "FastestFirstSettings.Exponent(9): out of [0, 8]"},
		{name: "band 1", s: FastestFirstSettings{Band: 1}, err: "FastestFirstSettings.Band(1): out of (1, 16]"},
		{name: "band NaN", s: FastestFirstSettings{Band: math.NaN()}, err: "FastestFirstSettings.Band(NaN): out of (1, 16]"},
		{name: "floor 101", s: FastestFirstSettings{Floor: 101}, err: "FastestFirstSettings.Floor(101): out of [1, 100]"},
		{name: "floor -1 is not 0", s: FastestFirstSettings{Floor: -1}, err: "FastestFirstSettings.Floor(-1): out of [1, 100]"},
		{name: "tolerance 0.5", s: FastestFirstSettings{Tolerance: 0.5}, err: "FastestFirstSettings.Tolerance(0.5): out of [1, 100]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f, err := tt.s.New([]*Peer{NewPeer("a")})
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.EqualError(t, err, "balancer: FastestFirst: "+tt.err+": "+ErrInvalidConfig.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, ffKnobs{f.band, f.exponent, f.floor, f.tol})
		})
	}
}

func TestPrequalSettings(t *testing.T) {
	type knobs struct {
		perPick  float64
		interval int64 // the probe bucket's, ns: 1e9/ProbesPerSecond
		size     int
		maxAge   time.Duration
		q        float64
		prober   bool
	}
	pr := proberFunc(func(*Peer, ProbeReceiver) {})
	for _, tt := range []struct {
		name string
		s    PrequalSettings
		want knobs
		err  string
	}{
		{name: "zero: every default", want: knobs{3, 1e5, 4, time.Second, 0.3, false}},
		{name: "each given", s: PrequalSettings{Prober: pr, ProbesPerPick: 2, ProbesPerSecond: 100, PoolSize: 8, MaxAge: 500 * time.Millisecond, HotQuantile: 0.5},
			want: knobs{2, 1e7, 8, 500 * time.Millisecond, 0.5, true}},
		{name: "probes a pick -1 is none", s: PrequalSettings{ProbesPerPick: -1}, want: knobs{0, 1e5, 4, time.Second, 0.3, false}},
		{name: "probes a pick 17", s: PrequalSettings{ProbesPerPick: 17}, err: "PrequalSettings.ProbesPerPick(17): probes a pick 17 out of [0, 16]"},
		{name: "probes a pick -2", s: PrequalSettings{ProbesPerPick: -2}, err: "PrequalSettings.ProbesPerPick(-2): probes a pick -2 out of [0, 16]"},
		{name: "probes a second tiny", s: PrequalSettings{ProbesPerSecond: 1e-4}, err: "PrequalSettings.ProbesPerSecond(0.0001): probes a second 0.0001 not a finite number of at least 0.001"},
		{name: "pool 1025", s: PrequalSettings{PoolSize: 1025}, err: "PrequalSettings.PoolSize(1025): size 1025 out of [1, 1024]"},
		{name: "max age negative", s: PrequalSettings{MaxAge: -time.Second}, err: "PrequalSettings.MaxAge(-1s): max age -1s out of (0, 1h0m0s]"},
		{name: "hot quantile 1.5", s: PrequalSettings{HotQuantile: 1.5}, err: "PrequalSettings.HotQuantile(1.5): out of (0, 1]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.s.New([]*Peer{NewPeer("a")})
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.EqualError(t, err, "balancer: Prequal: "+tt.err+": "+ErrInvalidConfig.Error())
				return
			}
			require.NoError(t, err)
			defer b.Close()
			assert.Equal(t, tt.want, knobs{b.perPick, b.bucket.interval, b.pool.size, time.Duration(b.pool.maxAge), b.pool.q, b.prober != nil})
		})
	}
}

func TestReportedWRRSettings(t *testing.T) {
	type knobs struct {
		blackout, expiration, period time.Duration
		penalty                      float64
	}
	for _, tt := range []struct {
		name string
		s    ReportedWRRSettings
		want knobs
		err  string
	}{
		{name: "zero: A58's defaults", want: knobs{10 * time.Second, 3 * time.Minute, time.Second, 1}},
		{name: "each given", s: ReportedWRRSettings{BlackoutPeriod: time.Second, WeightExpirationPeriod: time.Minute, WeightUpdatePeriod: 100 * time.Millisecond, ErrorUtilizationPenalty: 2},
			want: knobs{time.Second, time.Minute, 100 * time.Millisecond, 2}},
		{name: "-1: no blackout, no penalty", s: ReportedWRRSettings{BlackoutPeriod: -1, ErrorUtilizationPenalty: -1}, want: knobs{0, 3 * time.Minute, time.Second, 0}},
		{name: "blackout -1s", s: ReportedWRRSettings{BlackoutPeriod: -time.Second}, err: "ReportedWRRSettings.BlackoutPeriod(-1s): negative"},
		{name: "expiration negative", s: ReportedWRRSettings{WeightExpirationPeriod: -time.Second}, err: "ReportedWRRSettings.WeightExpirationPeriod(-1s): not above 0"},
		{name: "update period 1µs", s: ReportedWRRSettings{WeightUpdatePeriod: time.Microsecond}, err: "ReportedWRRSettings.WeightUpdatePeriod(1µs): below 1ms"},
		{name: "penalty -2", s: ReportedWRRSettings{ErrorUtilizationPenalty: -2}, err: "ReportedWRRSettings.ErrorUtilizationPenalty(-2): not a finite number ≥ 0"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.s.New([]*Peer{NewPeer("a")})
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.EqualError(t, err, "balancer: ReportedWRR: "+tt.err+": "+ErrInvalidConfig.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, knobs{time.Duration(s.blackout), time.Duration(s.expiration), time.Duration(s.period), s.penalty})
		})
	}
}

func TestConsistentHashSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    ConsistentHashSettings
		want float64 // the bound's factor, 0 for none
		err  string
	}{
		{name: "zero: no bound", want: 0},
		{name: "1.25", s: ConsistentHashSettings{BoundedLoad: 1.25}, want: 1.25},
		{name: "0.5", s: ConsistentHashSettings{BoundedLoad: 0.5}, err: "ConsistentHashSettings.BoundedLoad(0.5): the factor must be finite and at least 1"},
		{name: "+Inf", s: ConsistentHashSettings{BoundedLoad: math.Inf(1)}, err: "ConsistentHashSettings.BoundedLoad(+Inf): the factor must be finite and at least 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := tt.s.New([]*Peer{NewPeer("a")})
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.EqualError(t, err, "balancer: ConsistentHash: "+tt.err+": "+ErrInvalidConfig.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, c.bound)
		})
	}
}

func TestRandomWeightedSettings(t *testing.T) {
	for _, tt := range []struct {
		name string
		s    RandomWeightedSettings
		opts []Option
		want time.Duration // the warm-up, 0 for none
		err  string
	}{
		{name: "zero: no warm-up", want: 0},
		{name: "1m", s: RandomWeightedSettings{Warmup: time.Minute}, want: time.Minute},
		{name: "negative", s: RandomWeightedSettings{Warmup: -time.Second}, err: "RandomWeightedSettings.Warmup(-1s): negative"},
		{name: "with slow start", s: RandomWeightedSettings{Warmup: time.Second}, opts: []Option{WithSlowStart(time.Second, 1, 10)},
			err: "RandomWeightedSettings.Warmup(1s) and WithSlowStart both ramp a new peer up; give one"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b, err := tt.s.New([]*Peer{NewPeer("a")}, tt.opts...)
			if tt.err != "" {
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.EqualError(t, err, "balancer: RandomWeighted: "+tt.err+": "+ErrInvalidConfig.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, time.Duration(b.warmup))
		})
	}
}

// TestSettings_optionByName: a settings type's Option is what a picker
// built by name (Algorithm.New) takes: its own picker applies it, in
// order among the options, and every other picker refuses it.
func TestSettings_optionByName(t *testing.T) {
	settings := map[string]Option{
		"FastestFirst":   FastestFirstSettings{Band: 2}.Option(),
		"Prequal":        PrequalSettings{HotQuantile: 0.5}.Option(),
		"ReportedWRR":    ReportedWRRSettings{BlackoutPeriod: -1}.Option(),
		"ConsistentHash": ConsistentHashSettings{BoundedLoad: 2}.Option(),
		"RandomWeighted": RandomWeightedSettings{Warmup: time.Second}.Option(),
	}
	typeOf := map[string]string{"FastestFirst": "FastestFirstSettings", "Prequal": "PrequalSettings", "ReportedWRR": "ReportedWRRSettings",
		"ConsistentHash": "ConsistentHashSettings", "RandomWeighted": "RandomWeightedSettings"}
	for _, a := range Algorithms() {
		for owner, opt := range settings {
			_, err := a.New([]*Peer{NewPeer("a")}, opt)
			if a.Name == owner {
				assert.NoError(t, err, "%s takes its settings", a.Name)
				continue
			}
			assert.ErrorIs(t, err, ErrInvalidConfig, "%s given %s's settings", a.Name, owner)
			assert.ErrorContains(t, err, "balancer: "+a.Name+" does not use "+typeOf[owner])
		}
	}
	// In order: the later of two settings of one field wins, and a field
	// left 0 keeps what an earlier one set.
	p, err := AlgorithmNamed("FastestFirst")
	require.NoError(t, err)
	b, err := p.New([]*Peer{NewPeer("a")}, FastestFirstSettings{Band: 2, Floor: 7}.Option(), FastestFirstSettings{Band: 3}.Option())
	require.NoError(t, err)
	assert.Equal(t, ffKnobs{3, 2, 7, 3}, ffKnobs{b.(*FastestFirst).band, b.(*FastestFirst).exponent, b.(*FastestFirst).floor, b.(*FastestFirst).tol})
}

// TestRetryBudgetDo: RetryBudget.Do takes each retry from its budget, as
// Do with WithRetryBudget did: a budget of no retries ends the call at the
// first failure, with ErrRetryBudget and the attempt's error; the request
// is deposited. A nil budget, and WithRetryBudget beside it, are refused.
func TestRetryBudgetDo(t *testing.T) {
	clk := newFakeClock()
	lb, err := NewRoundRobin([]*Peer{NewPeer("a"), NewPeer("b")}, clk.opt())
	require.NoError(t, err)
	none, err := NewRetryBudget(0, 0, time.Second, clk.opt())
	require.NoError(t, err)
	boom := errors.New("boom")
	var tries int
	err = none.Do(context.Background(), lb, nil, func(context.Context, *Peer) error { tries++; return boom }, clk.opt())
	require.ErrorIs(t, err, ErrRetryBudget)
	require.ErrorIs(t, err, boom)
	assert.Equal(t, 1, tries, "the retry is refused")
	assert.Equal(t, RetryBudgetStats{Deposits: 1, Refused: 1}, none.Stats())

	var nilBudget *RetryBudget
	err = nilBudget.Do(context.Background(), lb, nil, func(context.Context, *Peer) error { return nil })
	assert.ErrorIs(t, err, ErrInvalidConfig)
	err = none.Do(context.Background(), lb, nil, func(context.Context, *Peer) error { return nil }, WithRetryBudget(none))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	assert.ErrorContains(t, err, "RetryBudget.Do does not use WithRetryBudget")
}
