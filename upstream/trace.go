package upstream

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lbgo/balancer"
)

// maxAttempts bounds the attempts of one traced request, so that a picker
// that breaks its contract (tries bounded by the number of peers) makes
// Trace fail instead of loop forever.
const maxAttempts = 1 << 16

// Trace sends n requests through p the way nginx handles each request with
// `proxy_next_upstream error`, and returns one line per request as nginx
// logs $upstream_addr: the addresses tried, joined by ", ".
//
// Each request starts with a fresh balancer.Request. Every attempt is
// reported to p: an address for which failing reports true fails (like a
// closed port) and the request moves on to the next peer; any other address
// succeeds and ends the request. When p finds no live peer, name (the
// upstream's name) ends the line, as nginx logs it after "no live
// upstreams": "c, b, back", or just "back". When the request has used all
// its tries the line ends without it. A nil failing means no peer fails.
//
// Trace does not move any clock: give it a picker built with a fixed one.
// It returns an error for any other Pick or Done error.
func Trace(p balancer.Picker, name string, n int, failing func(addr string) bool) ([]string, error) {
	return TraceEach(p, name, n, failing, nil)
}

// TraceEach is Trace with a hook: before request i (from 0) makes its
// first attempt, prepare(i, r) may set up its fresh Request r, such as the
// key a hash method reads. A nil prepare does nothing.
func TraceEach(p balancer.Picker, name string, n int, failing func(addr string) bool, prepare func(i int, r *balancer.Request)) ([]string, error) {
	lines := make([]string, 0, min(max(n, 0), 1<<12))
	var r balancer.Request
	var line strings.Builder
	for i := range n {
		r.Reset()
		line.Reset()
		if prepare != nil {
			prepare(i, &r)
		}
		if err := traceRequest(p, &r, name, failing, &line); err != nil {
			return lines, err
		}
		lines = append(lines, line.String())
	}
	return lines, nil
}

// traceRequest runs the attempts of one request, writing what nginx logs.
// Latencies are 0 (a clock that does not move), as nginx's vectors are
// recorded without time.
func traceRequest(p balancer.Picker, r *balancer.Request, name string, failing func(string) bool, line *strings.Builder) error {
	sep := func() {
		if line.Len() > 0 {
			line.WriteString(", ")
		}
	}
	cp := &checkedDone{Picker: p}
	tries := 0
	loop := balancer.Attempts{
		Picker:   cp,
		Request:  r,
		MaxTries: maxAttempts,
		Now:      func() time.Time { return time.Time{} },
		GaveUp:   func() error { return cp.err }, // a Done refused ends the request
	}
	err := loop.Run(context.Background(), func(_ context.Context, peer *balancer.Peer) balancer.Verdict {
		tries++
		sep()
		line.WriteString(peer.Addr())
		failed := failing != nil && failing(peer.Addr())
		return balancer.Verdict{Outcome: balancer.Outcome{Failed: failed}, Retry: failed}
	})
	switch {
	case cp.err != nil:
		return cp.err
	case err == nil:
		return nil
	case tries >= maxAttempts:
		return fmt.Errorf("upstream: trace: picker made more than %d attempts for one request", maxAttempts)
	case errors.Is(err, balancer.ErrNoLivePeer):
		sep()
		line.WriteString(name)
		return nil
	case errors.Is(err, balancer.ErrTriesExhausted):
		return nil
	}
	return fmt.Errorf("upstream: trace: pick: %w", err)
}

// checkedDone keeps the first error of its Picker's Done, which the
// attempt loop does not return.
type checkedDone struct {
	balancer.Picker
	err error
}

func (c *checkedDone) Done(peer *balancer.Peer, o balancer.Outcome) error {
	if err := c.Picker.Done(peer, o); err != nil && c.err == nil {
		c.err = fmt.Errorf("upstream: trace: done %q: %w", peer.Addr(), err)
	}
	return nil
}
