package balancerhttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/probequeue"
	"github.com/lbgo/balancer/loadreport"
)

// Prober defaults, as NewProber applies them.
const (
	// DefaultProbeTimeout bounds each probe, connecting included: a
	// server that has not answered a probe, which does no work, in
	// 250 ms is stalled or far, and an answer later than that is stale
	// against Prequal's pool of answers a second old at most.
	DefaultProbeTimeout = probequeue.DefaultTimeout
	// DefaultProbeWorkers is the number of probes in flight at once. A
	// probe holds its worker for its round trip, so 16 workers keep
	// Prequal's default cap of 10,000 probes a second going at round
	// trips up to 1.6 ms (a LAN), and 1,000 a second at 16 ms (another
	// zone).
	DefaultProbeWorkers = probequeue.DefaultWorkers
	// DefaultProbeQueue is the number of probes waiting for a worker
	// beyond those; Probe drops the rest. With the workers it holds
	// Prequal's default burst, a hundredth of a second's probes (100),
	// whole.
	DefaultProbeQueue = probequeue.DefaultSize
)

// Prober is the HTTP balancer.Prober: each probe of a peer is a GET of
// http://<peer address><path> (path loadreport's probe path by default)
// whose 200 answer carries the server's requests in flight and latency
// estimate, as loadreport's Middleware writes it. Give it to the
// probe-driven picker (balancer.PrequalSettings.Prober, which then owns
// and closes it) and use that picker in a Transport or a Proxy.
//
// Probe never blocks and allocates nothing: it queues the probe (at most
// WithProbeQueue of them wait) for one of WithProbeWorkers workers, and
// drops it, counted, when the queue is full or the Prober closed. Each
// probe is bounded by WithProbeTimeout; its round trip, from sending the
// request (a new connection's dial included) to the body read, is
// measured on WithProbeClock's clock. A non-200 status, a body
// loadreport.ParseProbe refuses, a transport error or a timeout is
// answered Failed, as is a transport that breaks http.RoundTripper's
// contract or panics (ErrBadRoundTripper); Stats counts the answers and
// keeps the latest failure's cause, and each Failed answer carries its own
// (balancer.ProbeAnswer.Err), which Prequal reports with
// balancer.EventPeerBlind once a peer's probes keep failing. The probes
// go through their own http.RoundTripper (WithProbeTransport), by default
// one kept apart from the requests' so that a probe never waits behind
// them.
//
// Prequal keeps a peer that fails fast out of its pool only when its
// failures count as failures: over a Transport or Proxy, only the
// statuses in FailureStatuses (502, 503 and 504 by default) do, so a
// server answering 500 at once looks the fastest and takes most requests
// unless 500 is listed there.
//
// Close stops it. The zero value drops every probe, uncounted; use
// NewProber. A Prober is safe for concurrent use.
type Prober struct {
	// Immutable after NewProber; the queue guards its own state.
	q      *probequeue.Queue
	rt     http.RoundTripper
	own    bool   // rt is the default one, whose idle connections Close closes
	scheme string // "http" or "https"
	path   string // starts with "/"
}

var _ balancer.Prober = (*Prober)(nil)

// ProberOption configures NewProber.
type ProberOption func(*proberSettings)

// proberSettings are NewProber's options, checked once all are applied.
type proberSettings struct {
	path, scheme   string
	rt             http.RoundTripper
	rtSet          bool
	timeout        time.Duration
	workers, queue int
	now            func() time.Time
	nowSet         bool
}

// WithProbePath sets the path each probe gets, which must start with "/"
// and may carry a query; NewProber refuses one holding a '#', a space, a
// control character or a malformed %-escape, which no probe could reach
// (loadreport.WithProbePath refuses the same). Default:
// loadreport.DefaultProbePath.
func WithProbePath(path string) ProberOption {
	return func(s *proberSettings) { s.path = path }
}

// WithProbeScheme sets the probes' scheme, "http" or "https". Default
// "http". For https, give a transport whose TLS configuration trusts the
// servers (WithProbeTransport).
func WithProbeScheme(scheme string) ProberOption {
	return func(s *proberSettings) { s.scheme = scheme }
}

