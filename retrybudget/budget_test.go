package retrybudget_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// step is one step of a budget script: move the clock by advance, deposit
// deposits requests, refund refunds retries, then withdraw until refused,
// expecting exactly want retries to be allowed.
type step struct {
	advance  time.Duration
	deposits int
	refunds  int
	want     int
}

// TestBudget_arithmetic runs scripts whose allowed retries follow from the
// budget's rule, retries made in the window ≤ ratio × deposits in it +
// minPerSecond × window, where the window is the current tenth of it and
// the nine before (an entry counts from its tenth's start to the end of
// the tenth ten later).
func TestBudget_arithmetic(t *testing.T) {
	tests := []struct {
		name             string
		ratio, minPerSec float64
		window           time.Duration
		steps            []step
	}{
		// Finagle's defaults with no traffic: the reserve, 10/s × 10 s.
		{"reserve alone", 0.2, 10, 10 * time.Second, []step{{0, 0, 0, 100}}},
		// 50 requests × 0.2 = 10 retries; 5 more requests, 1 more retry;
		// 4 more (59 × 0.2 = 11.8), none.
		{"ratio alone", 0.2, 0, 10 * time.Second, []step{{0, 50, 0, 10}, {0, 5, 0, 1}, {0, 4, 0, 0}}},
		// 0.1 × 30 = 3 exactly, not 2.9999.
		{"ratio of a tenth", 0.1, 0, 10 * time.Second, []step{{0, 30, 0, 3}}},
		// Reserve 2 × 5 s = 10 plus 0.5 × 8 = 4.
		{"both", 0.5, 2, 5 * time.Second, []step{{0, 8, 0, 14}}},
		// Reserve 1/s × 10 s = 10 taken at 0; the retries of tenth 0
		// count until 10 s (tenth 10): at 9.999 s none, at 10 s ten.
		{"retries leave the window", 0, 1, 10 * time.Second, []step{
			{0, 0, 0, 10}, {9999 * time.Millisecond, 0, 0, 0}, {time.Millisecond, 0, 0, 10}}},
		// Half the reserve at 0, half at 5 s; at 10 s tenth 0's five
		// leave: five more; at 15 s tenth 5's five leave: five more.
		{"sliding by tenths", 0, 1, 10 * time.Second, []step{
			{0, 0, 0, 10}, {5 * time.Second, 0, 0, 0}, {5 * time.Second, 0, 0, 10}, {5 * time.Second, 0, 0, 0}}},
		// 10 requests at 0.95 s (tenth 0) allow 5 retries, taken; at
		// 9.999 s they still count (0 allowed); at 10 s the requests and
		// the retries both leave: 0 requests, 0 allowed; 4 requests give 2.
		{"deposits leave the window", 0.5, 0, 10 * time.Second, []step{
			{950 * time.Millisecond, 10, 0, 5}, {9049 * time.Millisecond, 0, 0, 0}, {time.Millisecond, 0, 0, 0}, {0, 4, 0, 2}}},
		// A 1 s window has tenths of 100 ms: reserve 30 × 1 s.
		{"short window", 0, 30, time.Second, []step{{0, 0, 0, 30}, {99 * time.Millisecond, 0, 0, 0}, {901 * time.Millisecond, 0, 0, 30}}},
		// Nothing allowed, ever.
		{"empty budget", 0, 0, 10 * time.Second, []step{{0, 1000, 0, 0}}},
		// A clock that steps back 3 s from 5 s goes on from the newest
		// tenth, 5: the 10 retries taken at 5 s leave 10 tenths later,
		// when the clock reads 12 s (tenth 15), not at 15 s.
		{"clock steps back", 0, 1, 10 * time.Second, []step{
			{5 * time.Second, 0, 0, 10}, {-3 * time.Second, 0, 0, 0}, {9999 * time.Millisecond, 0, 0, 0}, {time.Millisecond, 0, 0, 10}}},
		// A step back within a tenth counts in the newest tenth.
		{"clock steps back within a tenth", 0, 1, 10 * time.Second, []step{
			{5500 * time.Millisecond, 0, 0, 10}, {-time.Second, 0, 0, 0}, {9500 * time.Millisecond, 0, 0, 0}, {time.Second, 0, 0, 10}}},
		// 2^32 tenths later (13.6 years of 100 ms tenths) the window is
		// a fresh one: the reserve again, not the old tenth's count.
		{"2^32 tenths later", 0, 10, time.Second, []step{
			{0, 0, 0, 10}, {1 << 32 * 100 * time.Millisecond, 0, 0, 10}, {time.Second, 0, 0, 10}}},
		// Refunds in the tenth of their withdrawals: 10 taken, 4 given
		// back, 4 more allowed.
		{"refund in its tenth", 0, 1, 10 * time.Second, []step{{0, 0, 0, 10}, {0, 0, 4, 4}}},
		// Refunds with no retry to give back add nothing: the reserve of
		// 3, not 3 + 5 (nor a count wrapped below zero, which would
		// refuse every retry).
		{"refunds with nothing to give back", 0, 3, time.Second, []step{{0, 0, 5, 3}}},
		// A refund across a tenth's boundary (1 s window, tenths of 100
		// ms; reserve 3): 3 taken at 50 ms (tenth 0); at 150 ms (tenth
		// 1) one is given back, so one more is allowed (taken in tenth
		// 1). At 1.05 s (tenth 10) tenth 0's two kept retries leave:
		// two more, the third refused because tenth 1's retry counts;
		// at 1.15 s it leaves too: one more. Had the refund been
		// counted apart in tenth 1, tenth 10 would have allowed three.
		{"refund across a tenth's boundary", 0, 3, time.Second, []step{
			{50 * time.Millisecond, 0, 0, 3}, {100 * time.Millisecond, 0, 1, 1},
			{900 * time.Millisecond, 0, 0, 2}, {100 * time.Millisecond, 0, 0, 1}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newClock()
			b, err := retrybudget.New(tc.ratio, tc.minPerSec, tc.window, clk.opt())
			require.NoError(t, err)
			var deposits, retries, refused uint64
			for i, s := range tc.steps {
				clk.add(s.advance)
				for range s.deposits {
					b.Deposit()
				}
				for range s.refunds {
					b.Refund()
				}
				retries -= min(retries, uint64(s.refunds))
				got := 0
				for got <= 1e6 && b.TryWithdraw() {
					got++
				}
				require.Equal(t, s.want, got, "step %d", i)
				deposits += uint64(s.deposits)
				retries += uint64(got)
				refused++
			}
			assert.Equal(t, retrybudget.Stats{Deposits: deposits, Retries: retries, Refused: refused}, b.Stats())
		})
	}
}

