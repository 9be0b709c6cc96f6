package balancer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// countingBudget is a Budget that counts the loop's calls and allows a
// withdrawal when allow is set. asked is closed at the first
// TryWithdraw.
type countingBudget struct {
	allow                          bool
	deposits, withdrawals, refunds atomic.Int64
	asked                          chan struct{}
	once                           sync.Once
}

func newCountingBudget(allow bool) *countingBudget {
	return &countingBudget{allow: allow, asked: make(chan struct{})}
}

func (b *countingBudget) Deposit() { b.deposits.Add(1) }
func (b *countingBudget) TryWithdraw() bool {
	b.withdrawals.Add(1)
	b.once.Do(func() { close(b.asked) })
	return b.allow
}
func (b *countingBudget) Refund() { b.refunds.Add(1) }

// calls returns the counts: deposits, withdrawals, refunds.
func (b *countingBudget) calls() [3]int64 {
	return [3]int64{b.deposits.Load(), b.withdrawals.Load(), b.refunds.Load()}
}

// noRetryPeer is a picker that finds no live peer for a request's retry
// (or hedge), and leaves its first pick to the picker it wraps.
type noRetryPeer struct{ Picker }

func (p noRetryPeer) Pick(r *Request) (*Peer, error) {
	if r.Attempts() > 0 {
		return nil, ErrNoLivePeer
	}
	return p.Picker.Pick(r)
}

// TestAttemptsDo_budgetCalls: the loop deposits once a request, withdraws
// once a retry it would make (not when the request has no try left,
// ErrTriesExhausted) and refunds once a withdrawn retry whose pick failed.
// Three healthy peers that never go out; the first fails attempts fail,
// the next succeeds.
func TestAttemptsDo_budgetCalls(t *testing.T) {
	errDown := errors.New("503")
	tests := []struct {
		name     string
		allow    bool
		fails    int // attempts that fail before one succeeds
		noRetry  bool
		wantErr  error
		attempts int
		want     [3]int64 // deposits, withdrawals, refunds
	}{
		{"first attempt succeeds", true, 0, false, nil, 1, [3]int64{1, 0, 0}},
		{"two retries, then success", true, 2, false, nil, 3, [3]int64{1, 2, 0}},
		{"every peer fails: no withdrawal past the tries", true, 3, false, ErrTriesExhausted, 3, [3]int64{1, 2, 0}},
		{"the retry's pick finds no peer: refunded", true, 3, true, ErrNoLivePeer, 1, [3]int64{1, 1, 1}},
		{"the budget refuses", false, 3, false, ErrRetryBudget, 1, [3]int64{1, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Picker
			p, err := NewRoundRobin(makePeers(3, letter, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }))
			require.NoError(t, err)
			if tc.noRetry {
				p = noRetryPeer{p}
			}
			b := newCountingBudget(tc.allow)
			attempts := 0
			loop := Attempts{Picker: p, Budget: b}
			err = loop.Do(context.Background(), func(context.Context, *Peer) error {
				attempts++
				if attempts <= tc.fails {
					return errDown
				}
				return nil
			})
			if tc.wantErr == nil {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, tc.wantErr)
				require.ErrorIs(t, err, errDown)
			}
			assert.Equal(t, tc.attempts, attempts)
			assert.Equal(t, tc.want, b.calls(), "deposits, withdrawals, refunds")
		})
	}
}

