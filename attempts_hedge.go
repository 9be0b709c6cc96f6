package balancer

import (
	"context"
	"runtime"
	"time"
)

// hedgeResult is what one attempt's goroutine sends back to RunHedged.
type hedgeResult struct {
	id       int
	v        Verdict
	latency  time.Duration // try's time, on Attempts.Now
	panicked bool          // try panicked with pv, or called runtime.Goexit (goexit)
	goexit   bool
	pv       any
}

// hedgeAttempt is RunHedged's record of one attempt.
type hedgeAttempt struct {
	peer   *Peer
	ctx    context.Context
	cancel context.CancelCauseFunc
	hedge  bool // sent as a hedge, not as the first attempt or a retry
	done   bool
}

// RunHedged is Run with hedging: an attempt that has not answered within
// h's delay is joined by a hedge on another peer (the Request's tried set
// keeps it off the peers in flight), up to HedgePolicy.MaxAttempts in
// flight, each hedge taken from the policy's Budget; the first verdict
// that ends the loop wins and the other attempts' contexts are cancelled
// with ErrSuperseded, each reported Abandoned and Superseded (unless its
// Verdict says Reported, or ctx ended first) once its try returns. A
// failure asking for a retry while another attempt is in flight waits for
// it; with none in flight it is an ordinary retry. Each try runs on a goroutine of its own, on a context
// of its own, so try and Now must be safe for concurrent use. RunHedged
// returns once every try has returned, and never cancels the winner's
// context, which ctx's end releases (a caller that keeps reading the
// winner's reply cancels ctx once done). A try that panics stops the
// loop as the others return, and the panic goes on from RunHedged. A nil
// h is Run.
//
// How: every attempt runs try on a
// goroutine of its own, on a context of its own, and sends its verdict
// back; this goroutine alone picks, reports and decides, so Request needs
// no lock. At most h.max attempts are in flight: a hedge is sent when the
// newest attempt has gone h.wait() without an answer, if the hedge budget
// allows it and the picker has a peer the request has not tried. The
// first verdict that ends the loop wins; the attempts still in flight are
// cancelled with ErrSuperseded and, once their try returns, reported
// Abandoned. A failure that asks for a retry while other attempts are in
// flight waits for them (the next hedge may still go); one with none in
// flight is retried at once, from a.Budget, as without hedging. Run
// returns once every try has returned.
func (a *Attempts) RunHedged(ctx context.Context, h *Hedging, try func(context.Context, *Peer) Verdict) error {
	if h == nil {
		return a.Run(ctx, try)
	}
	r := a.begin()
	if !sameBudget(h.budget, a.Budget) {
		h.budget.Deposit()
	}
	results := make(chan hedgeResult, h.max) // never more in flight: no send blocks
	atts := make([]hedgeAttempt, 0, h.max)
	inflight := 0
	launch := func(peer *Peer, hedge bool) {
		actx, cancel := context.WithCancelCause(ctx)
		id := len(atts)
		atts = append(atts, hedgeAttempt{peer: peer, ctx: actx, cancel: cancel, hedge: hedge})
		inflight++
		go func() {
			start := a.now()
			res := hedgeResult{id: id, panicked: true}
			defer func() {
				if res.panicked {
					res.pv = recover()
					res.goexit = res.pv == nil // recover returns nil only for runtime.Goexit
					res.latency = max(a.now().Sub(start), 0)
				}
				results <- res
			}()
			res.v = try(actx, peer)
			res.latency = max(a.now().Sub(start), 0)
			res.panicked = false
		}()
	}

	var (
		timerC   <-chan time.Time
		stop     func() bool
		hedging  = true
		winner   = -1
		ended    = false // an attempt ended the loop, or panicked
		why      error   // why no further attempt was made, if none won
		panicked *hedgeResult
	)
	stopTimer := func() {
		if stop != nil {
			stop()
		}
		timerC, stop = nil, nil
	}
	defer stopTimer()

	peer, err := a.pickNext(ctx, r, 0, a.Budget)
	if err != nil {
		return err
	}
	launch(peer, false)
	for inflight > 0 {
		if !ended && hedging && inflight < h.max && timerC == nil {
			d, ok := h.wait()
			switch {
			case !ok:
				hedging = false
			case d == 0:
				c := make(chan time.Time, 1)
				c <- time.Time{}
				timerC = c
			default:
				timerC, stop = h.timer(d)
			}
		}
		select {
		case <-timerC:
			timerC, stop = nil, nil
			peer, err := a.pickNext(ctx, r, len(atts), h.budget) // a hedge, from the hedge budget
			switch {
			case err == ErrRetryBudget:
				h.refused.Add(1)
				h.event(EventHedgeRefused, nil, a.now())
				hedging = false
			case err != nil:
				hedging = false // no peer left, or the caller gave up
			default:
				h.sent.Add(1)
				h.event(EventHedgeSent, peer, a.now())
				launch(peer, true)
			}
		case res := <-results:
			inflight--
			at := &atts[res.id]
			at.done = true
			switch {
			case ended: // a loser, cancelled
				if res.id == 0 && winner >= 0 && !res.v.Outcome.Failed {
					h.record(res.latency) // at least this slow
				}
				if !res.v.Reported || res.panicked {
					// Superseded unless ctx ended first: then the
					// caller's patience ran out, as without hedging.
					sup := context.Cause(at.ctx) == ErrSuperseded
					_ = a.Picker.Done(at.peer, Outcome{Abandoned: true, Superseded: sup, Latency: res.latency})
				}
			case res.panicked:
				_ = a.Picker.Done(at.peer, Outcome{Abandoned: true, Latency: res.latency})
				ended, panicked = true, &res
				a.cancelOthers(atts, -1)
			default:
				if !res.v.Reported {
					o := res.v.Outcome
					if o.Latency == 0 {
						o.Latency = res.latency
					}
					_ = a.Picker.Done(at.peer, o)
				}
				if !res.v.Retry {
					ended, winner = true, res.id
					stopTimer()
					a.cancelOthers(atts, res.id)
					if at.hedge {
						h.won.Add(1)
						h.event(EventHedgeWon, at.peer, a.now())
					}
					if res.id == 0 && !res.v.Outcome.Failed && !res.v.Outcome.Abandoned {
						h.record(res.latency)
					}
					continue
				}
				if inflight > 0 {
					continue // the attempts in flight may yet answer
				}
				// Nothing in flight: an ordinary retry.
				stopTimer()
				peer, err := a.pickNext(ctx, r, len(atts), a.Budget)
				if err != nil {
					why = err
					continue
				}
				launch(peer, false)
			}
		}
	}
	for i := range atts {
		if i != winner {
			atts[i].cancel(nil) // released; the winner's lives on with ctx
		}
	}
	if panicked != nil {
		if panicked.goexit {
			runtime.Goexit()
		}
		panic(panicked.pv)
	}
	if winner >= 0 {
		return nil
	}
	return why
}

// cancelOthers cancels, with ErrSuperseded, every attempt in flight but
// keep.
func (a *Attempts) cancelOthers(atts []hedgeAttempt, keep int) {
	for i := range atts {
		if i != keep && !atts[i].done {
			atts[i].cancel(ErrSuperseded)
		}
	}
}