func TestNew_badInput(t *testing.T) {
	tests := []struct {
		name             string
		ratio, minPerSec float64
		window           time.Duration
		opts             []retrybudget.Option
		want             string
	}{
		{"negative ratio", -0.1, 10, 10 * time.Second, nil, "retrybudget: New: ratio -0.1 out of range [0, 1000]"},
		{"NaN ratio", math.NaN(), 10, 10 * time.Second, nil, "ratio NaN"},
		{"huge ratio", 1001, 10, 10 * time.Second, nil, "ratio 1001"},
		{"negative minimum", 0.2, -1, 10 * time.Second, nil, "minPerSecond -1 out of range [0, 1e+06]"},
		{"infinite minimum", 0.2, math.Inf(1), 10 * time.Second, nil, "minPerSecond +Inf"},
		{"zero window", 0.2, 10, 0, nil, "window 0s out of range [1s, 1m0s]"},
		{"short window", 0.2, 10, 999 * time.Millisecond, nil, "window 999ms"},
		{"long window", 0.2, 10, time.Minute + 1, nil, "window 1m0.000000001s"},
		{"nil clock", 0.2, 10, 10 * time.Second, []retrybudget.Option{retrybudget.WithClock(nil)}, "WithClock(nil)"},
		{"nil option", 0.2, 10, 10 * time.Second, []retrybudget.Option{nil}, "opts[0] is nil"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, err := retrybudget.New(tc.ratio, tc.minPerSec, tc.window, tc.opts...)
			require.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Nil(t, b)
		})
	}
	// The bounds themselves are accepted.
	for _, ok := range [][3]float64{{0, 0, float64(retrybudget.MinWindow)}, {retrybudget.MaxRatio, retrybudget.MaxMinPerSecond, float64(retrybudget.MaxWindow)}} {
		_, err := retrybudget.New(ok[0], ok[1], time.Duration(ok[2]))
		require.NoError(t, err, "%v", ok)
	}
}

// TestBudget_zeroAndNil: the zero Budget refuses every retry, counting
// what it is asked; a nil *Budget is no budget at all (every retry
// allowed, nothing counted).
func TestBudget_zeroAndNil(t *testing.T) {
	var zero retrybudget.Budget
	zero.Deposit()
	assert.False(t, zero.TryWithdraw(), "the zero value refuses every retry")
	zero.Refund()
	assert.Equal(t, retrybudget.Stats{Deposits: 1, Refused: 1}, zero.Stats())

	var none *retrybudget.Budget
	none.Deposit()
	for range 1000 {
		require.True(t, none.TryWithdraw(), "a nil budget allows every retry")
	}
	none.Refund()
	assert.Equal(t, retrybudget.Stats{}, none.Stats())
}

