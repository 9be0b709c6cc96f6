package balancer

import (
	"context"
	"fmt"
	"time"
)

// Attempts is the attempt loop of one request, which Do,
// balancerhttp.Transport and balancerhttp.Proxy share: Run picks a peer
// from Picker for Request, calls try with it, reports try's Verdict with
// Done (also when try panics: Abandoned, before the panic goes on), and
// picks again while the verdict asks for a retry and the loop allows one.
// A retry is withdrawn from Budget, if set, before its pick (a refusal,
// ErrRetryBudget, leaves Picker as it was; a pick that finds no peer is
// refunded; a request with no try left, ErrTriesExhausted, takes
// nothing), and is not made past MaxTries attempts (nginx's
// proxy_next_upstream_tries; 0: only Picker's bound; negative: refused)
// nor once GaveUp, checked before each pick, returns an error (nil
// GaveUp: ctx.Err). Run
// deposits one request in Budget. Now times each attempt (nil: time.Now).
// Done's errors are not returned. An Attempts serves one request; Run's
// attempts are sequential, and RunHedged hedges them. Run, RunHedged, Do
// and Next refuse a nil Picker, a nil try and a negative MaxTries with an
// error matching ErrInvalidConfig that names the field (and its value).
type Attempts struct {
	Picker   Picker
	Request  *Request // nil: a fresh one
	Budget   Budget   // nil: no budget
	MaxTries int
	Now      func() time.Time
	GaveUp   func() error
}

// Verdict is what one attempt came to, as try returns it to
// Attempts.Run.
type Verdict struct {
	// Outcome is reported with Done; a zero Latency is the time try
	// took, on Attempts.Now.
	Outcome Outcome
	// Retry asks for another attempt on another peer.
	Retry bool
	// Reported says try's caller reports the attempt with Done itself,
	// later (a reply whose body is still to be read); Outcome is then
	// not reported. Under hedging, a Reported attempt that lost (its
	// context's cause ErrSuperseded) is the caller's to report
	// Abandoned and Superseded.
	Reported bool
}

// Run runs the attempts (see Attempts). It returns nil when an attempt
// ended the loop (its Verdict did not ask for a retry), or why no further
// attempt was made: GaveUp's error, Pick's error (ErrNoLivePeer,
// ErrTriesExhausted, ErrNoPeers), ErrRetryBudget, or an
// error matching ErrTriesExhausted and naming MaxTries; or, before
// anything is picked, ErrInvalidConfig (see Attempts).
func (a *Attempts) Run(ctx context.Context, try func(ctx context.Context, peer *Peer) Verdict) error {
	if err := a.check("Attempts.Run", try == nil); err != nil {
		return err
	}
	return a.runSequential(ctx, try)
}

// check refuses a nil Picker, a nil try (nilTry) or a negative MaxTries
// with ErrInvalidConfig, naming who refuses.
func (a *Attempts) check(who string, nilTry bool) error {
	switch {
	case a.Picker == nil:
		return fmt.Errorf("balancer: %s: Picker is nil: %w", who, ErrInvalidConfig)
	case nilTry:
		return fmt.Errorf("balancer: %s: try is nil: %w", who, ErrInvalidConfig)
	case a.MaxTries < 0:
		return fmt.Errorf("balancer: %s: MaxTries %d is negative: %w", who, a.MaxTries, ErrInvalidConfig)
	}
	return nil
}

// begin deposits the request in Budget and returns its Request.
func (a *Attempts) begin() *Request {
	if a.Budget != nil {
		a.Budget.Deposit()
	}
	if a.Request == nil {
		return new(Request)
	}
	return a.Request
}

// runSequential is Run, which Do calls too: loop without hedging.
func (a *Attempts) runSequential(ctx context.Context, try func(ctx context.Context, peer *Peer) Verdict) error {
	return a.loop(ctx, try, nil)
}

