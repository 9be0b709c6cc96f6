// Package balancerhttp is an HTTP reverse proxy that balances over backends
// with any balancer.Picker, the way nginx's proxy module balances over an
// upstream block.
//
// Each attempt of a request is bracketed by Pick and Done: Done reports how
// long the attempt took and whether it failed, where a failure is a
// transport error (connection refused or reset, a response cut short, a
// per-attempt timeout) or a 5xx status that nginx can be told to treat as one (500, 502, 503, 504; see
// Proxy.IsFailure). A failed attempt of a request that may be retried goes
// to the next peer the Picker gives for the same balancer.Request, which
// never gives a peer twice and stops after as many attempts as there are
// peers not marked down: nginx's proxy_next_upstream with
//
//	proxy_next_upstream error timeout http_500 http_502 http_503 http_504;
//
// A request may be retried when resending it is safe, as nginx decides:
// its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE) or it
// carries an Idempotency-Key header, or the failure was a connection that
// could not be opened, so the backend never saw the request; and its body,
// if any, could be kept for the replay (see Proxy.MaxReplayBody). A failed
// attempt not retried says why, in the Transport's error and the Proxy's
// log line: ErrNotIdempotent, ErrBodyNotRewindable,
// balancer.ErrTriesExhausted, or balancer.ErrRetryBudget when the
// RetryBudget refused the retry. When no peer is left, the client gets what
// nginx sends: the last backend's response if there was one and the tries
// ran out, and 502 Bad Gateway if every attempt failed without a usable
// response or the Picker has no live peer. An attempt whose client went
// away (the request's context ended) is reported Abandoned, not as the
// backend's failure, and is not retried; IPHash hashes the client's
// address, nginx's $remote_addr.
//
// A client's deadline is thus never a backend's failure. The timeouts that
// are, nginx's proxy_connect_timeout and proxy_read_timeout, are the
// ConnectTimeout and ReadTimeout fields of Proxy and Transport, per attempt
// (ErrConnectTimeout, ErrReadTimeout), besides those of Proxy.Transport
// or Transport.Base (the default one waits 60 s for a response's headers).
//
// Done also hands the picker the backend's load report, as
// balancer.Outcome.Load: the endpoint-load-metrics header (TEXT, JSON or
// BIN) or endpoint-load-metrics-bin header of the response, or of its
// trailer once the body is read to its end (the trailer's wins), read by
// loadreport.FromHeader. A report it rejects (malformed or hostile) is
// ignored, counted by BadLoadReports, and never fails the request; with
// no report Load is nil and nothing is allocated for it. ReportedWRR
// weighs the reports, and the pickers given balancer.WithReportedLoad
// weigh their requests in flight.
//
// Prober asks the backends for their load out of band, for a picker that
// balances by probes (balancer.Prequal, through its PrequalSettings): a
// GET on loadreport's probe path, which loadreport's Middleware answers,
// sent asynchronously, bounded in number and time; see Prober.
//
// Transport brings the same rules to an http.Client, with one difference
// of default: its failure statuses (DefaultFailureStatuses) are the gateway
// errors 502, 503 and 504, without the 500 the Proxy retries, because a
// client usually wants its own service's 500 back rather than retried; set
// Transport.FailureStatuses to change it.
package balancerhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"sync"
	"time"

	"github.com/lbgo/balancer"
)

// DefaultMaxReplayBody is the largest request body Proxy keeps for a
// retry: 1 MiB. nginx keeps every body (in memory up to
// client_body_buffer_size, on disk beyond); a proxy without a disk buffer
// needs a bound.
const DefaultMaxReplayBody = 1 << 20

