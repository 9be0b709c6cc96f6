package balancer

import (
	"context"
	"fmt"
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
	early    bool // try returned before its context ended
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

// hedgeRun is the state of one hedged request, which Attempts.loop
// reaches only through its hr: the goroutines, their channel, the hedge
// timer, and try, which the goroutines call (so that loop's own try is
// only ever called in place, and does not escape to the heap).
type hedgeRun struct {
	a        *Attempts // the loop's, which the goroutines reach through hr
	h        *Hedging
	try      func(context.Context, *Peer) Verdict
	results  chan hedgeResult
	atts     []hedgeAttempt
	inflight int
	timerC   <-chan time.Time
	stop     func() bool
	hedging  bool
	winner   int
	ended    bool  // an attempt ended the loop, or panicked
	why      error // why no further attempt was made, if none won
	panicked *hedgeResult
}

// What hedgeRun.next asks of the loop.
const (
	hedgeEnd   = iota // every try has returned: the loop ends
	hedgeSend         // the delay has passed: pick a hedge
	hedgeRetry        // a failure with nothing in flight: pick a retry
)

// RunHedged is Run with hedging: an attempt that has not answered within
// h's delay is joined by a hedge on another peer (the Request's tried set
// keeps it off the peers in flight), up to HedgePolicy.MaxAttempts in
// flight, each hedge taken from the policy's Budget; the first verdict
// that ends the loop wins and the other attempts' contexts are cancelled
// with ErrSuperseded, each reported Abandoned and Superseded (unless its
// Verdict says Reported, or ctx ended first) once its try returns; a
// loser whose try returned a Verdict Failed and not Abandoned before its
// context was cancelled (its peer answered with a failure) is reported
// with that Outcome. A hedge that ends the loop wins (HedgeStats.Won,
// EventHedgeWon) unless its Verdict is Abandoned.
// A failure asking for a retry while another attempt is in flight waits
// for it; with none in flight it is an ordinary retry. Each try runs on a
// goroutine of its own, on a context of its own, so try and Now must be
// safe for concurrent use. RunHedged returns once every try has returned,
// and never cancels the winner's context, which ctx's end releases (a
// caller that keeps reading the winner's reply cancels ctx once done). A
// try that panics stops the loop (the hedge timer is stopped, no further
// attempt is sent) as the others return, and the panic goes on from
// RunHedged. A nil h is Run; a nil Picker or try, a negative MaxTries,
// or an h not made by NewHedging is ErrInvalidConfig.
//
// How: Attempts.loop with a hedgeRun. Every attempt runs try on a
// goroutine of its own, on a context of its own, and sends its verdict
// back; the loop's goroutine alone picks, reports and decides, so Request
// needs no lock. At most h.max attempts are in flight: a hedge is sent
// when the newest attempt has gone h.wait() without an answer, if the
// hedge budget allows it and the picker has a peer the request has not
// tried.
func (a *Attempts) RunHedged(ctx context.Context, h *Hedging, try func(context.Context, *Peer) Verdict) error {
	if err := a.check("Attempts.RunHedged", try == nil); err != nil {
		return err
	}
	switch {
	case h == nil:
		return a.runSequential(ctx, try)
	case h.max == 0:
		return fmt.Errorf("balancer: Attempts.RunHedged: a Hedging not made by NewHedging: %w", ErrInvalidConfig)
	}
	hr := &hedgeRun{
		a:       a,
		h:       h,
		try:     try,
		results: make(chan hedgeResult, h.max), // never more in flight: no send blocks
		atts:    make([]hedgeAttempt, 0, h.max),
		hedging: true,
		winner:  -1,
	}
	defer hr.stopTimer()
	return a.loop(ctx, try, hr)
}

// launch starts an attempt on peer, on a goroutine of its own.
func (hr *hedgeRun) launch(ctx context.Context, peer *Peer, hedge bool) {
	a := hr.a
	actx, cancel := context.WithCancelCause(ctx)
	id := len(hr.atts)
	hr.atts = append(hr.atts, hedgeAttempt{peer: peer, ctx: actx, cancel: cancel, hedge: hedge})
	hr.inflight++
	try, results := hr.try, hr.results
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
		res.early = actx.Err() == nil
		res.latency = max(a.now().Sub(start), 0)
		res.panicked = false
	}()
}

func (hr *hedgeRun) stopTimer() {
	if hr.stop != nil {
		hr.stop()
	}
	hr.timerC, hr.stop = nil, nil
}

