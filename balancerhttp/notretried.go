package balancerhttp

import (
	"errors"
	"fmt"
	"net"
	"net/http"
)

// Why a failed attempt was not retried, besides balancer.ErrTriesExhausted
// (no peer or try left) and the caller's own context error.
var (
	// ErrNotIdempotent: the request's method is not idempotent, it has
	// no Idempotency-Key and the peer may have seen it, so sending it
	// again might repeat its effect.
	ErrNotIdempotent = errors.New("balancerhttp: not retried: method not idempotent")

	// ErrBodyNotRewindable: the request's body cannot be sent again (no
	// Request.GetBody, or over the Proxy's MaxReplayBody).
	ErrBodyNotRewindable = errors.New("balancerhttp: not retried: body not rewindable")
)

// idempotent lists the methods nginx and net/http retry: the idempotent
// methods of RFC 9110, section 9.2.2, and "", a client's GET.
var idempotent = map[string]bool{
	"":             true,
	http.MethodGet: true, http.MethodHead: true, http.MethodOptions: true,
	http.MethodTrace: true, http.MethodPut: true, http.MethodDelete: true,
}

// retrySafe reports whether resending req cannot repeat an effect: its
// method is idempotent or it carries an idempotency key.
func retrySafe(req *http.Request) bool {
	return idempotent[req.Method] || req.Header.Get("Idempotency-Key") != "" || req.Header.Get("X-Idempotency-Key") != ""
}

// notSent reports whether err is a failure to open a connection, so that
// the backend never saw the request and even a non-idempotent one may go
// to the next peer, as nginx does.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" || errors.Is(err, ErrConnectTimeout)
}

// whyNotRetried returns why an attempt of req that failed with err may not
// be retried, or nil if it may: safe says resending cannot repeat an
// effect, and noReplay, if not empty, why the body cannot be sent again.
// A request the peer never saw may go on whatever its method.
func whyNotRetried(req *http.Request, err error, safe bool, noReplay string) error {
	if !safe && !notSent(err) {
		return fmt.Errorf("%w (%s without Idempotency-Key)", ErrNotIdempotent, req.Method)
	}
	if noReplay != "" {
		return fmt.Errorf("%w (%s)", ErrBodyNotRewindable, noReplay)
	}
	return nil
}
