package retrybudget_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// TestAttemptsDo_budget runs 100 calls of Attempts.Do whose try always
// fails over 50 peers that never go out (max_fails 0), so only the budget
// ends each call: ratio 0.2, reserve 1/s × 10 s = 10, the clock still.
// Call k has deposited k requests when it retries, so the retries made by
// the end of call k are floor(10 + 0.2k): 10 in the first call, then one
// every fifth call, 30 in all, and 130 attempts. Without the budget each
// call would try all 50 peers: 5000 attempts.
func TestAttemptsDo_budget(t *testing.T) {
	clk := newClock()
	b, err := retrybudget.New(0.2, 1, 10*time.Second, clk.opt())
	require.NoError(t, err)
	p, err := balancer.NewRoundRobin(peers(50), balancer.WithClock(clk.now))
	require.NoError(t, err)
	errDown := errors.New("503")
	attempts := 0
	try := func(context.Context, *balancer.Peer) error { attempts++; return errDown }
	for k := 1; k <= 100; k++ {
		loop := balancer.Attempts{Picker: p, Budget: b, Now: clk.now}
		err := loop.Do(context.Background(), try)
		require.ErrorIs(t, err, balancer.ErrRetryBudget)
		require.ErrorIs(t, err, errDown)
		require.Contains(t, err.Error(), "retry refused by the retry budget (last attempt on")
		retries := int(math.Floor(10 + 0.2*float64(k) + 1e-9))
		require.Equal(t, k+retries, attempts, "after call %d", k)
	}
	assert.Equal(t, 130, attempts)
	assert.Equal(t, retrybudget.Stats{Deposits: 100, Retries: 30, Refused: 100}, b.Stats())

	// A call whose first attempt succeeds withdraws nothing.
	loop := balancer.Attempts{Picker: p, Budget: b}
	require.NoError(t, loop.Do(context.Background(), func(context.Context, *balancer.Peer) error { return nil }))
	assert.Equal(t, retrybudget.Stats{Deposits: 101, Retries: 30, Refused: 100}, b.Stats())
}

// TestAttemptsDo_noPeerLeft: a retry whose pick finds no peer is given
// back. Three peers that always fail and a reserve of 100/s × 10 s: each
// of 10 requests makes 3 attempts (2 retries), then finds its tries
// exhausted, which takes nothing from the budget; 20 retries are made and
// 1000 - 20 = 980 remain, where spending the exhausted ones too would
// leave 970. A picker that finds no live peer for any retry (noRetryPeer):
// each request's retry is withdrawn, its pick fails (ErrNoLivePeer) and
// the retry is refunded: 1000 remain.
func TestAttemptsDo_noPeerLeft(t *testing.T) {
	for _, tc := range []struct {
		name     string
		picker   func(balancer.Picker) balancer.Picker
		wantErr  error
		attempts int
		retries  uint64
		left     int
	}{
		{"tries exhausted", func(p balancer.Picker) balancer.Picker { return p }, balancer.ErrTriesExhausted, 30, 20, 980},
		{"no live peer", func(p balancer.Picker) balancer.Picker { return noRetryPeer{p} }, balancer.ErrNoLivePeer, 10, 0, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			b, err := retrybudget.New(0, 100, 10*time.Second, clk.opt())
			require.NoError(t, err)
			rr, err := balancer.NewRoundRobin(peers(3), balancer.WithClock(clk.now))
			require.NoError(t, err)
			p := tc.picker(rr)
			errDown := errors.New("down")
			attempts := 0
			for range 10 {
				loop := balancer.Attempts{Picker: p, Budget: b, Now: clk.now}
				err := loop.Do(context.Background(), func(context.Context, *balancer.Peer) error { attempts++; return errDown })
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, err, errDown)
				require.NotErrorIs(t, err, balancer.ErrRetryBudget)
			}
			assert.Equal(t, tc.attempts, attempts)
			assert.Equal(t, retrybudget.Stats{Deposits: 10, Retries: tc.retries}, b.Stats())
			left := 0
			for b.TryWithdraw() {
				left++
			}
			assert.Equal(t, tc.left, left)
		})
	}
}

// noRetryPeer is a picker that finds no live peer for a request's retry.
type noRetryPeer struct{ balancer.Picker }