// Proxy is an http.Handler that forwards each request to a backend chosen
// by Picker, retrying the next backend as nginx's proxy_next_upstream does
// (see the package doc). Backends are the peers' addresses, host:port, and
// are spoken to in plain HTTP; the request keeps its Host header and gets
// X-Forwarded-For, X-Forwarded-Host and X-Forwarded-Proto.
//
// Set Picker before the first request; the other fields have defaults. The
// fields must not be changed once the Proxy serves requests; the peers
// change through the Picker's own update methods, at any time.
//
// The zero value is not usable until Picker is set. A Proxy is safe for
// concurrent use by multiple goroutines.
type Proxy struct {
	// Picker chooses the backend of each attempt and learns each
	// attempt's outcome. Required.
	Picker balancer.Picker

	// Transport makes each attempt. Default: a clone of
	// http.DefaultTransport keeping up to 256 idle connections per
	// backend, so that a busy proxy reuses its connections as nginx's
	// keepalive does, and waiting at most 60 s for a response's headers,
	// nginx's proxy_read_timeout; a timeout is a failure. One breaking
	// http.RoundTripper's contract, or panicking, is handled as
	// ErrBadRoundTripper says.
	Transport http.RoundTripper

	// IsFailure reports whether a response counts as a failure of the
	// backend, reported to the Picker as failed and retried if the
	// request may be. Default: DefaultIsFailure.
	IsFailure func(*http.Response) bool

	// MaxTries bounds the attempts of one request (nginx's
	// proxy_next_upstream_tries). Default 0: only the Picker's bound, one
	// attempt per peer that is not down. Negative is refused: every
	// request is answered 502, the error (matching
	// balancer.ErrInvalidConfig) logged.
	MaxTries int

	// ConnectTimeout and ReadTimeout are the per-attempt timeouts,
	// nginx's proxy_connect_timeout and proxy_read_timeout, as
	// Transport's fields of the same names: an attempt past one is a
	// failure of the backend. Default 0: only Transport's own. Negative:
	// every request is answered 502, and the log names the field.
	ConnectTimeout, ReadTimeout time.Duration

	// MaxReplayBody is the largest request body kept so that the request
	// can be retried; a request with a larger body gets one attempt.
	// Default 0: DefaultMaxReplayBody. Negative: no body is kept.
	MaxReplayBody int64

	// ErrorLog receives one line per request that ends in 502. Default:
	// the log package's standard logger.
	ErrorLog *log.Logger

	// RetryBudget, if set, bounds the retries as Transport.RetryBudget
	// does; a request whose retry it refuses gets the last backend's
	// response, as when the tries run out, or 502 when there was none.
	// Default nil: every failure that may be retried is.
	RetryBudget balancer.Budget

	// Key, if set, gives each request's key for the keyed pickers (Hash,
	// ConsistentHash), as Transport.Key does: nginx's hash key, such as
	// $http_x_user. It sees the request as it goes to the backend.
	// Default: no key (IPHash still hashes the client's address).
	Key func(*http.Request) string

	once    sync.Once
	rp      *httputil.ReverseProxy
	tr      http.RoundTripper
	badConf error // a negative timeout: every request gets 502 and a log line
	load    loadReader
}

// BadLoadReports returns how many load reports from the backends the
// Proxy has ignored as malformed or hostile (see loadreport.Parse).
func (p *Proxy) BadLoadReports() uint64 { return p.load.bad.Load() }

// DefaultIsFailure reports whether the status is one nginx's
// proxy_next_upstream can treat as a failure: 500, 502, 503 or 504.
func DefaultIsFailure(resp *http.Response) bool {
	switch resp.StatusCode {
	case http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

// ServeHTTP forwards r and writes the chosen backend's response to w, or
// 502 Bad Gateway when no backend gave one.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.once.Do(p.init)
	if p.badConf != nil {
		p.fail(w, r, p.badConf)
		return
	}
	p.rp.ServeHTTP(w, r)
}

func (p *Proxy) init() {
	p.badConf = timeouts{p.ConnectTimeout, p.ReadTimeout}.check("Proxy")
	p.tr = p.Transport
	if p.tr == nil {
		p.tr = defaultTransport()
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetXForwarded()
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = "" // set per attempt by the chosen peer
		},
		Transport:    (*attempts)(p),
		ErrorHandler: p.fail,
		ErrorLog:     p.ErrorLog,
	}
}

// fail answers a request that got no response from any backend.
func (p *Proxy) fail(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away: nobody reads the answer. nginx logs 499.
		return
	}
	logger := p.ErrorLog
	if logger == nil {
		logger = log.Default()
	}
	if rt := (*RoundTripError)(nil); errors.As(err, &rt) {
		logger.Print(rt) // names the request
	} else {
		logger.Printf("balancerhttp: %s %s: %v", r.Method, r.URL.RequestURI(), err)
	}
	http.Error(w, http.StatusText(http.StatusBadGateway), http.StatusBadGateway)
}

// attempts is the RoundTripper that the ReverseProxy calls once per
// request; it makes the attempts.
type attempts Proxy

