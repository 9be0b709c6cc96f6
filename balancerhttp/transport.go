package balancerhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/lbgo/balancer"
)

// DefaultFailureStatuses are the statuses Transport counts as a failure of
// the peer when FailureStatuses is nil: 502, 503 and 504, the gateway
// errors, as nginx's proxy_next_upstream http_502 http_503 http_504.
var DefaultFailureStatuses = []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout}

// ErrNoPicker is returned by Transport.RoundTrip when Transport.Picker is
// nil.
var ErrNoPicker = errors.New("balancerhttp: Transport.Picker is nil")

// Transport is an http.RoundTripper that balances an http.Client's
// requests over the peers of Picker, with Proxy's rules on the client's
// side: each attempt goes to the peer Picker gives (the request's URL host,
// a service name such as "http://users/v1/x", is replaced by the peer's
// address, host:port), is reported with Done, and a failed attempt of a
// request that may be retried goes to the next peer, each peer at most
// once per request (one balancer.Request per http.Request). Done carries
// the peer's load report, as the package doc says.
//
// A failure is a transport error (refused, reset, ConnectTimeout,
// ReadTimeout, Base's timeouts) or a status in FailureStatuses. A request
// may be retried when its method is idempotent (GET, HEAD, OPTIONS, TRACE,
// PUT, DELETE), it carries an Idempotency-Key header, RetryNonIdempotent is
// set, or the connection could not be opened or ConnectTimeout passed (the
// peer never saw it), as nginx decides; and its body, if any, can be
// replayed through Request.GetBody (http.NewRequest sets it for in-memory
// bodies). A request whose context ends is not
// retried: its attempt is reported Abandoned, not as the peer's failure,
// so a caller's deadline (http.Client.Timeout) never marks a peer failed;
// ConnectTimeout and ReadTimeout, shorter than it, do.
//
// RoundTrip returns the first response that is not a failure, or a
// failure's response when the request may not be retried. When no peer is
// left it returns a *RoundTripError holding every attempt's error (a
// *StatusError for a failure status) and why it stopped
// (balancer.ErrNoLivePeer, ErrTriesExhausted, ErrNoPeers, the context's
// error); errors.Is and errors.As see each of them through http.Client's
// *url.Error. The returned response's attempt is reported when its body is
// read to the end or closed, so the caller must close it, as net/http asks.
//
// The URL's scheme is kept: https speaks TLS to every peer, checking its
// certificate against the peer's address unless Base's
// TLSClientConfig.ServerName names the service. The Host header stays the
// request's (Request.Host, else the URL's host as written), as nginx
// sends the upstream's name. IPHash sees no client address here (every
// request hashes alike); route by Key with Hash or ConsistentHash instead.
//
// Set Picker before the first request and change no field afterwards; the
// peers change through the Picker's Updater methods at any time. The zero
// value is unusable until Picker is set; RoundTrip then returns
// ErrNoPicker. A negative timeout makes every RoundTrip return
// balancer.ErrInvalidConfig, naming the field. A Transport is safe for
// concurrent use.
type Transport struct {
	// Picker chooses the peer of each attempt and learns its outcome.
	// Required.
	Picker balancer.Picker

	// Base makes each attempt. Default: a clone of http.DefaultTransport
	// keeping up to 256 idle connections per peer and waiting at most
	// 60 s for a response's headers, nginx's proxy_read_timeout; a
	// timeout is a failure.
	// A Base breaking http.RoundTripper's contract, or panicking, is
	// handled as ErrBadRoundTripper says.
	Base http.RoundTripper

	// FailureStatuses lists the statuses that count as the peer's
	// failure and are retried. Nil: DefaultFailureStatuses; empty, not
	// nil: none.
	FailureStatuses []int

	// RetryNonIdempotent retries every method, as nginx's
	// proxy_next_upstream non_idempotent. Default false.
	RetryNonIdempotent bool

	// MaxTries bounds the attempts of one request (nginx's
	// proxy_next_upstream_tries). Default 0: only the Picker's bound, one
	// attempt per peer that is not down. Negative is refused: every
	// RoundTrip returns an error matching balancer.ErrInvalidConfig.
	MaxTries int

	// ConnectTimeout bounds the wait of an attempt for its connection
	// (dialled and, for https, handshaken, or taken from the idle ones),
	// nginx's proxy_connect_timeout. An attempt past it fails with
	// ErrConnectTimeout, a failure of the peer, and goes to the next
	// peer whatever its method: the peer never saw it. Default 0: only
	// Base's own bounds (the default Base's dialer gives up after 30 s).
	ConnectTimeout time.Duration

	// ReadTimeout bounds each wait of an attempt on its peer once the
	// request is written: for the response's headers, then for each
	// Read of the body, as nginx's proxy_read_timeout bounds the time
	// between two reads. The caller's time between Reads is not
	// counted, nor the writing of the request. An attempt past it fails
	// with ErrReadTimeout, a failure of the peer. Default 0: only
	// Base's own bounds (the default Base waits 60 s for the headers).
	//
	// Both timeouts follow the attempt through httptrace's GotConn and
	// WroteRequest, which *http.Transport reports; over a Base that
	// reports neither, ConnectTimeout bounds the wait for the headers
	// and ReadTimeout only the body's reads.
	ReadTimeout time.Duration

	// Key, if set, gives each request's key for the keyed pickers (Hash,
	// ConsistentHash): balancer.Request.SetKey. Default: no key.
	Key func(*http.Request) string

	// RetryBudget, if set, bounds the retries: each request deposits
	// one, each retry takes one, and a retry it refuses ends the request
	// with a *RoundTripError whose Err is balancer.ErrRetryBudget. The
	// budget and the picker are asked before the body is rewound
	// (Request.GetBody), so a refused retry never rewinds it. Share one
	// budget among a client's Transports and Proxies: a
	// retrybudget.Budget, Finagle's. Default nil (or a nil
	// *retrybudget.Budget): every failure that may be retried is.
	RetryBudget balancer.Budget

	// Hedging, if set, hedges the requests safe to send twice at once
	// as net/http decides replay (GET, HEAD, OPTIONS, TRACE, or an
	// Idempotency-Key or X-Idempotency-Key header; a body only with
	// Request.GetBody; no Upgrade): an attempt without response headers
	// within its delay is joined by one on another peer, the first
	// response that is not a failure is returned, and the others are
	// cancelled and reported Abandoned (see balancer.Attempts). Other
	// requests, RetryNonIdempotent's included, are never hedged. Share
	// one Hedging among a client's Transports. Default nil: no hedging.
	Hedging *balancer.Hedging

	once    sync.Once
	base    http.RoundTripper
	badConf error // a negative timeout, returned by every RoundTrip
	load    loadReader
}