// TestBudget_concurrent has many goroutines withdraw at once from a
// reserve of 1/s × 10 s, with the clock still: exactly 10 succeed, since
// every withdrawal is one compare-and-swap on the current tenth. Each
// goroutine then refunds one of its retries, if it had any, and
// withdraws again: the refunded ones, and no more, are allowed again.
func TestBudget_concurrent(t *testing.T) {
	clk := newClock()
	b, err := retrybudget.New(0, 1, 10*time.Second, clk.opt())
	require.NoError(t, err)
	var ok, refunded, again atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	var mid sync.WaitGroup
	mid.Add(64)
	for range 64 {
		wg.Go(func() {
			<-start
			mine := 0
			for range 20 {
				b.Deposit()
				if b.TryWithdraw() {
					ok.Add(1)
					mine++
				}
			}
			mid.Done()
			mid.Wait() // every first withdrawal made before any refund
			if mine > 0 {
				b.Refund()
				refunded.Add(1)
			}
			if b.TryWithdraw() {
				again.Add(1)
			}
		})
	}
	close(start)
	wg.Wait()
	assert.EqualValues(t, 10, ok.Load())
	assert.Equal(t, refunded.Load(), again.Load(), "each refund allows one retry again")
	refusals := uint64(64*20-10) + uint64(64-again.Load())
	assert.Equal(t, retrybudget.Stats{Deposits: 64 * 20, Retries: 10, Refused: refusals}, b.Stats())
}

// TestBudget_concurrentSliding withdraws from many goroutines while the
// clock moves a tenth of the window at a time, and from the mover too,
// 200 times a tenth, so the budget is spent in every tenth it allows
// any: the reserve of 3/s × 1 s at tenths 0, 10, ..., 90 (each spent
// reserve returns ten tenths later), 3 × 10 = 30 over the 100 tenths.
func TestBudget_concurrentSliding(t *testing.T) {
	clk := newClock()
	b, err := retrybudget.New(0, 3, time.Second, clk.opt())
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
					b.Deposit() // ratio 0: deposits add nothing
					b.TryWithdraw()
				}
			}
		})
	}
	for k := range 100 {
		if k > 0 {
			clk.add(100 * time.Millisecond)
		}
		for range 200 {
			b.TryWithdraw()
		}
	}
	close(stop)
	wg.Wait()
	assert.EqualValues(t, 30, b.Stats().Retries)
}

// TestBudget_clockStepsBack steps an injected clock back (a wall clock
// corrected by NTP), then runs 100 requests a second for 10 min (1 s
// tenths): the window ending at the last tenth holds its ten tenths'
// 1000 requests, so it allows exactly 0.2 × 1000 + 10 × 10 = 300
// retries, whatever the step. A window frozen at the newest tenth until
// the clock caught up would hold every request since the step. The last
// case starts the clock before the budget's start.
func TestBudget_clockStepsBack(t *testing.T) {
	for _, back := range []time.Duration{2 * time.Second, 30 * time.Second, time.Hour, 100 * time.Hour} {
		t.Run(back.String(), func(t *testing.T) {
			clk := &clock{}
			clk.ns.Store(time.Unix(0, 0).Add(50 * time.Hour).UnixNano())
			b, err := retrybudget.New(retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow, clk.opt())
			require.NoError(t, err)
			clk.add(time.Minute)
			b.Deposit()
			clk.add(-back)
			for k := range 600 {
				if k > 0 {
					clk.add(time.Second)
				}
				for range 100 {
					b.Deposit()
				}
			}
			got := 0
			for got <= 1e6 && b.TryWithdraw() {
				got++
			}
			assert.Equal(t, 300, got)
		})
	}
}

func TestBudget_allocs(t *testing.T) {
	clk := newClock()
	b, err := retrybudget.New(retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow, clk.opt())
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(1000, func() {
		clk.add(time.Millisecond)
		b.Deposit()
		if b.TryWithdraw() {
			b.Refund()
		}
		_ = b.Stats()
	})
	assert.Zero(t, allocs)
}

// BenchmarkBudget measures a request's deposit and one retry's
// withdrawal, from every P at once on the real clock, with Finagle's
// defaults: once the budget is spent, most withdrawals are refusals.
func BenchmarkBudget(b *testing.B) {
	bud, err := retrybudget.New(retrybudget.DefaultRatio, retrybudget.DefaultMinPerSecond, retrybudget.DefaultWindow)
	require.NoError(b, err)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bud.Deposit()
			bud.TryWithdraw()
		}
	})
}