// RoundTrip makes the attempts of one request, each on the peer the Picker
// gives, until one gets a response that is not a failure, the request may
// not be retried, or no peer is left.
func (a *attempts) RoundTrip(out *http.Request) (*http.Response, error) {
	p := (*Proxy)(a)
	body, noReplay, err := p.keepBody(out)
	if err != nil {
		return nil, err
	}
	replayable := noReplay == ""
	safe := retrySafe(out)
	to := timeouts{p.ConnectTimeout, p.ReadTimeout}
	var br balancer.Request
	if ap, err := netip.ParseAddrPort(out.RemoteAddr); err == nil {
		br.SetClientAddr(ap.Addr()) // IPHash's key: nginx's $remote_addr
	}
	if p.Key != nil {
		br.SetKey(p.Key(out))
	}
	var (
		errs []error        // each attempt's
		resp *http.Response // the response passed on
		why  error          // why an attempt that ended the loop got no response
		held *http.Response // the last failed response, passed on if the tries run out
	)
	loop := balancer.Attempts{Picker: p.Picker, Request: &br, Budget: p.RetryBudget, MaxTries: p.MaxTries, GaveUp: func() error { return gaveUp(out) }}
	stopped := loop.Run(out.Context(), func(_ context.Context, peer *balancer.Peer) balancer.Verdict {
		// The context is out's, which each attempt's request keeps.
		dropBody(held)
		held = nil

		req := *out // a shallow copy per attempt: only URL and Body differ
		u := *out.URL
		u.Host = peer.Addr()
		req.URL = &u
		req.Body = body()
		if replayable && req.Body != nil && req.Body != http.NoBody {
			req.GetBody = func() (io.ReadCloser, error) { return body(), nil }
		}
		sent, timer := to.begin(&req)
		start := time.Now()
		// If the Transport panics, the attempt's timer stops here and
		// the loop reports it Abandoned while the panic goes on.
		r, err := attemptRoundTrip(p.tr, sent, timer.finish)
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
			if why = gaveUp(out); why != nil {
				// The client gave up, not the backend: not a failure,
				// and the time waited is only a lower bound on the
				// backend's latency.
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			if errors.Is(err, ErrBadRoundTripper) {
				// Not the peer's doing, and the next peer's attempt
				// would go through the same RoundTripper.
				why = ErrBadRoundTripper
				return balancer.Verdict{Outcome: balancer.Outcome{Abandoned: true, Latency: latency}}
			}
			why = whyNotRetried(out, err, safe, noReplay)
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency}, Retry: why == nil}
		}
		failed := p.isFailure(r)
		if failed && replayable && safe {
			// Reported as the attempt ends, before the next Pick, as
			// nginx frees the peer before it asks for the next; kept
			// in case none is left.
			r.Body = timer.wrap(r.Body) // it may yet be passed on
			held = r
			errs = append(errs, &StatusError{Peer: peer.Addr(), StatusCode: r.StatusCode, Status: r.Status})
			return balancer.Verdict{Outcome: balancer.Outcome{Failed: true, Latency: latency, Load: p.load.read(r.Header, nil)}, Retry: true}
		}
		resp = r
		if r.StatusCode == http.StatusSwitchingProtocols {
			// An upgraded connection (WebSocket, say) lives on outside
			// the attempt; the ReverseProxy needs its body unwrapped.
			timer.finish()
			return balancer.Verdict{Outcome: balancer.Outcome{Latency: latency, Load: p.load.read(r.Header, nil)}}
		}
		rb := &reportingBody{rc: r.Body, req: out, resp: r, load: &p.load, picker: p.Picker, peer: peer, start: start, failed: failed, timer: timer}
		rb.hdrLoad = p.load.read(r.Header, &rb.ldst)
		r.Body = rb
		return balancer.Verdict{Reported: true} // when the body is read or closed
	})
	switch {
	case resp != nil:
		return resp, nil
	case held != nil && (errors.Is(stopped, balancer.ErrTriesExhausted) || errors.Is(stopped, balancer.ErrRetryBudget)):
		return held, nil // nginx passes the last response on
	case stopped != nil:
		why = stopped // the client is gone, or no peer or retry is left
	}
	dropBody(held)
	return nil, &RoundTripError{Method: out.Method, URL: out.URL.RequestURI(), Attempts: errs, Err: why}
}

func (p *Proxy) isFailure(resp *http.Response) bool {
	if p.IsFailure != nil {
		return p.IsFailure(resp)
	}
	return DefaultIsFailure(resp)
}

