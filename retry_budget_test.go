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

func TestNewRetryBudget_badInput(t *testing.T) {
	tests := []struct {
		name             string
		ratio, minPerSec float64
		window           time.Duration
		opts             []Option
		want             string
	}{
		{"negative ratio", -0.1, 10, 10 * time.Second, nil, "ratio -0.1"},
		{"NaN ratio", math.NaN(), 10, 10 * time.Second, nil, "ratio NaN"},
		{"huge ratio", 1001, 10, 10 * time.Second, nil, "ratio 1001"},
		{"negative minimum", 0.2, -1, 10 * time.Second, nil, "minPerSecond -1"},
		{"infinite minimum", 0.2, math.Inf(1), 10 * time.Second, nil, "minPerSecond +Inf"},
		{"zero window", 0.2, 10, 0, nil, "window 0s"},
		{"short window", 0.2, 10, 999 * time.Millisecond, nil, "window 999ms"},
		{"long window", 0.2, 10, time.Minute + 1, nil, "window 1m0.000000001s"},
		{"nil clock", 0.2, 10, 10 * time.Second, []Option{WithClock(nil)}, "WithClock(nil)"},
		{"foreign option", 0.2, 10, 10 * time.Second, []Option{WithEvents(func(Event) {})}, "does not use WithEvents"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := NewRetryBudget(tc.ratio, tc.minPerSec, tc.window, tc.opts...)
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, b)
		})
	}
	_, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow)
	require.NoError(t, err)
	var zero RetryBudget
	zero.Deposit()
	assert.False(t, zero.TryWithdraw(), "the zero value refuses every retry")
	_, err = zero.PickRetry(nil, nil)
	assert.ErrorIs(t, err, ErrRetryBudget)
	assert.Equal(t, RetryBudgetStats{Deposits: 1, Refused: 2}, zero.Stats())
	_, err = NewRoundRobin(weighted(1), WithRetryBudget(&RetryBudget{}))
	require.ErrorIs(t, err, ErrInvalidConfig, "a picker refuses WithRetryBudget")
	p, err := NewRoundRobin(weighted(1))
	require.NoError(t, err)
	err = Do(context.Background(), p, nil, func(context.Context, *Peer) error { return nil }, WithRetryBudget(nil))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithRetryBudget(nil)")
}

// TestRetryBudget_pickRetry checks that PickRetry gives back a retry that
// found no peer: three peers that always fail and a reserve of 100/s ×
// 10 s. Each of 10 requests makes 3 attempts (2 retries), then PickRetry
// finds the tries exhausted, so 20 retries are made and 1000 - 20 = 980
// remain, where spending the refused ones too would leave 970.
func TestRetryBudget_pickRetry(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(0, 100, 10*time.Second, clk.opt())
	require.NoError(t, err)
	p, err := NewRoundRobin(makePeers(3, letter, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }), clk.opt())
	require.NoError(t, err)
	errDown := errors.New("down")
	attempts := 0
	for range 10 {
		err := Do(context.Background(), p, nil, func(context.Context, *Peer) error { attempts++; return errDown }, WithRetryBudget(b), clk.opt())
		require.ErrorIs(t, err, ErrTriesExhausted)
		require.ErrorIs(t, err, errDown)
		require.NotErrorIs(t, err, ErrRetryBudget)
	}
	assert.Equal(t, 30, attempts)
	assert.Equal(t, RetryBudgetStats{Deposits: 10, Retries: 20}, b.Stats())
	left := 0
	for b.TryWithdraw() {
		left++
	}
	assert.Equal(t, 980, left)
}

func TestRetryBudget_allocs(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow, clk.opt())
	require.NoError(t, err)
	p, err := NewRoundRobin(weighted(1, 1))
	require.NoError(t, err)
	var r Request
	allocs := testing.AllocsPerRun(1000, func() {
		clk.add(time.Millisecond)
		b.Deposit()
		b.TryWithdraw()
		r.Reset()
		if peer, err := b.PickRetry(p, &r); err == nil {
			_ = p.Done(peer, Outcome{})
		}
	})
	assert.Zero(t, allocs)
}

// TestRetryBudget_refusalKeepsPicker: PickRetry asks the budget before
// Pick, so a refused retry leaves the picker as it was: nginx's smooth
// weighted round robin over weights 5, 1, 1 gives its sequence a a b a c
// a a to the first attempts of seven requests whose retries are refused,
// as to seven requests never retried (a Pick then Abandoned would have
// moved the weights). A request that has tried every peer gets
// ErrTriesExhausted, neither taken from the budget nor counted refused.
func TestRetryBudget_refusalKeepsPicker(t *testing.T) {
	b, err := NewRetryBudget(0, 0, time.Second, newFakeClock().opt())
	require.NoError(t, err)
	p, err := NewSmoothWRR(weighted(5, 1, 1))
	require.NoError(t, err)
	var got []string
	for range 7 {
		var r Request
		peer, err := p.Pick(&r)
		require.NoError(t, err)
		got = append(got, peer.Addr())
		require.NoError(t, p.Done(peer, Outcome{}))
		_, err = b.PickRetry(p, &r)
		require.ErrorIs(t, err, ErrRetryBudget)
	}
	assert.Equal(t, []string{"a", "a", "b", "a", "c", "a", "a"}, got)
	assert.Equal(t, RetryBudgetStats{Refused: 7}, b.Stats())

	for _, n := range []int{1, 3} {
		p, err := NewRoundRobin(makePeers(n, letter, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }))
		require.NoError(t, err)
		b, err := NewRetryBudget(0, 0, time.Second)
		require.NoError(t, err)
		errDown := errors.New("503")
		err = Do(context.Background(), p, nil, func(context.Context, *Peer) error { return errDown }, WithRetryBudget(b))
		if n == 1 {
			require.ErrorIs(t, err, ErrTriesExhausted, "one peer: no retry was possible")
			require.NotErrorIs(t, err, ErrRetryBudget)
			assert.Equal(t, RetryBudgetStats{Deposits: 1}, b.Stats())
		} else {
			require.ErrorIs(t, err, ErrRetryBudget, "two peers left: the budget refused")
			assert.Equal(t, RetryBudgetStats{Deposits: 1, Refused: 1}, b.Stats())
		}
		require.ErrorIs(t, err, errDown)
	}
}

// BenchmarkDo measures one Do whose try succeeds at once, over RoundRobin
// with 16 peers, with no budget and with Finagle's: the budget adds one
// deposit to a request that is not retried. "budget" is Do with the
// deprecated WithRetryBudget, "attempts" Attempts.Do with the same budget
// as its Budget (a retrybudget.Budget wraps the same implementation).
func BenchmarkDo(b *testing.B) {
	try := func(context.Context, *Peer) error { return nil }
	for _, name := range []string{"none", "budget", "attempts"} {
		b.Run(name, func(b *testing.B) {
			p, err := NewRoundRobin(benchPeers(16))
			require.NoError(b, err)
			bud, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow)
			require.NoError(b, err)
			var opts []Option
			if name == "budget" {
				opts = append(opts, WithRetryBudget(bud))
			}
			ctx := context.Background()
			var r Request
			b.ReportAllocs()
			for b.Loop() {
				r.Reset()
				var err error
				if name == "attempts" {
					loop := Attempts{Picker: p, Request: &r, Budget: bud}
					err = loop.Do(ctx, try)
				} else {
					err = Do(ctx, p, &r, try, opts...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