// WithProbeTransport sets the http.RoundTripper the probes go through,
// not nil. A probe it answers against http.RoundTripper's contract, or
// panicking, is answered Failed with ErrBadRoundTripper. Default: a clone of http.DefaultTransport keeping up to 4 idle
// connections per peer and 256 in all, which Close closes.
func WithProbeTransport(rt http.RoundTripper) ProberOption {
	return func(s *proberSettings) { s.rt, s.rtSet = rt, true }
}

// WithProbeTimeout bounds each probe, more than 0 and at most
// balancer.MaxProbeLatency. Default DefaultProbeTimeout.
func WithProbeTimeout(d time.Duration) ProberOption {
	return func(s *proberSettings) { s.timeout = d }
}

// WithProbeWorkers sets how many probes are in flight at once, in [1,
// 1024]. Default DefaultProbeWorkers.
func WithProbeWorkers(n int) ProberOption {
	return func(s *proberSettings) { s.workers = n }
}

// WithProbeQueue sets how many probes may wait for a worker, in [0,
// 65536]. Default DefaultProbeQueue.
func WithProbeQueue(n int) ProberOption {
	return func(s *proberSettings) { s.queue = n }
}

// WithProbeClock sets the clock the probes' round trips are measured on,
// not nil. Default time.Now.
func WithProbeClock(now func() time.Time) ProberOption {
	return func(s *proberSettings) { s.now, s.nowSet = now, true }
}

// NewProber returns a Prober whose workers run until Close. It accepts
// WithProbePath, WithProbeScheme, WithProbeTransport, WithProbeTimeout,
// WithProbeWorkers, WithProbeQueue and WithProbeClock; a value out of
// range is refused with an error wrapping balancer.ErrInvalidConfig that
// names the option and the value.
func NewProber(opts ...ProberOption) (*Prober, error) {
	s := proberSettings{
		path: loadreport.DefaultProbePath, scheme: "http", timeout: DefaultProbeTimeout,
		workers: DefaultProbeWorkers, queue: DefaultProbeQueue, now: time.Now,
	}
	for _, o := range opts {
		if o != nil {
			o(&s)
		}
	}
	bad := func(option string, v any, why string) error {
		return fmt.Errorf("%w: balancerhttp: %s(%v): %s", balancer.ErrInvalidConfig, option, v, why)
	}
	switch {
	case badProbePath(s.path) != "":
		return nil, bad("WithProbePath", fmt.Sprintf("%q", s.path), badProbePath(s.path))
	case s.scheme != "http" && s.scheme != "https":
		return nil, bad("WithProbeScheme", fmt.Sprintf("%q", s.scheme), `want "http" or "https"`)
	case s.rtSet && s.rt == nil:
		return nil, bad("WithProbeTransport", "nil", "no transport")
	case s.timeout <= 0 || s.timeout > balancer.MaxProbeLatency:
		return nil, bad("WithProbeTimeout", s.timeout, fmt.Sprintf("out of (0, %v]", balancer.MaxProbeLatency))
	case s.workers < 1 || s.workers > probequeue.MaxWorkers:
		return nil, bad("WithProbeWorkers", s.workers, fmt.Sprintf("out of [1, %d]", probequeue.MaxWorkers))
	case s.queue < 0 || s.queue > probequeue.MaxSize:
		return nil, bad("WithProbeQueue", s.queue, fmt.Sprintf("out of [0, %d]", probequeue.MaxSize))
	case s.nowSet && s.now == nil:
		return nil, bad("WithProbeClock", "nil", "no clock")
	}
	p := &Prober{rt: s.rt, scheme: s.scheme, path: s.path}
	if p.rt == nil {
		p.rt, p.own = probeTransport(), true
	}
	q, err := probequeue.New(probequeue.Config{
		Workers: s.workers, Size: s.queue, Timeout: s.timeout, Now: s.now, Probe: p.probe,
	})
	if err != nil {
		return nil, err // cannot happen: every value was checked above
	}
	p.q = q
	return p, nil
}

