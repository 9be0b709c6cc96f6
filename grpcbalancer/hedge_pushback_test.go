package grpcbalancer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// TestHedging_pushback: real grpc-go servers on loopback answer each
// attempt of a hedged RPC by its index (grpc-previous-rpc-attempts), some
// with UNAVAILABLE, a non-fatal code, and the grpc-retry-pushback-ms
// trailer; gRFC A6's rule for hedging:
//
//   - "n ms" sends the next attempt n ms later instead of at once: it
//     reaches its server no sooner than n ms after the server answered
//     the pushback (a bound the servers' own clock guarantees, however
//     loaded the machine), and the attempt after it hedgingDelay later
//     again (n + hedgingDelay), the hedging timer started anew rather
//     than left to fire hedgingDelay after the RPC began;
//   - "0" is a delay of none: the next attempt goes at once;
//   - a negative value, one that is not a 32-bit integer, or two values
//     send no further attempt: with a hedging delay beyond the RPC's
//     deadline, the RPC fails with the pushback's UNAVAILABLE after one
//     attempt, and an attempt already in flight goes on and answers;
//   - an RPC with nothing in flight that waits for a pushback ends at
//     its deadline, not at the end of the pushback's minute.
func TestHedging_pushback(t *testing.T) {
	type answer struct {
		code     codes.Code    // OK: answer the health check
		pushback []string      // the trailer's values, if any
		hold     time.Duration // wait this long first (less if cancelled)
		stall    bool          // wait until cancelled
	}
	unavailable := func(pushback ...string) answer { return answer{code: codes.Unavailable, pushback: pushback} }
	const fiveMin = `"nonFatalStatusCodes":["UNAVAILABLE"],"hedgingDelay":"300s"`
	for _, tc := range []struct {
		name     string
		policy   string
		answers  []answer // by attempt index
		deadline time.Duration
		want     codes.Code
		attempts int                   // the attempts each RPC sends
		after    map[int]time.Duration // attempt i arrives at least this long after attempt 0 was answered
	}{
		{"delay then hedgingDelay", `{"maxAttempts":3,"hedgingDelay":"0.3s","nonFatalStatusCodes":["UNAVAILABLE"]}`,
			[]answer{unavailable("100"), {stall: true}, {}}, 0, codes.OK, 3,
			map[int]time.Duration{1: 100 * time.Millisecond, 2: 400 * time.Millisecond}},
		{"zero", `{"maxAttempts":2,` + fiveMin + `}`,
			[]answer{unavailable("0"), {}}, 0, codes.OK, 2, nil},
		{"negative", `{"maxAttempts":3,` + fiveMin + `}`,
			[]answer{unavailable("-1")}, 0, codes.Unavailable, 1, nil},
		{"not a number", `{"maxAttempts":3,` + fiveMin + `}`,
			[]answer{unavailable("soon")}, 0, codes.Unavailable, 1, nil},
		{"beyond int32", `{"maxAttempts":3,` + fiveMin + `}`,
			[]answer{unavailable("2147483648")}, 0, codes.Unavailable, 1, nil},
		{"two values", `{"maxAttempts":3,` + fiveMin + `}`,
			[]answer{unavailable("10", "20")}, 0, codes.Unavailable, 1, nil},
		{"stop leaves the attempt in flight", `{"maxAttempts":3,"hedgingDelay":"0.05s","nonFatalStatusCodes":["UNAVAILABLE"]}`,
			[]answer{{hold: 300 * time.Millisecond}, unavailable("-1")}, 0, codes.OK, 2, nil},
		{"deadline while waiting", `{"maxAttempts":2,` + fiveMin + `}`,
			[]answer{unavailable("60000")}, 300 * time.Millisecond, codes.DeadlineExceeded, 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bs, client, h := hedgeSetup(t, 3, tc.policy, bigBudget(t))
			base := time.Now()
			since := func() int64 { return int64(time.Since(base)) }
			var arrived [MaxHedgedAttempts]atomic.Int64 // ns since base; -1: not arrived
			var answered0 atomic.Int64
			script := func(ctx context.Context, i int) error {
				arrived[i].Store(since())
				if i >= len(tc.answers) {
					t.Errorf("attempt %d sent", i)
					return status.Error(codes.Internal, "unexpected attempt")
				}
				a := tc.answers[i]
				if a.stall {
					<-ctx.Done()
					return status.FromContextError(ctx.Err()).Err()
				}
				if a.hold > 0 {
					select {
					case <-time.After(a.hold):
					case <-ctx.Done():
						return status.FromContextError(ctx.Err()).Err()
					}
				}
				if a.pushback != nil {
					_ = grpc.SetTrailer(ctx, metadata.MD{pushbackKey: a.pushback})
				}
				if i == 0 {
					answered0.Store(since())
				}
				if a.code != codes.OK {
					return status.Error(a.code, "pushed back")
				}
				return nil
			}
			for _, b := range bs {
				b.script.Store(&script)
			}
			for rpc := range 2 {
				for i := range arrived {
					arrived[i].Store(-1)
				}
				hedges := h.Stats().Hedges
				ctx, cancel := rpcCtx(rpc)
				if tc.deadline > 0 {
					cancel()
					ctx, cancel = context.WithTimeout(context.Background(), tc.deadline)
				}
				start := time.Now()
				_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
				took := time.Since(start)
				cancel()
				if status.Code(err) != tc.want {
					t.Fatalf("RPC %d: %v, want %v", rpc, err, tc.want)
				}
				if tc.deadline > 0 && took > 10*time.Second {
					t.Errorf("RPC %d took %v: it waited for the pushback, not its %v deadline", rpc, took, tc.deadline)
				}
				if sent := h.Stats().Hedges - hedges; sent != uint64(tc.attempts-1) {
					t.Errorf("RPC %d: %d hedges sent, want %d", rpc, sent, tc.attempts-1)
				}
				for i := range arrived {
					if got := arrived[i].Load() >= 0; got != (i < tc.attempts) {
						t.Errorf("RPC %d: attempt %d reached a server: %v, want %v", rpc, i, got, i < tc.attempts)
					}
				}
				for i, d := range tc.after {
					if gap := time.Duration(arrived[i].Load() - answered0.Load()); gap < d {
						t.Errorf("RPC %d: attempt %d arrived %v after attempt 0's pushback was answered, want at least %v", rpc, i, gap, d)
					}
				}
			}
		})
	}
}

// TestPushback reads the trailer as gRFC A6 and grpc-go do.
func TestPushback(t *testing.T) {
	for _, tc := range []struct {
		vals     []string
		d        time.Duration
		stop, ok bool
	}{
		{nil, 0, false, false},
		{[]string{"0"}, 0, false, true},
		{[]string{"250"}, 250 * time.Millisecond, false, true},
		{[]string{"2147483647"}, 2147483647 * time.Millisecond, false, true},
		{[]string{"2147483648"}, 0, true, true},
		{[]string{"-1"}, 0, true, true},
		{[]string{""}, 0, true, true},
		{[]string{"1.5"}, 0, true, true},
		{[]string{"1", "2"}, 0, true, true},
	} {
		md := metadata.MD{}
		if tc.vals != nil {
			md[pushbackKey] = tc.vals
		}
		d, stop, ok := pushback(md)
		if d != tc.d || stop != tc.stop || ok != tc.ok {
			t.Errorf("pushback(%q) = %v, stop %v, ok %v; want %v, %v, %v", tc.vals, d, stop, ok, tc.d, tc.stop, tc.ok)
		}
	}
}
