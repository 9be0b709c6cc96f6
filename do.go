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
// gives. WithRetryBudget bounds the retries: each call deposits one
// request, and a retry the budget refuses ends the call with an error
// matching both ErrRetryBudget and the last attempt's error; a call that
// has no retry left to make (ErrTriesExhausted) is not refused (see
// RetryBudget.PickRetry). Do accepts
// those two options only (another is ErrInvalidConfig). A nil r
// is a fresh request; pass a Request to set a key (SetKey) or reuse its
// storage, Reset between requests. Done's errors are not returned: with
// the outcomes Do builds, Done can only refuse a peer moved to another
// picker meanwhile, and then nothing is left to report. Do is safe for
// concurrent use with distinct Requests.
func Do(ctx context.Context, p Picker, r *Request, try func(ctx context.Context, peer *Peer) error, opts ...Option) error {
	cfg := config{now: time.Now}
	var err error
	if len(opts) > 0 { // applyOptions's config escapes to the heap
		if cfg, err = applyOptions("Do", func(name string) bool { return name == "WithClock" || name == "WithRetryBudget" }, opts); err != nil {
			return err
		}
	}
	if p == nil || try == nil {
		return fmt.Errorf("balancer: Do: nil picker or try: %w", ErrInvalidConfig)
	}
	var last error // the last failed attempt's error, and its peer
	var lastPeer *Peer
	var result error // the attempt that ended the loop
	loop := Attempts{Picker: p, Request: r, Budget: cfg.budget, Now: cfg.now}
	why := loop.runSequential(ctx, func(ctx context.Context, peer *Peer) Verdict {
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
				result = fmt.Errorf("balancer: Do: attempt on %q abandoned: %w", peer.addr, err)
			} else {
				result = fmt.Errorf("balancer: Do: attempt on %q abandoned: %w: %w", peer.addr, ctx.Err(), err)
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
		return fmt.Errorf("balancer: Do: %w", why)
	case gaveUp:
		return fmt.Errorf("balancer: Do: %w (after a failed attempt on %q: %w)", why, lastPeer.addr, last)
	}
	return fmt.Errorf("balancer: Do: %w (last attempt on %q: %w)", why, lastPeer.addr, last)
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
