package balancer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttempts_misuse: a nil Picker, a nil try or a negative MaxTries is
// refused by Run, RunHedged, Do and Next (which takes no try) with
// ErrInvalidConfig and a message naming the field (and the value),
// before anything is picked or deposited; none panics.
func TestAttempts_misuse(t *testing.T) {
	lb, err := NewRoundRobin([]*Peer{NewPeer("a")})
	require.NoError(t, err)
	bud, err := NewRetryBudget(1, 0, time.Second)
	require.NoError(t, err)
	h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Delay: time.Second, Budget: bud})
	require.NoError(t, err)
	okTry := func(context.Context, *Peer) Verdict { return Verdict{} }
	okDo := func(context.Context, *Peer) error { return nil }
	for _, tc := range []struct {
		name  string
		a     Attempts
		nilFn bool
		want  string // in the message
	}{
		{"nil Picker", Attempts{}, false, "Picker is nil"},
		{"nil try", Attempts{Picker: lb}, true, "try is nil"},
		{"negative MaxTries", Attempts{Picker: lb, MaxTries: -1}, false, "MaxTries -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			try, do := okTry, okDo
			if tc.nilFn {
				try, do = nil, nil
			}
			runs := map[string]func(a *Attempts) error{
				"Run":       func(a *Attempts) error { return a.Run(context.Background(), try) },
				"RunHedged": func(a *Attempts) error { return a.RunHedged(context.Background(), h, try) },
				"Do":        func(a *Attempts) error { return a.Do(context.Background(), do) },
			}
			if !tc.nilFn { // Next takes no try
				runs["Next"] = func(a *Attempts) error {
					_, err := a.Next(context.Background(), 0)
					return err
				}
			}
			for name, run := range runs {
				a := tc.a
				var err error
				require.NotPanics(t, func() { err = run(&a) }, name)
				assert.ErrorIs(t, err, ErrInvalidConfig, name)
				if err != nil {
					assert.Contains(t, err.Error(), tc.want, name)
				}
			}
		})
	}
	assert.Zero(t, lb.Peers()[0].InFlight(), "nothing picked")
	assert.Equal(t, RetryBudgetStats{}, bud.Stats(), "nothing deposited")
}

// TestRunHedged_misuse: RunHedged names itself when it refuses a nil
// Picker also with a nil h (which is Run), and refuses a Hedging not made
// by NewHedging (no budget, no bound) with ErrInvalidConfig instead of
// panicking on its nil budget, before anything is picked or deposited.
func TestRunHedged_misuse(t *testing.T) {
	try := func(context.Context, *Peer) Verdict { return Verdict{} }

	var empty Attempts
	err := empty.RunHedged(context.Background(), nil, try)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "Attempts.RunHedged")

	lb, err := NewRoundRobin([]*Peer{NewPeer("a")})
	require.NoError(t, err)
	bud, err := NewRetryBudget(1, 0, time.Second)
	require.NoError(t, err)
	a := Attempts{Picker: lb, Budget: bud}
	require.NotPanics(t, func() { err = a.RunHedged(context.Background(), &Hedging{}, try) })
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "not made by NewHedging")
	assert.Zero(t, lb.Peers()[0].InFlight(), "nothing picked")
	assert.Equal(t, RetryBudgetStats{}, bud.Stats(), "nothing deposited")
}
