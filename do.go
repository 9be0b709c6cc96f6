package balancer

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs one request through p the way nginx's proxy_next_upstream does,
// for callers that would otherwise write the Pick/Done loop themselves: it
// picks a peer for r, calls try with it, reports the outcome with Done, and
// on a failure picks again, until an attempt succeeds or p has no peer left
// for r. Each outcome is reported exactly once, also when try panics (as
// Abandoned, before the panic goes on).
//
// try's result decides the outcome: nil is a success and Do returns nil;
// an error wrapped with [NotFailure] (a 404, a rejected argument) is a
// reply that does not count against the peer, and Do returns the wrapped
// error without retrying; an error after ctx has ended is Abandoned, not a
// failure, and Do returns an error matching both ctx.Err() and try's
// error; any other error is a failure, and Do retries. When p refuses
// another attempt, Do returns an error that matches, with errors.Is and
// errors.As, both p's error (ErrNoLivePeer, ErrTriesExhausted, ErrNoPeers)
// and the last attempt's error. A ctx ended before an attempt returns
// ctx.Err() without picking.
//
// Latency is measured around try on time.Now, or on the clock WithClock
// gives, the one option Do takes besides the deprecated WithRetryBudget
// (another is ErrInvalidConfig). Do is Attempts.Do with Picker p and
// Request r; Attempts.Do with a Budget bounds the retries. A nil r is a
// fresh request; pass a Request to set a key (SetKey) or reuse its
// storage, Reset between requests. Done's errors are not returned: with
// the outcomes Do builds, Done can only refuse a peer moved to another
// picker meanwhile, and then nothing is left to report. Do is safe for
// concurrent use with distinct Requests.
func Do(ctx context.Context, p Picker, r *Request, try func(ctx context.Context, peer *Peer) error, opts ...Option) error {
	return do(ctx, p, r, try, nil, opts)
}

// Do runs the request with try as balancer.Do does (its outcomes, its
// errors, its retries), on this loop: Picker, Request (nil: a fresh
// one), Budget (one deposit a request; a retry it refuses ends the call
// with an error matching both ErrRetryBudget and the last attempt's
// error; a call with no retry left to make, ErrTriesExhausted, is not
// refused), MaxTries (an error matching ErrTriesExhausted, naming it),
// GaveUp (checked before each pick, as ctx is without it) and Now (the
// latencies' clock). A nil Picker or try, or a negative MaxTries, is
// ErrInvalidConfig, naming it.
func (a *Attempts) Do(ctx context.Context, try func(ctx context.Context, peer *Peer) error) error {
	return a.do(ctx, try, "Attempts.Do")
}

// Do is balancer.Do with each retry taken from b.
//
// Deprecated: use Attempts.Do with a retrybudget.Budget as its Budget:
// (&Attempts{Picker: p, Request: r, Budget: b}).Do(ctx, try).
func (b *RetryBudget) Do(ctx context.Context, p Picker, r *Request, try func(ctx context.Context, peer *Peer) error, opts ...Option) error {
	if b == nil {
		return fmt.Errorf("balancer: RetryBudget.Do: nil budget: %w", ErrInvalidConfig)
	}
	return do(ctx, p, r, try, b, opts)
}

// do is Do, and with budget set RetryBudget.Do, which takes no
// WithRetryBudget.
func do(ctx context.Context, p Picker, r *Request, try func(ctx context.Context, peer *Peer) error, budget *RetryBudget, opts []Option) error {
	cfg := config{now: time.Now, budget: budget}
	var err error
	if len(opts) > 0 { // applyOptions's config escapes to the heap
		name, accepts := "Do", func(name string) bool { return name == "WithClock" || name == "WithRetryBudget" }
		if budget != nil {
			name, accepts = "RetryBudget.Do", func(name string) bool { return name == "WithClock" }
		}
		if cfg, err = applyOptions(name, accepts, opts); err != nil {
			return err
		}
		if budget != nil {
			cfg.budget = budget
		}
	}
	loop := Attempts{Picker: p, Request: r, Now: cfg.now}
	if cfg.budget != nil {
		loop.Budget = cfg.budget
	}
	return loop.do(ctx, try, "Do")
}

// do is Attempts.Do, its errors naming who.
func (a *Attempts) do(ctx context.Context, try func(ctx context.Context, peer *Peer) error, who string) error {
	if err := a.check(who, try == nil); err != nil {
		return err
	}
	var last error // the last failed attempt's error, and its peer
	var lastPeer *Peer
	var result error // the attempt that ended the loop
	why := a.runSequential(ctx, func(ctx context.Context, peer *Peer) Verdict {
		err := try(ctx, peer)
		if err == nil {
			result = nil
			return Verdict{}
		}
		var nf notFailure // on the heap: declared only on this path
		switch {
		case errors.As(err, &nf):
			result = nf.err
		case ctx.Err() != nil:
			if errors.Is(err, ctx.Err()) {
				result = fmt.Errorf("balancer: %s: attempt on %q abandoned: %w", who, peer.addr, err)
			} else {
				result = fmt.Errorf("balancer: %s: attempt on %q abandoned: %w: %w", who, peer.addr, ctx.Err(), err)
			}
			return Verdict{Outcome: Outcome{Abandoned: true}}
		default:
			last, lastPeer = err, peer
			return Verdict{Outcome: Outcome{Failed: true}, Retry: true}
		}
		return Verdict{}
	})
	gaveUp := why != nil && why == ctx.Err()
	switch {
	case why == nil:
		return result
	case last == nil && gaveUp:
		return why // before any attempt
	case last == nil:
		return fmt.Errorf("balancer: %s: %w", who, why)
	case gaveUp:
		return fmt.Errorf("balancer: %s: %w (after a failed attempt on %q: %w)", who, why, lastPeer.addr, last)
	}
	return fmt.Errorf("balancer: %s: %w (last attempt on %q: %w)", who, why, lastPeer.addr, last)
}

// NotFailure marks err, returned by the try function given to Do, as a
// reply that does not count against the peer, as nginx does not count a
// 404 unless told to: Do reports the attempt as a success (Failed false),
// does not retry, and returns err itself. NotFailure(nil) is nil.
func NotFailure(err error) error {
	if err == nil {
		return nil
	}
	return notFailure{err}
}

type notFailure struct{ err error }

func (e notFailure) Error() string { return e.err.Error() }
func (e notFailure) Unwrap() error { return e.err }