// badProbePath says why path cannot be a probe's path and query, or ""
// when it can: it must start with "/" (a request's path), hold no '#'
// (a fragment is never sent), no space or control character (which
// url.Parse refuses or a server cannot match: loadreport.WithProbePath
// refuses them in the path it answers on) and only well-formed %-escapes
// (url.Parse refuses the others, so every probe would fail).
func badProbePath(path string) string {
	if !strings.HasPrefix(path, "/") {
		return `does not start with "/"`
	}
	for i := 0; i < len(path); i++ {
		if c := path[i]; c == '#' || c == ' ' || c < 0x20 || c == 0x7f {
			return fmt.Sprintf("holds %q at byte %d", c, i)
		}
	}
	if _, err := url.ParseRequestURI(path); err != nil {
		return "not a request path: " + err.Error()
	}
	return ""
}

// probeTransport is the default transport of the probes: apart from the
// requests', keeping few idle connections, since each worker sends one
// probe at a time and a fleet may have thousands of peers.
func probeTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 4
	return t
}

// Probe queues a probe of peer whose answer goes to to (see Prober). It
// never blocks and allocates nothing; a nil peer or to is dropped.
func (p *Prober) Probe(peer *balancer.Peer, to balancer.ProbeReceiver) {
	if p.q != nil {
		p.q.Put(peer, to)
	}
}

// maxProbeBody bounds the probe answer read.
const maxProbeBody = loadreport.MaxProbeLen

// probe sends one probe to peer and reads its answer.
func (p *Prober) probe(ctx context.Context, peer *balancer.Peer) (balancer.ProbeAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.scheme+"://"+peer.Addr()+p.path, nil)
	if err != nil {
		return balancer.ProbeAnswer{}, err
	}
	resp, err := recoveredRoundTrip(p.rt, req)
	if err != nil {
		return balancer.ProbeAnswer{}, err
	}
	defer closeBody(resp)
	if resp.StatusCode != http.StatusOK {
		return balancer.ProbeAnswer{}, fmt.Errorf("status %s", resp.Status) // the queue names the peer
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProbeBody+1))
	if err != nil {
		return balancer.ProbeAnswer{}, err
	}
	if len(body) > maxProbeBody {
		return balancer.ProbeAnswer{}, fmt.Errorf("answer longer than %d bytes", maxProbeBody)
	}
	rif, latency, err := loadreport.ParseProbe(body) // within a ProbeAnswer's bounds
	if err != nil {
		return balancer.ProbeAnswer{}, err
	}
	return balancer.ProbeAnswer{InFlight: rif, Latency: latency}, nil
}

// ProberStats are a Prober's counters. Every Probe ends in exactly one of
// Answered, Failed and Dropped.
type ProberStats struct {
	// Sent counts the probes sent to a server.
	Sent uint64
	// Answered counts the answers carrying the server's load; Failed the
	// Failed answers (a transport error, a timeout, a status other than
	// 200, a body that does not parse or holds absurd values).
	Answered, Failed uint64
	// Dropped counts the probes never answered: the queue was full, the
	// Prober was closed, or Close cut them short.
	Dropped uint64
	// Refused counts the answers the picker refused (a peer removed
	// since the probe, see balancer.ProbeReceiver); they count in
	// Answered or Failed too.
	Refused uint64
	// LastError is the latest Failed answer's cause, naming the peer:
	// "probe of <addr>: " and the transport's error, the status ("404
	// Not Found") or ParseProbe's error naming the value it refused. It
	// wraps that error (errors.Is finds context.DeadlineExceeded or
	// syscall.ECONNREFUSED); nil until a probe fails, and kept through
	// the answers that follow.
	LastError error
}

// Stats returns the Prober's counters.
func (p *Prober) Stats() ProberStats {
	if p.q == nil {
		return ProberStats{}
	}
	s := p.q.Stats()
	return ProberStats{Sent: s.Sent, Answered: s.Answered, Failed: s.Failed, Dropped: s.Dropped, Refused: s.Refused,
		LastError: s.LastError}
}

// Close stops the workers, cutting the probes under way short (they are
// dropped, not answered), drops the queued ones, closes the default
// transport's idle connections, and returns once no probe is left
// running: no answer comes after it. Probe after Close drops. Close is
// idempotent and always returns nil.
func (p *Prober) Close() error {
	if p.q == nil {
		return nil
	}
	p.q.Close()
	if p.own {
		p.rt.(*http.Transport).CloseIdleConnections()
	}
	return nil
}
