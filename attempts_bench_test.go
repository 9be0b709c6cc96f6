package balancer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// BenchmarkAttempts is one request through the attempt loop over
// RoundRobin with two peers (behind firstPicker, which notes each
// request's first pick): the cost per request of the hedging path
// against Run's.
//
//   - run: Attempts.Run, a try that answers at once.
//   - hedged: RunHedged with a 1 s delay on a real timer, the same try:
//     no hedge fires, the timer is armed and stopped.
//   - hedge-fired: RunHedged with delay 0 (the hedge goes at once, as
//     A6's hedgingDelay 0): the first attempt waits until superseded,
//     the hedge answers at once, the first is cancelled and reported.
//
// Each hedged request deposits in a budget of one hedge a request.
func BenchmarkAttempts(b *testing.B) {
	for _, tc := range []struct {
		name  string
		delay time.Duration // -1: Run
		slow  bool          // the first attempt waits until superseded
	}{
		{"run", -1, false},
		{"hedged", time.Second, false},
		{"hedge-fired", 0, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			rr, err := NewRoundRobin([]*Peer{NewPeer("a"), NewPeer("b")})
			require.NoError(b, err)
			lb := &firstPicker{Picker: rr}
			try := func(ctx context.Context, p *Peer) Verdict {
				if tc.slow && p == lb.first { // picked before its attempt began
					<-ctx.Done()
					return Verdict{Outcome: Outcome{Abandoned: true}}
				}
				return Verdict{}
			}
			bud, err := NewRetryBudget(1, 0, 10*time.Second)
			require.NoError(b, err)
			h, err := NewHedging(HedgePolicy{MaxAttempts: 2, Delay: max(tc.delay, 0), Budget: bud})
			require.NoError(b, err)
			ctx := context.Background()
			var r Request
			b.ReportAllocs()
			for b.Loop() {
				r.Reset()
				if tc.delay < 0 {
					loop := Attempts{Picker: lb, Request: &r}
					err = loop.Run(ctx, try)
				} else {
					loop := Attempts{Picker: lb, Request: &r} // escapes to RunHedged's goroutines
					err = loop.RunHedged(ctx, h, try)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if tc.delay == 0 {
				st := h.Stats()
				require.Equal(b, st.Sent, st.Won, "every hedge won: %+v", st)
				require.NotZero(b, st.Sent)
			}
		})
	}
}
