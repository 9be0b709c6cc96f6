package balancerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"sync"
	"time"

	"github.com/lbgo/balancer"
)

// ErrConnectTimeout is the error of an attempt that had no connection to
// its peer within ConnectTimeout, nginx's "upstream timed out while
// connecting to upstream". The attempt is a failure of the peer; the peer
// never saw the request.
var ErrConnectTimeout = errors.New("balancerhttp: timed out connecting to the peer")

// ErrReadTimeout is the error of an attempt whose peer sent nothing for
// ReadTimeout while it was waited on, for the response's headers or for a
// read of its body, nginx's "upstream timed out while reading response
// header from upstream". The attempt is a failure of the peer.
var ErrReadTimeout = errors.New("balancerhttp: timed out reading from the peer")

// timeouts are the per-attempt timeouts of a Transport or a Proxy; zero
// is none.
type timeouts struct{ connect, read time.Duration }

// check returns balancer.ErrInvalidConfig naming a negative timeout of
// owner ("Transport", "Proxy"), or nil.
func (t timeouts) check(owner string) error {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"ConnectTimeout", t.connect}, {"ReadTimeout", t.read}} {
		if f.d < 0 {
			return fmt.Errorf("%w: balancerhttp: %s.%s %v is negative", balancer.ErrInvalidConfig, owner, f.name, f.d)
		}
	}
	return nil
}

// phase is where an attempt stands, for its timeouts: connecting (timed by
// ConnectTimeout) until the Base reports a connection (httptrace's
// GotConn), writing (not timed: nginx's proxy_send_timeout has no
// counterpart) until it reports the request written (WroteRequest), then
// reading (timed by ReadTimeout) until the headers, idle between the
// body's reads, reading again during each, finished once reported.
type phase uint8

const (
	connecting phase = iota
	writing
	reading
	idle
	finished
)

// attemptTimer enforces the timeouts of one attempt: when the current
// phase's timeout passes, it records which one and cancels the attempt's
// context with it as the cause. One timer serves every phase; a firing
// whose deadline has since moved (a later phase re-armed it) is ignored.
// The nil *attemptTimer, used when no timeout is set, does nothing.
type attemptTimer struct {
	timeouts
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	phase    phase       // guarded by mu
	deadline time.Time   // guarded by mu; zero while the phase is not timed
	timer    *time.Timer // guarded by mu; nil until first armed
	fired    error       // guarded by mu; the timeout that ended the attempt, or nil
}

// begin returns req with the context of one attempt timed by t, and its
// timer; req itself and a nil timer when t sets no timeout.
func (t timeouts) begin(req *http.Request) (*http.Request, *attemptTimer) {
	if t.connect <= 0 && t.read <= 0 {
		return req, nil
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	a := &attemptTimer{timeouts: t, cancel: cancel}
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn:      func(httptrace.GotConnInfo) { a.gotConn() },
		WroteRequest: func(httptrace.WroteRequestInfo) { a.wroteRequest() },
	})
	a.mu.Lock()
	a.arm(connecting, t.connect)
	a.mu.Unlock()
	return req.WithContext(ctx), a
}

// arm enters phase p, timed by d (not timed if d <= 0). a.mu is held.
func (a *attemptTimer) arm(p phase, d time.Duration) {
	a.phase = p
	if d <= 0 {
		a.deadline = time.Time{}
		if a.timer != nil {
			a.timer.Stop()
		}
		return
	}
	a.deadline = time.Now().Add(d)
	if a.timer == nil {
		a.timer = time.AfterFunc(d, a.expire)
	} else {
		a.timer.Reset(d)
	}
}

// expire ends the attempt if its current phase's deadline has passed.
func (a *attemptTimer) expire() {
	a.mu.Lock()
	if a.fired != nil || a.deadline.IsZero() || time.Now().Before(a.deadline) {
		a.mu.Unlock()
		return
	}
	switch a.phase {
	case connecting:
		a.fired = fmt.Errorf("%w (ConnectTimeout %v)", ErrConnectTimeout, a.connect)
	case reading:
		a.fired = fmt.Errorf("%w (ReadTimeout %v)", ErrReadTimeout, a.read)
	default:
		a.mu.Unlock()
		return
	}
	err := a.fired
	a.mu.Unlock()
	a.cancel(err)
}

func (a *attemptTimer) gotConn() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase == connecting && a.fired == nil {
		a.arm(writing, 0)
	}
}

// wroteRequest starts the wait for the headers. From connecting too: a
// Base may report no connection.
func (a *attemptTimer) wroteRequest() {
	a.mu.Lock()
	defer a.mu.Unlock()
	if (a.phase == connecting || a.phase == writing) && a.fired == nil {
		a.arm(reading, a.read)
	}
}

// roundTripped is called when the Base returns: it returns the timeout
// that ended the attempt, if one did, and otherwise stops the clock until
// the body is read.
func (a *attemptTimer) roundTripped() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired == nil {
		a.arm(idle, 0)
	}
	return a.fired
}

// readStart times a read of the body.
func (a *attemptTimer) readStart() {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.phase == idle && a.fired == nil {
		a.arm(reading, a.read)
	}
}

// readEnd ends a read of the body, returning the timeout that cut it
// short, if one did.
func (a *attemptTimer) readEnd() error {
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fired == nil && a.phase == reading {
		a.arm(idle, 0)
	}
	return a.fired
}

// finish stops the timer and releases the attempt's context, once the
// attempt is reported.
func (a *attemptTimer) finish() {
	if a == nil {
		return
	}
	a.mu.Lock()
	a.phase, a.deadline = finished, time.Time{}
	if a.timer != nil {
		a.timer.Stop()
	}
	a.mu.Unlock()
	a.cancel(context.Canceled)
}

// wrap returns rc timed by a's ReadTimeout and releasing a's context when
// closed, for the body of an attempt already reported (a failure status
// dropped, or held to be passed on); rc itself if a is nil.
func (a *attemptTimer) wrap(rc io.ReadCloser) io.ReadCloser {
	if a == nil {
		return rc
	}
	return &timedBody{rc, a}
}

type timedBody struct {
	rc    io.ReadCloser
	timer *attemptTimer
}

func (b *timedBody) Read(p []byte) (int, error) {
	b.timer.readStart()
	n, err := b.rc.Read(p)
	if terr := b.timer.readEnd(); terr != nil && err != io.EOF {
		err = terr
	}
	return n, err
}

func (b *timedBody) Close() error {
	err := b.rc.Close()
	b.timer.finish()
	return err
}