// TestRunHedged_budgetCalls: a hedged request deposits once in each
// budget (once if they are one), withdraws each hedge from the hedge
// budget and each ordinary retry from Attempts.Budget, and refunds a
// hedge whose pick failed. MaxAttempts 2 with Delay 0 asks for the hedge
// at once; the first attempt waits until the hedge budget is asked (or
// its context ends), so the hedge is always asked for; it then fails
// asking for a retry if failFirst is set, and every later attempt
// succeeds.
func TestRunHedged_budgetCalls(t *testing.T) {
	tests := []struct {
		name       string
		hedgeAllow bool
		noRetry    bool
		shared     bool
		failFirst  bool
		wantHedge  [3]int64 // deposits, withdrawals, refunds
		wantRetry  [3]int64
	}{
		{"hedge sent", true, false, false, false, [3]int64{1, 1, 0}, [3]int64{1, 0, 0}},
		{"hedge refused, then a retry", false, false, false, true, [3]int64{1, 1, 0}, [3]int64{1, 1, 0}},
		{"hedge finds no peer: refunded", true, true, false, false, [3]int64{1, 1, 1}, [3]int64{1, 0, 0}},
		{"one budget for both: one deposit", true, false, true, false, [3]int64{1, 1, 0}, [3]int64{1, 1, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var p Picker
			p, err := NewRoundRobin(makePeers(3, letter, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }))
			require.NoError(t, err)
			if tc.noRetry {
				p = noRetryPeer{p}
			}
			hb, rb := newCountingBudget(tc.hedgeAllow), newCountingBudget(true)
			if tc.shared {
				rb = hb
			}
			h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Budget: hb})
			require.NoError(t, err)
			var calls atomic.Int64
			loop := Attempts{Picker: p, Budget: rb}
			err = loop.RunHedged(context.Background(), h, func(ctx context.Context, _ *Peer) Verdict {
				if calls.Add(1) > 1 {
					return Verdict{}
				}
				select {
				case <-hb.asked:
				case <-ctx.Done():
					return Verdict{Outcome: Outcome{Abandoned: true}}
				}
				if tc.failFirst {
					return Verdict{Outcome: Outcome{Failed: true}, Retry: true}
				}
				return Verdict{}
			})
			require.NoError(t, err)
			assert.Equal(t, tc.wantHedge, hb.calls(), "hedge budget: deposits, withdrawals, refunds")
			assert.Equal(t, tc.wantRetry, rb.calls(), "retry budget: deposits, withdrawals, refunds")
		})
	}
}

// TestAttempts_budgetRefusalKeepsPicker: the loop asks the budget before
// Pick, so a refused retry leaves the picker as it was: nginx's smooth
// weighted round robin over weights 5, 1, 1 gives its sequence a a b a c
// a a to the first attempts of seven requests whose retries are refused,
// as to seven requests never retried (a Pick then Abandoned would have
// moved the weights). Next, Run's decision for one attempt, shows the
// same, and a request that has tried every peer gets ErrTriesExhausted
// without asking the budget.
func TestAttempts_budgetRefusalKeepsPicker(t *testing.T) {
	p, err := NewSmoothWRR(weighted(5, 1, 1))
	require.NoError(t, err)
	b := newCountingBudget(false)
	var got []string
	for range 7 {
		loop := Attempts{Picker: p, Budget: b}
		err := loop.Run(context.Background(), func(_ context.Context, peer *Peer) Verdict {
			got = append(got, peer.Addr())
			return Verdict{Retry: true}
		})
		require.ErrorIs(t, err, ErrRetryBudget)
	}
	assert.Equal(t, []string{"a", "a", "b", "a", "c", "a", "a"}, got)
	assert.Equal(t, [3]int64{7, 7, 0}, b.calls())

	one, err := NewRoundRobin(weighted(1))
	require.NoError(t, err)
	var r Request
	loop := Attempts{Picker: one, Request: &r, Budget: b}
	peer, err := loop.Next(context.Background(), 0)
	require.NoError(t, err)
	require.NoError(t, one.Done(peer, Outcome{}))
	_, err = loop.Next(context.Background(), 1)
	require.ErrorIs(t, err, ErrTriesExhausted, "one peer: no retry was possible")
	assert.Equal(t, [3]int64{7, 7, 0}, b.calls(), "the budget was not asked")
}

// TestAttemptsDo_allocs: Attempts.Do with a budget allocates nothing on
// a request whose first attempt succeeds, as balancer.Do does with none
// (TestDo_allocs), and on a request retried once no more than without a
// budget (the failure's classification, errors.As, costs one).
func TestAttemptsDo_allocs(t *testing.T) {
	lb, err := NewRoundRobin(makePeers(2, letter, func(int) []PeerOption { return []PeerOption{MaxFails(0)} }))
	require.NoError(t, err)
	b, err := NewRetryBudget(1, 1000, DefaultRetryWindow)
	require.NoError(t, err)
	ctx := context.Background()
	errDown := errors.New("503")
	allocs := func(budget Budget, fails int) float64 {
		var r Request
		n := 0
		try := func(context.Context, *Peer) error {
			n++
			if n <= fails {
				return errDown
			}
			return nil
		}
		return testing.AllocsPerRun(1000, func() {
			r.Reset()
			n = 0
			loop := Attempts{Picker: lb, Request: &r, Budget: budget}
			if err := loop.Do(ctx, try); err != nil {
				t.Fatal(err)
			}
		})
	}
	assert.Zero(t, allocs(b, 0), "a request not retried, with a budget")
	assert.Zero(t, allocs(nil, 0), "a request not retried, without one")
	assert.Equal(t, allocs(nil, 1), allocs(b, 1), "a request retried once: the budget adds nothing")
}
