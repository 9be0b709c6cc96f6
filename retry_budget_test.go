package balancer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// budgetStep is one step of a budget script: move the clock by advance,
// deposit deposits requests, then withdraw until refused, expecting
// exactly want retries to be allowed.
type budgetStep struct {
	advance  time.Duration
	deposits int
	want     int
}

// TestRetryBudget_arithmetic runs scripts whose allowed retries follow from
// the budget's rule, retries made in the window ≤ ratio × deposits in it +
// minPerSecond × window, where the window is the current tenth of it and
// the nine before (an entry counts from its tenth's start to the end of
// the tenth ten later).
func TestRetryBudget_arithmetic(t *testing.T) {
	tests := []struct {
		name             string
		ratio, minPerSec float64
		window           time.Duration
		steps            []budgetStep
	}{
		// Finagle's defaults with no traffic: the reserve, 10/s × 10 s.
		{"reserve alone", 0.2, 10, 10 * time.Second, []budgetStep{{0, 0, 100}}},
		// 50 requests × 0.2 = 10 retries; 5 more requests, 1 more retry;
		// 4 more (59 × 0.2 = 11.8), none.
		{"ratio alone", 0.2, 0, 10 * time.Second, []budgetStep{{0, 50, 10}, {0, 5, 1}, {0, 4, 0}}},
		// 0.1 × 30 = 3 exactly, not 2.9999.
		{"ratio of a tenth", 0.1, 0, 10 * time.Second, []budgetStep{{0, 30, 3}}},
		// Reserve 2 × 5 s = 10 plus 0.5 × 8 = 4.
		{"both", 0.5, 2, 5 * time.Second, []budgetStep{{0, 8, 14}}},
		// Reserve 1/s × 10 s = 10 taken at 0; the retries of tenth 0
		// count until 10 s (tenth 10): at 9.999 s none, at 10 s ten.
		{"retries leave the window", 0, 1, 10 * time.Second, []budgetStep{
			{0, 0, 10}, {9999 * time.Millisecond, 0, 0}, {time.Millisecond, 0, 10}}},
		// Half the reserve at 0, half at 5 s; at 10 s tenth 0's five
		// leave: five more; at 15 s tenth 5's five leave: five more.
		{"sliding by tenths", 0, 1, 10 * time.Second, []budgetStep{
			{0, 0, 10}, {5 * time.Second, 0, 0}, {5 * time.Second, 0, 10}, {5 * time.Second, 0, 0}}},
		// 10 requests at 0.95 s (tenth 0) allow 5 retries, taken; at
		// 9.999 s they still count (0 allowed); at 10 s the requests and
		// the retries both leave: 0 requests, 0 allowed; 4 requests give 2.
		{"deposits leave the window", 0.5, 0, 10 * time.Second, []budgetStep{
			{950 * time.Millisecond, 10, 5}, {9049 * time.Millisecond, 0, 0}, {time.Millisecond, 0, 0}, {0, 4, 2}}},
		// A 1 s window has tenths of 100 ms: reserve 30 × 1 s.
		{"short window", 0, 30, time.Second, []budgetStep{{0, 0, 30}, {99 * time.Millisecond, 0, 0}, {901 * time.Millisecond, 0, 30}}},
		// Nothing allowed, ever.
		{"empty budget", 0, 0, 10 * time.Second, []budgetStep{{0, 1000, 0}}},
		// A clock that steps back 3 s from 5 s goes on from the newest
		// tenth, 5: the 10 retries taken at 5 s leave 10 tenths later,
		// when the clock reads 12 s (tenth 15), not at 15 s.
		{"clock steps back", 0, 1, 10 * time.Second, []budgetStep{
			{5 * time.Second, 0, 10}, {-3 * time.Second, 0, 0}, {9999 * time.Millisecond, 0, 0}, {time.Millisecond, 0, 10}}},
		// A step back within a tenth counts in the newest tenth.
		{"clock steps back within a tenth", 0, 1, 10 * time.Second, []budgetStep{
			{5500 * time.Millisecond, 0, 10}, {-time.Second, 0, 0}, {9500 * time.Millisecond, 0, 0}, {time.Second, 0, 10}}},
		// 2^32 tenths later (13.6 years of 100 ms tenths) the window is
		// a fresh one: the reserve again, not the old tenth's count.
		{"2^32 tenths later", 0, 10, time.Second, []budgetStep{
			{0, 0, 10}, {1 << 32 * 100 * time.Millisecond, 0, 10}, {time.Second, 0, 10}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			b, err := NewRetryBudget(tc.ratio, tc.minPerSec, tc.window, clk.opt())
			require.NoError(t, err)
			var deposits, retries, refused uint64
			for i, s := range tc.steps {
				clk.add(s.advance)
				for range s.deposits {
					b.Deposit()
				}
				got := 0
				for got <= 1e6 && b.TryWithdraw() {
					got++
				}
				require.Equal(t, s.want, got, "step %d", i)
				deposits += uint64(s.deposits)
				retries += uint64(got)
				refused++
			}
			assert.Equal(t, RetryBudgetStats{Deposits: deposits, Retries: retries, Refused: refused}, b.Stats())
		})
	}
}

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