// loop is the attempt loop of Run and RunHedged, the module's one loop
// that picks: it picks each attempt (pickNext), and without hedging (hr
// nil) calls try in place, reports its verdict and decides on the next;
// with hedging, hr runs each attempt on a goroutine of its own, on
// hr.try, and says when to pick again (a hedge or a retry) or to end.
// try is only ever called here, in place, so it does not escape to the
// heap: Run's path allocates nothing, while the goroutines, their
// channel and the hedge timer are reachable only from hr.
func (a *Attempts) loop(ctx context.Context, try func(ctx context.Context, peer *Peer) Verdict, hr *hedgeRun) error {
	r := a.begin()
	if hr != nil && !sameBudget(hr.h.budget, a.Budget) {
		hr.h.budget.Deposit()
	}
	for n := 0; ; n++ {
		budget, hedge := a.Budget, false
		if hr != nil && n > 0 {
			switch hr.next() {
			case hedgeEnd:
				return hr.end()
			case hedgeSend:
				budget, hedge = hr.h.budget, true // a hedge, from the hedge budget
			}
			n = len(hr.atts)
		}
		peer, err := a.pickNext(ctx, r, n, budget)
		if hr != nil {
			if err != nil && n == 0 {
				return err
			}
			hr.picked(ctx, peer, err, hedge)
			continue
		}
		if err != nil {
			return err
		}
		if !a.attempt(ctx, peer, try) {
			return nil
		}
	}
}

// Next picks the peer of the request's attempt after n made, deciding
// as Run does before each attempt (GaveUp or ctx, MaxTries, and for a
// retry, n > 0, Budget), for a caller that runs the attempts itself, such
// as a simulator on a virtual clock. It returns Run's errors; it neither
// deposits the request (Budget.Deposit, once a request) nor reports Done.
func (a *Attempts) Next(ctx context.Context, n int) (*Peer, error) {
	if err := a.check("Attempts.Next", false); err != nil {
		return nil, err
	}
	return a.pickNext(ctx, a.Request, n, a.Budget)
}

// pickNext is the pick of the request's attempt after n made, and the
// decision whether to make it, which loop makes before each attempt:
// none once GaveUp (or ctx) says so or MaxTries are made; past the first, one withdrawn
// from budget if set (a.Budget for a retry, the hedge budget for a
// hedge). A request that has made as many attempts as Pick allows it gets
// ErrTriesExhausted, as Pick would give, without asking the budget.
// Otherwise the budget is asked before Pick, so a refused attempt leaves
// the picker as it was (a Pick then Abandoned would still move a round
// robin's weights): a refusal when Pick would have found every remaining
// peer down or full is ErrRetryBudget. A withdrawal whose Pick fails is
// refunded, and Pick's error returned.
func (a *Attempts) pickNext(ctx context.Context, r *Request, n int, budget Budget) (*Peer, error) {
	if err := a.gaveUp(ctx); err != nil {
		return nil, err
	}
	switch {
	case a.MaxTries > 0 && n >= a.MaxTries:
		return nil, fmt.Errorf("MaxTries %d: %w", a.MaxTries, ErrTriesExhausted)
	case n > 0 && budget != nil:
		if r != nil && r.attempts > 0 && r.attempts >= r.limit {
			return nil, ErrTriesExhausted // Pick's answer, without a pick
		}
		if !budget.TryWithdraw() {
			return nil, ErrRetryBudget
		}
		peer, err := a.Picker.Pick(r)
		if err != nil {
			budget.Refund()
			return nil, err
		}
		return peer, nil
	}
	return a.Picker.Pick(r)
}

func (a *Attempts) gaveUp(ctx context.Context) error {
	if a.GaveUp != nil {
		return a.GaveUp()
	}
	return ctx.Err()
}

func (a *Attempts) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// attempt calls try on peer, reports its verdict (Abandoned if try
// panics) and returns whether it asks for a retry.
func (a *Attempts) attempt(ctx context.Context, peer *Peer, try func(context.Context, *Peer) Verdict) bool {
	start := a.now()
	reported := false
	defer func() {
		if !reported {
			_ = a.Picker.Done(peer, Outcome{Abandoned: true, Latency: max(a.now().Sub(start), 0)})
		}
	}()
	v := try(ctx, peer)
	reported = true
	if !v.Reported {
		if v.Outcome.Latency == 0 {
			v.Outcome.Latency = max(a.now().Sub(start), 0) // a clock that steps back counts as 0
		}
		_ = a.Picker.Done(peer, v.Outcome)
	}
	return v.Retry
}

// done reports o for peer, with latency if o has none.
func (a *Attempts) done(peer *Peer, o Outcome, latency time.Duration) {
	if o.Latency == 0 {
		o.Latency = latency
	}
	_ = a.Picker.Done(peer, o)
}
