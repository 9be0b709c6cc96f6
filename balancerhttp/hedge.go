package balancerhttp

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/lbgo/balancer"
)

// hedgeable reports whether req may be hedged: safe to send twice at once
// as net/http decides replay (GET, HEAD, OPTIONS, TRACE, or an
// Idempotency-Key or X-Idempotency-Key header, present even if empty),
// its body absent or replayable through GetBody, and not an upgrade,
// whose connection would outlive the attempt.
func hedgeable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
	default:
		_, k := req.Header["Idempotency-Key"]
		_, x := req.Header["X-Idempotency-Key"]
		if !k && !x {
			return false
		}
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	return (!hasBody || req.GetBody != nil) && req.Header.Get("Upgrade") == ""
}

// roundTripHedged is RoundTrip for a request t.Hedging may hedge: each
// attempt runs on the context Attempts.Run gives it, so that a loser's
// is cancelled (ErrSuperseded) while the winner's lives on until its body
// is read or closed. Several attempts may run at once, so their shared
// state is behind mu. The winner is the response whose context was not
// superseded; the others' bodies are closed, reported Abandoned and
// Superseded.
func (t *Transport) roundTripHedged(req *http.Request, br *balancer.Request) (*http.Response, error) {
	hasBody := req.Body != nil && req.Body != http.NoBody
	to := timeouts{t.ConnectTimeout, t.ReadTimeout}
	ctx, release := releasable(req.Context())
	type candidate struct {
		ctx  context.Context
		resp *http.Response
		rb   *reportingBody
	}
	var (
		mu     sync.Mutex
		errs   []error
		why    error
		cands  []candidate
		drains []*http.Response
		tries  int
	)
	loop := balancer.Attempts{Picker: t.Picker, Request: br, Budget: t.RetryBudget, MaxTries: t.MaxTries, GaveUp: func() error { return gaveUp(req) }}
	stopped := loop.RunHedged(ctx, t.Hedging, func(actx context.Context, peer *balancer.Peer) balancer.Verdict {
		mu.Lock()
		tries++
		n := tries
		mu.Unlock()
		body := req.Body
		if n > 1 && hasBody {
			b, err := req.GetBody()
			if err != nil {
				mu.Lock()
				why = fmt.Errorf("Request.GetBody: %w", err)
				mu.Unlock()
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true}}
			}
			body = b
		}
		out := req.WithContext(actx)
		u := *req.URL
		u.Host = peer.Addr()
		out.URL = &u
		if out.Host == "" {
			out.Host = req.URL.Host
		}
		out.Body = body
		sent, timer := to.begin(out)
		start := time.Now()
		r, err := attemptRoundTrip(t.base, sent, timer.finish)
		latency := time.Since(start)
		if terr := timer.roundTripped(); terr != nil {
			if err == nil {
				_ = r.Body.Close()
			}
			err = terr
		}
		if err != nil {
			timer.finish()
			if gaveUp(out) != nil {
				// Superseded, or the caller gave up: not the peer's doing.
				// The caller's reason is the request's error, as
				// without hedging; a superseded loser's is nobody's.
				if cause := gaveUp(req); cause != nil {
					mu.Lock()
					errs = append(errs, &peerError{peer.Addr(), err})
					why = cause
					mu.Unlock()
				}
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			mu.Lock()
			defer mu.Unlock()
			errs = append(errs, &peerError{peer.Addr(), err})
			if errors.Is(err, ErrBadRoundTripper) {
				why = ErrBadRoundTripper
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency}, Retry: true}
		}
		if slices.Contains(t.failureStatuses(), r.StatusCode) {
			r.Body = timer.wrap(r.Body)
			mu.Lock()
			defer mu.Unlock()
			drains = append(drains, r)
			errs = append(errs, &StatusError{Peer: peer.Addr(), StatusCode: r.StatusCode, Status: r.Status})
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency, Load: t.load.read(r.Header, nil)}, Retry: true}
		}
		rb := &reportingBody{rc: r.Body, req: out, resp: r, load: &t.load, picker: t.Picker, peer: peer, start: start, timer: timer}
		rb.hdrLoad = t.load.read(r.Header, &rb.ldst)
		r.Body = rb
		mu.Lock()
		cands = append(cands, candidate{actx, r, rb})
		mu.Unlock()
		return balancer.Verdict{Reported: true} // when the body is read or closed
	})
	for _, d := range drains {
		closeBody(d)
	}
	var resp *http.Response
	for _, c := range cands {
		if resp == nil && stopped == nil && !errors.Is(context.Cause(c.ctx), balancer.ErrSuperseded) {
			resp, c.rb.release = c.resp, release
			continue
		}
		_ = c.resp.Body.Close() // a loser: reported Abandoned and Superseded
	}
	if resp != nil {
		return resp, nil
	}
	release()
	if stopped != nil {
		why = stopped
	}
	if tries == 0 {
		closeRequestBody(req.Body)
	}
	return nil, &RoundTripError{Method: req.Method, URL: req.URL.String(), Attempts: errs, Err: why}
}

// releasable is context.WithCancel, for a context whose cancel the
// winner's body calls once reported, after roundTripHedged returns.
func releasable(parent context.Context) (context.Context, func()) {
	return context.WithCancel(parent)
}