// TestRetryBudget_concurrent has many goroutines withdraw at once from a
// reserve of 1/s × 10 s, with the clock still: exactly 10 succeed, since
// every withdrawal is one compare-and-swap on the current tenth.
func TestRetryBudget_concurrent(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(0, 1, 10*time.Second, clk.opt())
	require.NoError(t, err)
	var ok atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 20 {
				b.Deposit()
				if b.TryWithdraw() {
					ok.Add(1)
				}
			}
		})
	}
	wg.Wait()
	assert.EqualValues(t, 10, ok.Load())
	assert.Equal(t, RetryBudgetStats{Deposits: 64 * 20, Retries: 10, Refused: 64*20 - 10}, b.Stats())
}

// TestRetryBudget_concurrentSliding withdraws from many goroutines while
// the clock moves a tenth of the window at a time, and from the mover
// too, 200 times a tenth, so the budget is spent in every tenth it allows
// any: the reserve of 3/s × 1 s at tenths 0, 10, ..., 90 (each spent
// reserve returns ten tenths later), 3 × 10 = 30 over the 100 tenths.
func TestRetryBudget_concurrentSliding(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(0, 3, time.Second, clk.opt())
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

// TestDo_retryBudget runs 100 Do calls whose try always fails over 50
// peers that never go out (max_fails 0), so only the budget ends each
// call: ratio 0.2, reserve 1/s × 10 s = 10, the clock still. Call k has
// deposited k requests when it retries, so the retries made by the end of
// call k are floor(10 + 0.2k): 10 in the first call, then one every fifth
// call, 30 in all, and 130 attempts. Without the budget each call would
// try all 50 peers: 5000 attempts.
func TestDo_retryBudget(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(0.2, 1, 10*time.Second, clk.opt())
	require.NoError(t, err)
	p, err := NewRoundRobin(makePeers(50, numbered, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }), clk.opt())
	require.NoError(t, err)
	errDown := errors.New("503")
	attempts := 0
	for k := 1; k <= 100; k++ {
		err := Do(context.Background(), p, nil, func(context.Context, *Peer) error { attempts++; return errDown }, WithRetryBudget(b), clk.opt())
		require.ErrorIs(t, err, ErrRetryBudget)
		require.ErrorIs(t, err, errDown)
		require.Contains(t, err.Error(), "retry refused by the retry budget (last attempt on")
		retries := int(math.Floor(10 + 0.2*float64(k) + 1e-9))
		require.Equal(t, k+retries, attempts, "after call %d", k)
	}
	assert.Equal(t, 130, attempts)
	assert.Equal(t, RetryBudgetStats{Deposits: 100, Retries: 30, Refused: 100}, b.Stats())

	// A call whose first attempt succeeds withdraws nothing.
	require.NoError(t, Do(context.Background(), p, nil, func(context.Context, *Peer) error { return nil }, WithRetryBudget(b)))
	assert.Equal(t, RetryBudgetStats{Deposits: 101, Retries: 30, Refused: 100}, b.Stats())
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

// TestDo_retryBudgetSteady runs Do at a steady rate on the virtual clock
// for 60 s (rate/10 requests every tenth of the 10 s window), each try
// failing, over 200 peers that never go out (more than the reserve, so
// the budget ends every request). Each tenth ends on a refused retry, so
// at the end of every tenth the window ending there is spent: its retries
// are the largest whole number ≤ ratio × its requests + minPerSecond ×
// window (0.2 × 1000 + 100 = 300 at 100 a second), and the six windows
// of tenths 0-9, ..., 50-59 hold every retry, so the attempts a request
// are 1 + ratio + minPerSecond × duration / requests = 1 + ratio +
// minPerSecond / rate: 2.2 at 10 a second, 1.3 at 100, 1.21 at 1000 (the
// doc's bound; 1 + ratio alone is below all three). Every window of ten
// tenths, not only those six, keeps the rule.
func TestDo_retryBudgetSteady(t *testing.T) {
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
			clk := newFakeClock()
			b, err := NewRetryBudget(ratio, minPerSec, window, clk.opt())
			require.NoError(t, err)
			p, err := NewRoundRobin(makePeers(200, numbered, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }), clk.opt())
			require.NoError(t, err)
			errDown := errors.New("503")
			retries := make([]int, tenths)
			for k := range tenths {
				for range perTenth {
					attempts := 0
					err := Do(context.Background(), p, nil, func(context.Context, *Peer) error { attempts++; return errDown }, WithRetryBudget(b), clk.opt())
					require.ErrorIs(t, err, ErrRetryBudget)
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
			t.Logf("%d attempts for %d requests: %.3f a request (bound %.3f)", requests+total, requests, got, bound)
			assert.InDelta(t, bound, got, 1e-9, "steady traffic spends the budget exactly")
		})
	}
}

