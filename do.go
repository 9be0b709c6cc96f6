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
	if r == nil {
		r = new(Request)
	}
	if cfg.budget != nil {
		cfg.budget.Deposit()
	}
	var last error // the last failed attempt's error
	var lastPeer *Peer
	for {
		if err := ctx.Err(); err != nil {
			if last != nil {
				return fmt.Errorf("balancer: Do: %w (after a failed attempt on %q: %w)", err, lastPeer.addr, last)
			}
			return err
		}
		var peer *Peer
		if last != nil && cfg.budget != nil {
			peer, err = cfg.budget.PickRetry(p, r)
		} else {
			peer, err = p.Pick(r)
		}
		if err != nil {
			if last != nil {
				return fmt.Errorf("balancer: Do: %w (last attempt on %q: %w)", err, lastPeer.addr, last)
			}
			return fmt.Errorf("balancer: Do: %w", err)
		}
		err = attempt(ctx, p, peer, try, &cfg)
		var nf notFailure
		switch {
		case err == nil:
			return nil
		case errors.As(err, &nf):
			return nf.err
		case ctx.Err() != nil:
			if errors.Is(err, ctx.Err()) {
				return fmt.Errorf("balancer: Do: attempt on %q abandoned: %w", peer.addr, err)
			}
			return fmt.Errorf("balancer: Do: attempt on %q abandoned: %w: %w", peer.addr, ctx.Err(), err)
		}
		last, lastPeer = err, peer
	}
}

// attempt calls try on peer and reports the outcome to p, as Abandoned if
// try panics.
func attempt(ctx context.Context, p Picker, peer *Peer, try func(context.Context, *Peer) error, cfg *config) (err error) {
	start := cfg.now()
	reported := false
	defer func() {
		if !reported {
			_ = p.Done(peer, Outcome{Abandoned: true, Latency: max(cfg.now().Sub(start), 0)})
		}
	}()
	err = try(ctx, peer)
	o := Outcome{Latency: max(cfg.now().Sub(start), 0)} // a clock that steps back counts as 0
	var nf notFailure
	switch {
	case err == nil, errors.As(err, &nf):
	case ctx.Err() != nil:
		o.Abandoned = true
	default:
		o.Failed = true
	}
	reported = true
	_ = p.Done(peer, o)
	return err
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