// BadLoadReports returns how many load reports from the peers the
// Transport has ignored as malformed or hostile (see loadreport.Parse).
func (t *Transport) BadLoadReports() uint64 { return t.load.bad.Load() }

var _ http.RoundTripper = (*Transport)(nil)

// RoundTripError is what Transport.RoundTrip returns when no attempt of a
// request got a response it could pass on.
type RoundTripError struct {
	Method, URL string
	// Attempts holds each attempt's error, in order, each naming its peer.
	Attempts []error
	// Err is why no further attempt was made: Pick's error
	// (balancer.ErrNoLivePeer, ErrTriesExhausted, ErrNoPeers), the
	// retry budget's refusal (balancer.ErrRetryBudget), the request's
	// context error, a failure of Request.GetBody, or why the
	// request may not be retried (ErrNotIdempotent,
	// ErrBodyNotRewindable).
	Err error
}

func (e *RoundTripError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "balancerhttp: %s %s: ", e.Method, e.URL)
	if e.Err != nil {
		b.WriteString(e.Err.Error())
		if len(e.Attempts) > 0 {
			b.WriteString(" after ")
		}
	}
	if n := len(e.Attempts); n > 0 {
		fmt.Fprintf(&b, "%d attempt", n)
		if n > 1 {
			b.WriteByte('s')
		}
		for i, a := range e.Attempts {
			if i == 0 {
				b.WriteString(": ")
			} else {
				b.WriteString("; ")
			}
			b.WriteString(a.Error())
		}
	}
	return b.String()
}

// Unwrap returns Err and the attempts' errors, for errors.Is and errors.As.
func (e *RoundTripError) Unwrap() []error {
	if e.Err == nil {
		return e.Attempts
	}
	return append([]error{e.Err}, e.Attempts...)
}

// StatusError is an attempt whose response had a failure status.
type StatusError struct {
	Peer       string // the peer's address
	StatusCode int
	Status     string // as the response gave it, "503 Service Unavailable"
}

func (e *StatusError) Error() string { return e.Peer + ": " + e.Status }

// peerError is an attempt's transport error, naming the peer.
type peerError struct {
	peer string
	err  error
}

func (e *peerError) Error() string { return e.peer + ": " + e.err.Error() }
func (e *peerError) Unwrap() error { return e.err }

func (t *Transport) init() {
	t.badConf = timeouts{t.ConnectTimeout, t.ReadTimeout}.check("Transport")
	t.base = t.Base
	if t.base == nil {
		t.base = defaultTransport()
	}
}