// TestRetryBudget_clockStepsBack steps an injected clock back (a wall
// clock corrected by NTP), then runs 100 requests a second for 10 min
// (1 s tenths): the window ending at the last tenth holds its
// ten tenths' 1000 requests, so it allows exactly 0.2 × 1000 + 10 × 10 =
// 300 retries, whatever the step. A window frozen at the newest tenth
// until the clock caught up would hold every request since the step.
// The last case starts the clock before the budget's start.
func TestRetryBudget_clockStepsBack(t *testing.T) {
	for _, step := range []time.Duration{2 * time.Second, 30 * time.Second, time.Hour, 100 * time.Hour} {
		t.Run(step.String(), func(t *testing.T) {
			clk := newFakeClockAt(time.Unix(0, 0).Add(50 * time.Hour))
			b, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow, clk.opt())
			require.NoError(t, err)
			clk.add(time.Minute)
			b.Deposit()
			clk.add(-step)
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

// TestRetryBudget_staleRecord: a withdrawer that loaded head in bucket 2
// and was descheduled for a window records bucket 2's count after bucket
// 12's was recorded in the same word: the newer count stays.
func TestRetryBudget_staleRecord(t *testing.T) {
	b, err := NewRetryBudget(0, 1, time.Second, newFakeClock().opt())
	require.NoError(t, err)
	b.record(12, 1)
	require.EqualValues(t, 1, b.pastRetries(13))
	b.record(2, 1)
	assert.EqualValues(t, 1, b.pastRetries(13), "bucket 12's retry is kept")
	b.record(12, 3)
	b.record(12, 2)
	assert.EqualValues(t, 3, b.pastRetries(13), "the larger count of one bucket is kept")
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

// BenchmarkRetryBudget measures a request's deposit and one retry's
// withdrawal, from every P at once on the real clock, with Finagle's
// defaults: once the budget is spent, most withdrawals are refusals.
func BenchmarkRetryBudget(b *testing.B) {
	bud, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow)
	require.NoError(b, err)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			bud.Deposit()
			bud.TryWithdraw()
		}
	})
}