func (p noRetryPeer) Pick(r *balancer.Request) (*balancer.Peer, error) {
	if r.Attempts() > 0 {
		return nil, balancer.ErrNoLivePeer
	}
	return p.Picker.Pick(r)
}

// TestAttemptsDo_steady runs Attempts.Do at a steady rate on the virtual
// clock for 60 s (rate/10 requests every tenth of the 10 s window), each
// try failing, over 200 peers that never go out (more than the reserve,
// so the budget ends every request). Each tenth ends on a refused retry,
// so at the end of every tenth the window ending there is spent: its
// retries are the largest whole number ≤ ratio × its requests +
// minPerSecond × window (0.2 × 1000 + 100 = 300 at 100 a second), and the
// six windows of tenths 0-9, ..., 50-59 hold every retry, so the attempts
// a request are 1 + ratio + minPerSecond × duration / requests = 1 +
// ratio + minPerSecond / rate: 2.2 at 10 a second, 1.3 at 100, 1.21 at
// 1000 (Budget's bound; 1 + ratio alone is below all three). Every window
// of ten tenths, not only those six, keeps the rule.
func TestAttemptsDo_steady(t *testing.T) {
	const (
		ratio, minPerSec = 0.2, 10.0
		window           = 10 * time.Second
		tenths           = 60
	)
	for _, tc := range []struct {
		rate int // requests a second
		want float64
	}{{10, 2.2}, {100, 1.3}, {1000, 1.21}} {
		t.Run(fmt.Sprintf("%d a second", tc.rate), func(t *testing.T) {
			perTenth := tc.rate * int(window/time.Second) / 10
			clk := newClock()
			b, err := retrybudget.New(ratio, minPerSec, window, clk.opt())
			require.NoError(t, err)
			p, err := balancer.NewRoundRobin(peers(200), balancer.WithClock(clk.now))
			require.NoError(t, err)
			errDown := errors.New("503")
			retries := make([]int, tenths)
			for k := range tenths {
				for range perTenth {
					attempts := 0
					loop := balancer.Attempts{Picker: p, Budget: b, Now: clk.now}
					err := loop.Do(context.Background(), func(context.Context, *balancer.Peer) error { attempts++; return errDown })
					require.ErrorIs(t, err, balancer.ErrRetryBudget)
					retries[k] += attempts - 1
				}
				clk.add(window / 10)
			}
			reserve := minPerSec * window.Seconds()
			perWindow := ratio*float64(10*perTenth) + reserve
			for k := 9; k < tenths; k++ {
				sum := 0
				for _, r := range retries[k-9 : k+1] {
					sum += r
				}
				require.LessOrEqual(t, float64(sum), perWindow, "tenths %d to %d", k-9, k)
				if k%10 == 9 {
					require.Equal(t, int(math.Floor(perWindow+1e-9)), sum, "window %d is spent", k/10)
				}
			}
			total := 0
			for _, r := range retries {
				total += r
			}
			requests := perTenth * tenths
			bound := 1 + ratio + minPerSec/float64(tc.rate)
			require.InDelta(t, tc.want, bound, 1e-12)
			got := float64(requests+total) / float64(requests)
			assert.InDelta(t, bound, got, 1e-9, "steady traffic spends the budget exactly")
		})
	}
}

// TestAttempts_nilBudget: a nil *Budget in Attempts.Budget is no budget:
// a request retried on every one of 5 failing peers, as with a nil
// field, where the zero Budget (which refuses every retry) stops it after
// one attempt.
func TestAttempts_nilBudget(t *testing.T) {
	var none *retrybudget.Budget
	for _, tc := range []struct {
		name     string
		budget   balancer.Budget
		attempts int
		wantErr  error
	}{
		{"nil field", nil, 5, balancer.ErrTriesExhausted},
		{"nil *Budget", none, 5, balancer.ErrTriesExhausted},
		{"zero Budget", &retrybudget.Budget{}, 1, balancer.ErrRetryBudget},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := balancer.NewRoundRobin(peers(5))
			require.NoError(t, err)
			attempts := 0
			loop := balancer.Attempts{Picker: p, Budget: tc.budget}
			err = loop.Do(context.Background(), func(context.Context, *balancer.Peer) error { attempts++; return errors.New("503") })
			require.ErrorIs(t, err, tc.wantErr)
			assert.Equal(t, tc.attempts, attempts)
		})
	}
}