// keepBody returns a function that gives the body of each attempt, and
// why the request cannot be sent more than once ("" if it can). A body up
// to MaxReplayBody is read whole first, as nginx reads it before it picks
// a backend; a larger one is streamed to the first attempt only.
func (p *Proxy) keepBody(out *http.Request) (func() io.ReadCloser, string, error) {
	if out.Body == nil || out.Body == http.NoBody {
		return func() io.ReadCloser { return out.Body }, "", nil
	}
	limit := p.MaxReplayBody
	if limit == 0 {
		limit = DefaultMaxReplayBody
	}
	over := func() string { return fmt.Sprintf("over MaxReplayBody %d", limit) } // only when it is the reason
	if limit < 0 {
		return func() io.ReadCloser { return out.Body }, fmt.Sprintf("MaxReplayBody %d", limit), nil
	}
	if out.ContentLength > limit {
		return func() io.ReadCloser { return out.Body }, over(), nil
	}
	var buf bytes.Buffer
	if out.ContentLength > 0 {
		buf.Grow(int(out.ContentLength))
	}
	n, err := io.Copy(&buf, io.LimitReader(out.Body, limit+1))
	if err != nil {
		return nil, "", fmt.Errorf("reading the request body: %w", err)
	}
	if n > limit {
		// Chunked and larger than the limit: send what was read, then
		// the rest, once.
		rest := struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(buf.Bytes()), out.Body), out.Body}
		return func() io.ReadCloser { return rest }, over(), nil
	}
	_ = out.Body.Close()
	b := buf.Bytes()
	// Sent with its length from now on, as nginx sends a body it has read.
	out.ContentLength, out.TransferEncoding = int64(len(b)), nil
	return func() io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }, "", nil
}

// dropBody closes the body of a failure's response that is not passed
// on, unread: the failure was decided on the status, and a peer that
// stalls its body must not hold the request back from the next peer, nor
// its end; nginx, too, closes a failed upstream's connection and goes on.
func dropBody(resp *http.Response) {
	if resp != nil {
		_ = resp.Body.Close()
	}
}

func closeBody(resp *http.Response) {
	if resp != nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // lets the connection be reused
		_ = resp.Body.Close()
	}
}

// reportingBody reports the attempt to the Picker when the response has
// been read or abandoned: the attempt is in flight until then, and its
// latency is nginx's $upstream_response_time, headers and body. An error
// reading the body is a failure, unless the request's context has ended:
// then the client went away, and the attempt, unless read to its end, is
// Abandoned. The outcome carries the server's load report: the
// response's trailer's if it was read to its end and the trailer has one
// that loadreport accepts, else its header's.
type reportingBody struct {
	rc   io.ReadCloser
	req  *http.Request  // the attempt's request, whose caller may give up
	resp *http.Response // its trailer, read once the body is at EOF
	load *loadReader
	// ldst is Outcome.Load's storage, so a report costs no allocation of
	// its own; hdrLoad is &ldst if the header carried a report (read
	// before the response goes to the caller, who may change the
	// header), else nil.
	ldst    balancer.ServerLoad
	hdrLoad *balancer.ServerLoad
	picker  balancer.Picker
	peer    *balancer.Peer
	start   time.Time
	failed  bool
	timer   *attemptTimer // the attempt's ReadTimeout; nil if none
	release func()        // a hedged request's context's cancel, once reported; nil if none
	once    sync.Once
}

func (b *reportingBody) Read(buf []byte) (int, error) {
	b.timer.readStart()
	n, err := b.rc.Read(buf)
	if terr := b.timer.readEnd(); terr != nil && err != io.EOF {
		err = &peerError{b.peer.Addr(), terr}
	}
	switch {
	case err == io.EOF:
		b.report(true, false)
	case err != nil:
		b.report(false, true)
	}
	return n, err
}

func (b *reportingBody) Close() error {
	err := b.rc.Close()
	b.report(false, false)
	return err
}

// report reports the attempt, once. A response read to its end is a
// success unless its status is a failure. One cut short (a read error, or
// closed before its end) by a client that has gone is Abandoned: the time
// so far is a lower bound. Otherwise a read error is the backend's
// failure, and a body closed early by a client still there (it read what
// it wanted) a success.
func (b *reportingBody) report(eof, readErr bool) {
	b.once.Do(func() {
		o := balancer.Outcome{Failed: b.failed, Latency: time.Since(b.start)}
		o.Load = b.hdrLoad
		if eof {
			// The trailer is complete only at EOF.
			if l := b.load.read(b.resp.Trailer, &b.ldst); l != nil {
				o.Load = l
			}
		}
		switch {
		case b.failed || eof:
		case gaveUp(b.req) != nil:
			// A hedged request's loser was cut short by the winner.
			o.Abandoned = true
			o.Superseded = context.Cause(b.req.Context()) == balancer.ErrSuperseded
		case readErr:
			o.Failed = true
		}
		_ = b.picker.Done(b.peer, o)
		b.timer.finish()
		if b.release != nil {
			b.release()
		}
	})
}