// BenchmarkDo measures one Do whose try succeeds at once, over RoundRobin
// with 16 peers, with no budget and with Finagle's: the budget adds one
// deposit to a request that is not retried.
func BenchmarkDo(b *testing.B) {
	try := func(context.Context, *Peer) error { return nil }
	for _, name := range []string{"none", "budget"} {
		b.Run(name, func(b *testing.B) {
			p, err := NewRoundRobin(benchPeers(16))
			require.NoError(b, err)
			var opts []Option
			if name == "budget" {
				bud, err := NewRetryBudget(DefaultRetryRatio, DefaultRetryMinPerSecond, DefaultRetryWindow)
				require.NoError(b, err)
				opts = append(opts, WithRetryBudget(bud))
			}
			ctx := context.Background()
			var r Request
			b.ReportAllocs()
			for b.Loop() {
				r.Reset()
				if err := Do(ctx, p, &r, try, opts...); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRetryBudget_staleReader: a reader descheduled between its clock
// read and its use of it holds a time buckets behind the newest; a second
// clock read shows the clock did not step back, so the budget's time does
// not move (taking the stale read for a step back would move it forward
// by the stall, and retries would leave the window early). A clock that
// reads behind twice has stepped back: time goes on from the newest
// bucket. Buckets of 100 ms.
func TestRetryBudget_staleReader(t *testing.T) {
	start := time.Unix(100, 0)
	var reads []time.Time // what the clock answers next, then start+500ms
	clock := func() time.Time {
		if len(reads) == 0 {
			return start.Add(500 * time.Millisecond)
		}
		r := reads[0]
		reads = reads[1:]
		return r
	}
	b, err := NewRetryBudget(0, 1, time.Second, WithClock(clock))
	require.NoError(t, err)
	b.start = start // the constructor read the clock at +500 ms
	require.EqualValues(t, 5, b.index())

	reads = []time.Time{start.Add(200 * time.Millisecond)} // stale, then +500 ms
	assert.EqualValues(t, 5, b.index())
	assert.Zero(t, b.skew.Load(), "a stale read is no step")

	reads = []time.Time{start.Add(200 * time.Millisecond), start.Add(200 * time.Millisecond)}
	assert.EqualValues(t, 5, b.index())
	assert.Equal(t, int64(300*time.Millisecond), b.skew.Load(), "a step back of 300 ms")
}

// TestRetryBudget_refund: Refund gives back a retry TryWithdraw allowed.
// The budget holds 2 retries (no ratio, 0.2 a second over 10 s): two
// withdrawals take them and a third is refused; one given back makes room
// for one more, and Retries counts the retries made (3 allowed, 1 given
// back). A refund counts in the tenth it is made in: two made 1 s later
// (the next tenth) still count once the withdrawals' tenth has left the
// window, 10 s after it, so then 2 (the reserve) + 2 (the refunds) are
// allowed, and a tenth later, the refunds gone, the 4 made are past the
// reserve: refused. The window's count never goes below zero. The zero
// value's Refund does nothing.
func TestRetryBudget_refund(t *testing.T) {
	clk := newFakeClock()
	b, err := NewRetryBudget(0, 0.2, 10*time.Second, clk.opt())
	require.NoError(t, err)
	require.True(t, b.TryWithdraw())
	require.True(t, b.TryWithdraw())
	require.False(t, b.TryWithdraw(), "the reserve of 2 is spent")
	b.Refund()
	assert.Equal(t, RetryBudgetStats{Retries: 1, Refused: 1}, b.Stats())
	require.True(t, b.TryWithdraw(), "the refund's place")
	require.False(t, b.TryWithdraw())

	clk.add(time.Second) // the next tenth
	b.Refund()
	b.Refund()
	assert.Equal(t, RetryBudgetStats{Retries: 0, Refused: 2}, b.Stats())
	clk.add(9*time.Second + time.Millisecond) // the withdrawals' tenth has left the window
	for i := range 4 {
		require.True(t, b.TryWithdraw(), "withdrawal %d of 2 + 2", i)
	}
	require.False(t, b.TryWithdraw(), "past 2 + 2")
	clk.add(time.Second) // the refunds' tenth has left
	require.False(t, b.TryWithdraw(), "4 made, 2 allowed")

	var zero RetryBudget
	zero.Refund()
	assert.Equal(t, RetryBudgetStats{}, zero.Stats())
}