// RoundTrip makes the attempts of req, each on the peer Picker gives,
// until one gets a response that is not a failure, the request may not be
// retried, or no peer is left (see Transport).
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.Picker == nil {
		closeRequestBody(req.Body)
		return nil, ErrNoPicker
	}
	t.once.Do(t.init)
	if t.badConf != nil {
		closeRequestBody(req.Body)
		return nil, t.badConf
	}
	hasBody := req.Body != nil && req.Body != http.NoBody
	replayable := !hasBody || req.GetBody != nil
	safe := t.RetryNonIdempotent || retrySafe(req)
	noReplay := ""
	if !replayable {
		noReplay = "no Request.GetBody"
	}
	to := timeouts{t.ConnectTimeout, t.ReadTimeout}
	var br balancer.Request
	if t.Key != nil {
		br.SetKey(t.Key(req))
	}
	if t.Hedging != nil && hedgeable(req) {
		return t.roundTripHedged(req, &br)
	}
	var (
		errs  []error        // each attempt's
		resp  *http.Response // the response passed on
		why   error          // why an attempt that ended the loop got no response
		drain *http.Response // a failure's response, dropped once reported
		tries int
	)
	body := req.Body
	loop := balancer.Attempts{Picker: t.Picker, Request: &br, Budget: t.RetryBudget, MaxTries: t.MaxTries, GaveUp: func() error { return gaveUp(req) }}
	stopped := loop.Run(req.Context(), func(_ context.Context, peer *balancer.Peer) balancer.Verdict {
		// The context is req's, which each attempt's request keeps.
		dropBody(drain)
		drain = nil
		tries++
		if tries > 1 && hasBody {
			// Rewound only once the budget and the picker allow the
			// retry; a failed rewind gives the pick back.
			b, err := req.GetBody()
			if err != nil {
				why = fmt.Errorf("Request.GetBody: %w", err)
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true}}
			}
			body = b
		}

		out := *req // a shallow copy per attempt: only URL, Host and Body differ
		u := *req.URL
		u.Host = peer.Addr()
		out.URL = &u
		if out.Host == "" {
			out.Host = req.URL.Host
		}
		out.Body = body
		sent, timer := to.begin(&out)
		start := time.Now()
		// If Base panics, the attempt's timer stops here and the loop
		// reports it Abandoned while the panic goes on.
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
			errs = append(errs, &peerError{peer.Addr(), err})
			if why = gaveUp(req); why != nil {
				// The caller gave up, not the peer: the time waited is
				// a lower bound on its latency.
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			if errors.Is(err, ErrBadRoundTripper) {
				// Not the peer's doing, and the next peer's attempt
				// would go through the same RoundTripper.
				why = ErrBadRoundTripper
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			why = whyNotRetried(req, err, safe, noReplay)
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency}, Retry: why == nil}
		}
		failed := slices.Contains(t.failureStatuses(), r.StatusCode)
		if failed && replayable && safe {
			// Reported as the attempt ends, before the next Pick, as
			// nginx frees the peer before it asks for the next one;
			// its body dropped after.
			r.Body = timer.wrap(r.Body) // its Close releases the timer
			drain = r
			errs = append(errs, &StatusError{Peer: peer.Addr(), StatusCode: r.StatusCode, Status: r.Status})
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency, Load: t.load.read(r.Header, nil)}, Retry: true}
		}
		resp = r
		if r.StatusCode == http.StatusSwitchingProtocols {
			// The upgraded connection lives on outside the attempt, and
			// its body must stay an io.ReadWriteCloser.
			timer.finish()
			return balancer.Verdict{Outcome: balancer.Outcome{Latency: latency, Load: t.load.read(r.Header, nil)}}
		}
		rb := &reportingBody{rc: r.Body, req: req, resp: r, load: &t.load, picker: t.Picker, peer: peer, start: start, failed: failed, timer: timer}
		rb.hdrLoad = t.load.read(r.Header, &rb.ldst)
		r.Body = rb
		return balancer.Verdict{Reported: true} // when the body is read or closed
	})
	dropBody(drain)
	if resp != nil {
		return resp, nil
	}
	if stopped != nil {
		why = stopped
	}
	if tries == 0 {
		closeRequestBody(body)
	}
	return nil, &RoundTripError{Method: req.Method, URL: req.URL.String(), Attempts: errs, Err: why}
}

// errRequestCanceled is why a request stops when its Cancel channel
// closed before its context ended.
var errRequestCanceled = errors.New("request canceled")

// gaveUp returns the reason the caller of req gave up on it, or nil: its
// context ended, or its (deprecated) Cancel channel closed. http.Client's
// Timeout does both for a RoundTripper outside net/http, from two timers:
// the channel may close first, failing the attempt while the context is
// still live.
func gaveUp(req *http.Request) error {
	if err := req.Context().Err(); err != nil {
		return err
	}
	if req.Cancel != nil { //nolint:staticcheck // http.Client still sets it
		select {
		case <-req.Cancel: //nolint:staticcheck
			return errRequestCanceled
		default:
		}
	}
	return nil
}

func (t *Transport) failureStatuses() []int {
	if t.FailureStatuses == nil {
		return DefaultFailureStatuses
	}
	return t.FailureStatuses
}

// closeRequestBody closes a body that no attempt will send: a RoundTripper
// closes the request's body, even on errors.
func closeRequestBody(b io.ReadCloser) {
	if b != nil {
		_ = b.Close()
	}
}

// defaultTransport is the Base of a Transport and the Transport of a Proxy
// left unset: a clone of http.DefaultTransport keeping up to 256 idle
// connections per backend, so that busy traffic reuses its connections as
// nginx's keepalive does, and waiting at most 60 s for a response's
// headers, nginx's proxy_read_timeout.
func defaultTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0 // no total bound; the per-backend one applies
	t.MaxIdleConnsPerHost = 256
	t.ResponseHeaderTimeout = 60 * time.Second
	return t
}