// next waits for the attempts in flight, reporting each verdict, until
// the loop must pick (a hedge whose delay has passed, or a retry with
// nothing in flight) or every try has returned.
func (hr *hedgeRun) next() int {
	h := hr.h
	for hr.inflight > 0 {
		if !hr.ended && hr.hedging && hr.inflight < h.max && hr.timerC == nil {
			d, ok := h.wait()
			switch {
			case !ok:
				hr.hedging = false
			case d == 0:
				c := make(chan time.Time, 1)
				c <- time.Time{}
				hr.timerC = c
			default:
				hr.timerC, hr.stop = h.timer(d)
			}
		}
		select {
		case <-hr.timerC:
			hr.timerC, hr.stop = nil, nil
			return hedgeSend
		case res := <-hr.results:
			if hr.result(res) {
				return hedgeRetry
			}
		}
	}
	return hedgeEnd
}

// result reports one attempt's verdict and decides on it; true asks for
// a retry now (a failure with nothing in flight).
func (hr *hedgeRun) result(res hedgeResult) bool {
	a, h := hr.a, hr.h
	hr.inflight--
	at := &hr.atts[res.id]
	at.done = true
	switch {
	case hr.ended: // a loser, cancelled
		if res.id == 0 && hr.winner >= 0 && !res.v.Outcome.Failed {
			h.record(res.latency) // at least this slow
		}
		switch {
		case res.early && !res.v.Reported && res.v.Outcome.Failed && !res.v.Outcome.Abandoned:
			// The peer answered with a failure before the cancel
			// took effect: evidence against it, reported as such.
			a.done(at.peer, res.v.Outcome, res.latency)
		case !res.v.Reported || res.panicked:
			// Superseded unless ctx ended first: then the
			// caller's patience ran out, as without hedging.
			sup := context.Cause(at.ctx) == ErrSuperseded
			_ = a.Picker.Done(at.peer, Outcome{Abandoned: true, Superseded: sup, Latency: res.latency})
		}
	case res.panicked:
		_ = a.Picker.Done(at.peer, Outcome{Abandoned: true, Latency: res.latency})
		hr.ended, hr.panicked = true, &res
		hr.stopTimer() // no hedge while the others return
		hr.cancelOthers(-1)
	default:
		if !res.v.Reported {
			a.done(at.peer, res.v.Outcome, res.latency)
		}
		if !res.v.Retry {
			hr.ended, hr.winner = true, res.id
			hr.stopTimer()
			hr.cancelOthers(res.id)
			if at.hedge && !res.v.Outcome.Abandoned { // an answer from the hedge's peer
				h.won.Add(1)
				h.event(EventHedgeWon, at.peer, a.now())
			}
			if res.id == 0 && !res.v.Outcome.Failed && !res.v.Outcome.Abandoned {
				h.record(res.latency)
			}
			return false
		}
		if hr.inflight > 0 {
			return false // the attempts in flight may yet answer
		}
		// Nothing in flight: an ordinary retry.
		hr.stopTimer()
		return true
	}
	return false
}

// picked takes the loop's pick of a hedge (hedge) or a retry: it launches
// the attempt, or notes why none was made.
func (hr *hedgeRun) picked(ctx context.Context, peer *Peer, err error, hedge bool) {
	a, h := hr.a, hr.h
	switch {
	case err == nil:
		if hedge {
			h.sent.Add(1)
			h.event(EventHedgeSent, peer, a.now())
		}
		hr.launch(ctx, peer, hedge)
	case !hedge:
		hr.why = err
	case err == ErrRetryBudget:
		h.refused.Add(1)
		h.event(EventHedgeRefused, nil, a.now())
		hr.hedging = false
	default:
		hr.hedging = false // no peer left, or the caller gave up
	}
}

// end releases the losers' contexts once every try has returned, and
// returns RunHedged's result, or goes on with a try's panic.
func (hr *hedgeRun) end() error {
	for i := range hr.atts {
		if i != hr.winner {
			hr.atts[i].cancel(nil) // released; the winner's lives on with ctx
		}
	}
	if p := hr.panicked; p != nil {
		if p.goexit {
			runtime.Goexit()
		}
		panic(p.pv)
	}
	if hr.winner >= 0 {
		return nil
	}
	return hr.why
}

// cancelOthers cancels, with ErrSuperseded, every attempt in flight but
// keep.
func (hr *hedgeRun) cancelOthers(keep int) {
	for i := range hr.atts {
		if i != keep && !hr.atts[i].done {
			hr.atts[i].cancel(ErrSuperseded)
		}
	}
}
