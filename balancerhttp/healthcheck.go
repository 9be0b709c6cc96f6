package balancerhttp

import (
	"container/heap"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
)

// The HealthChecker's defaults: HAProxy's check (inter 2s, rise 2, fall 3,
// the check's timeout its interval when "timeout check" is unset), on
// nginx Plus's health_check uri, "/".
const (
	DefaultHealthPath     = "/"
	DefaultHealthInterval = 2 * time.Second
	DefaultHealthRise     = 2
	DefaultHealthFall     = 3
	DefaultHealthJitter   = 0.1
)

// The intervals and timeouts NewHealthChecker accepts: below 10 ms the
// checks of one peer would run nearly back to back; above a day, a peer
// would go unchecked for days.
const (
	MinHealthInterval = 10 * time.Millisecond
	MaxHealthInterval = 24 * time.Hour
)

// HealthChecker checks every peer of a Balancer over HTTP at an interval
// and marks down, with SetDown, a peer that fails Fall checks in a row,
// and up again one it marked down that then passes Rise in a row, as
// HAProxy's check and nginx Plus's health_check do. A check is a GET of
// the path on the peer's address, passed by a 2xx or 3xx status within
// the timeout; any other status, an error or the timeout fails it.
// Checks are not traffic: they never Pick or Done, so they count in no
// peer's statistics or failure accounting.
//
// Each peer is checked Interval after its last check ended, times a
// random factor in [1-Jitter, 1+Jitter), its first check at a random
// point of the first interval, so that many checkers do not check one
// peer in step. So a peer that goes bad is down at most T + Fall × (I ×
// (1+Jitter) + T) later, for interval I and timeout T, and one that
// recovers up at most T + Rise × (I × (1+Jitter) + T) later.
//
// The checker reads the Balancer's peers once an interval: a peer added
// is checked from the next read on, one removed is checked no more. A
// peer starts up. The checker brings up only the peers it took down: a
// peer down otherwise (the Down option, an operator's SetDown) is not
// checked while it stays down, and a peer it took down that something
// else brings up (SetDown, an Update with a fresh snapshot peer, which is
// up) is its own again, serving until Fall checks fail again. A Down set
// on a peer the checker holds down (SetDown(p, true), an Update whose
// snapshot peer has the Down option) is not told apart from the
// checker's own: the checker brings the peer up once it passes Rise
// checks; Remove such a peer instead. A peer the checker held down that
// leaves the Balancer and comes back as the same *Peer, still down, is
// the checker's again (nothing else can change a removed peer); one that
// comes back up is a new peer to it.
//
// Close stops the checker and waits for its checks to end. A
// HealthChecker is safe for concurrent use.
type HealthChecker struct {
	b   balancer.Balancer
	cfg healthConfig
	rng *rand.Rand // the loop's alone

	// The loop's state, touched only by the loop goroutine (or a test
	// driving step and apply): the peers by identity, those waiting
	// for their next check by due time, and when the peers are next
	// read.
	peers  map[*balancer.Peer]*peerHealth
	queue  healthQueue
	syncAt time.Time
	launch func(ph *peerHealth) // starts a check; apply gets its result
	// left holds the peers the checker held down when they left the
	// Balancer, to take back if they return down (at most maxLeft).
	left map[*balancer.Peer]struct{}

	results chan healthResult
	stop    chan struct{}
	done    chan struct{} // closed when the loop has ended
	ctx     context.Context
	cancel  context.CancelFunc
	checks  sync.WaitGroup // checks in flight
	close   sync.Once

	// For Stats: the counters, the last failure, and the peers the
	// checker took down, which the loop publishes anew (copy on write)
	// at each change.
	nChecks, nFailed atomic.Uint64
	lastErr          atomic.Pointer[error]
	held             atomic.Pointer[[]*balancer.Peer]
}

// maxLeft bounds HealthChecker.left.
const maxLeft = 1024

// HealthStats counts what a HealthChecker has done.
type HealthStats struct {
	Checks uint64 // checks whose result counted
	Failed uint64 // of which failed
	// Down is how many peers the checker took down are down now: one
	// an operator brings up leaves it at once.
	Down int
	// LastError is the last failed check's error, naming its peer; nil
	// before any check fails.
	LastError error
}

// Stats returns the checker's counters.
func (h *HealthChecker) Stats() HealthStats {
	st := HealthStats{Checks: h.nChecks.Load(), Failed: h.nFailed.Load()}
	if held := h.held.Load(); held != nil {
		for _, p := range *held {
			if p.IsDown() {
				st.Down++
			}
		}
	}
	if e := h.lastErr.Load(); e != nil {
		st.LastError = *e
	}
	return st
}

// healthConfig is what the HealthOptions set.
type healthConfig struct {
	path, scheme string
	interval     time.Duration
	timeout      time.Duration
	rise, fall   int
	jitter       float64
	rt           http.RoundTripper
	src          rand.Source
	onChange     func(p *balancer.Peer, down bool)
	err          error // the first bad option's
	timeoutSet   bool
}

// A HealthOption configures a HealthChecker.
type HealthOption func(*healthConfig)

func (c *healthConfig) bad(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("balancerhttp: NewHealthChecker: "+format+": %w", append(args, balancer.ErrInvalidConfig)...)
	}
}

// HealthPath sets the path checked, which must begin with "/" and form a
// request URL (no control character, no bad escape). Default
// DefaultHealthPath, nginx Plus's "/"; give a cheap endpoint of the
// service's own (many answer "/healthz").
func HealthPath(path string) HealthOption {
	return func(c *healthConfig) {
		if len(path) == 0 || path[0] != '/' {
			c.bad("HealthPath %q does not begin with /", path)
		}
		c.path = path
	}
}

// HealthHTTPS checks over https, verifying the peer's certificate as the
// RoundTripper's TLS configuration says. Default: http.
func HealthHTTPS() HealthOption { return func(c *healthConfig) { c.scheme = "https" } }

// HealthInterval sets the time from the end of one check of a peer to the
// next, before jitter, in [MinHealthInterval, MaxHealthInterval]. Default
// DefaultHealthInterval, HAProxy's inter.
func HealthInterval(d time.Duration) HealthOption {
	return func(c *healthConfig) {
		if d < MinHealthInterval || d > MaxHealthInterval {
			c.bad("HealthInterval %v out of range [%v, %v]", d, MinHealthInterval, MaxHealthInterval)
		}
		c.interval = d
	}
}

// HealthTimeout bounds one check, connection included; a check past it
// fails. Default: the interval, as HAProxy does without "timeout check".
// It may exceed the interval, as HAProxy's "timeout check" may: the next
// check of a peer starts an interval after the last ended, so checks of
// one peer never overlap; it is at most MaxHealthInterval.
func HealthTimeout(d time.Duration) HealthOption {
	return func(c *healthConfig) {
		if d <= 0 || d > MaxHealthInterval {
			c.bad("HealthTimeout %v out of range (0, %v]", d, MaxHealthInterval)
		}
		c.timeout, c.timeoutSet = d, true
	}
}

// HealthRise and HealthFall set the checks in a row that bring a peer up
// (passed) and take it down (failed). Defaults DefaultHealthRise and
// DefaultHealthFall, HAProxy's: one failed check among passing ones does
// not take out a peer that serves (the traffic's own failures take out
// one that does not, at once, by nginx's rules), and a peer that comes
// back must pass twice.
func HealthRise(n int) HealthOption {
	return func(c *healthConfig) {
		if n < 1 || n > 1000 {
			c.bad("HealthRise %d out of range [1, 1000]", n)
		}
		c.rise = n
	}
}

// HealthFall: see HealthRise.
func HealthFall(n int) HealthOption {
	return func(c *healthConfig) {
		if n < 1 || n > 1000 {
			c.bad("HealthFall %d out of range [1, 1000]", n)
		}
		c.fall = n
	}
}

// HealthJitter sets how far each interval may stray from HealthInterval,
// as a fraction of it in [0, 0.5]. Default DefaultHealthJitter.
func HealthJitter(f float64) HealthOption {
	return func(c *healthConfig) {
		if !(f >= 0 && f <= 0.5) {
			c.bad("HealthJitter %v out of range [0, 0.5]", f)
		}
		c.jitter = f
	}
}

// HealthTransport sets the RoundTripper the checks go through. Default: a
// clone of http.DefaultTransport that opens a new connection for each
// check, as HAProxy's checks do, so a peer that stopped listening fails
// its next check. A check whose transport breaks http.RoundTripper's
// contract or panics fails with ErrBadRoundTripper.
func HealthTransport(rt http.RoundTripper) HealthOption {
	return func(c *healthConfig) {
		if rt == nil {
			c.bad("HealthTransport(nil)")
		}
		c.rt = rt
	}
}

// HealthRand sets the source of the jitter; the checker's loop alone
// draws from it. Default: a source seeded at random.
func HealthRand(src rand.Source) HealthOption {
	return func(c *healthConfig) {
		if src == nil {
			c.bad("HealthRand(nil)")
		}
		c.src = src
	}
}

// HealthOnChange makes the checker call f after each SetDown it makes:
// down true when it took p down, false when it brought p up. The calls
// come one at a time, in order, each on a goroutine of its own that the
// checker waits for, so f must not block; f may call Close, which then
// stops the checker without waiting for f.
func HealthOnChange(f func(p *balancer.Peer, down bool)) HealthOption {
	return func(c *healthConfig) {
		if f == nil {
			c.bad("HealthOnChange(nil)")
		}
		c.onChange = f
	}
}

// NewHealthChecker starts checking the peers of b. A nil b, a nil option
// or a bad option value is an error wrapping balancer.ErrInvalidConfig
// that names the value.
func NewHealthChecker(b balancer.Balancer, opts ...HealthOption) (*HealthChecker, error) {
	h, err := newHealthChecker(b, opts)
	if err != nil {
		return nil, err
	}
	h.launch = h.goCheck
	go h.loop()
	return h, nil
}

// newHealthChecker builds a checker whose loop is not running.
func newHealthChecker(b balancer.Balancer, opts []HealthOption) (*HealthChecker, error) {
	if b == nil {
		return nil, fmt.Errorf("balancerhttp: NewHealthChecker: nil Balancer: %w", balancer.ErrInvalidConfig)
	}
	c := healthConfig{path: DefaultHealthPath, scheme: "http", interval: DefaultHealthInterval,
		rise: DefaultHealthRise, fall: DefaultHealthFall, jitter: DefaultHealthJitter}
	for i, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("balancerhttp: NewHealthChecker: opts[%d] is nil: %w", i, balancer.ErrInvalidConfig)
		}
		o(&c)
	}
	if c.err != nil {
		return nil, c.err
	}
	// The path as every check will send it, on a placeholder host.
	if _, err := http.NewRequest(http.MethodGet, c.scheme+"://peer.invalid"+c.path, nil); err != nil {
		return nil, fmt.Errorf("balancerhttp: NewHealthChecker: HealthPath %q forms no request (%v): %w", c.path, err, balancer.ErrInvalidConfig)
	}
	if !c.timeoutSet {
		c.timeout = c.interval
	}
	if c.rt == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.DisableKeepAlives = true
		c.rt = t
	}
	if c.src == nil {
		c.src = rand.NewPCG(rand.Uint64(), rand.Uint64())
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &HealthChecker{
		b: b, cfg: c, rng: rand.New(c.src),
		peers:   make(map[*balancer.Peer]*peerHealth),
		left:    make(map[*balancer.Peer]struct{}),
		results: make(chan healthResult),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		ctx:     ctx, cancel: cancel,
	}, nil
}

// Close stops the checker: no check starts after it, the checks in
// flight are canceled, and Close returns once they and the checker's
// goroutine have ended (not a HealthOnChange call still running, which
// may itself call Close). The peers keep the state the checker left them
// in. Close may be called more than once; it returns nil.
func (h *HealthChecker) Close() error {
	h.close.Do(func() {
		close(h.stop)
		h.cancel()
	})
	<-h.done
	return nil
}

// peerHealth is the checker's record of one peer.
type peerHealth struct {
	p          *balancer.Peer
	due        time.Time // of the next check, while queued
	index      int       // in the queue; -1 when not queued
	oks, fails int       // checks passed, failed, in a row
	marked     bool      // the checker took p down
	checking   bool
	gone       bool // removed from the Balancer
}

// healthResult is one check's outcome.
type healthResult struct {
	ph  *peerHealth
	err error
	at  time.Time
}

// loop runs the checker: it reads the peers and starts the checks due,
// then waits for the next due time or a result.
func (h *HealthChecker) loop() {
	defer close(h.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		now := time.Now()
		next := h.step(now)
		timer.Reset(next.Sub(now))
		select {
		case <-h.stop:
			h.checks.Wait() // the results' senders see stop too
			return
		case r := <-h.results:
			h.apply(r)
		case <-timer.C:
		}
	}
}

// step reads the peers if an interval has passed since the last read and
// starts every check due by now, and returns when it must run next.
func (h *HealthChecker) step(now time.Time) time.Time {
	if !now.Before(h.syncAt) {
		h.sync(now)
		h.syncAt = now.Add(h.cfg.interval)
	}
	for len(h.queue) > 0 && !h.queue[0].due.After(now) {
		ph := heap.Pop(&h.queue).(*peerHealth)
		down := ph.p.IsDown()
		if ph.marked && !down {
			// Brought up by someone else: the checker's again.
			ph.marked, ph.fails, ph.oks = false, 0, 0
			h.publish()
		}
		if down && !ph.marked {
			// Down by someone else: not the checker's to bring up.
			ph.oks, ph.fails = 0, 0
			h.schedule(ph, now)
			continue
		}
		ph.checking = true
		h.launch(ph)
	}
	next := h.syncAt
	if len(h.queue) > 0 && h.queue[0].due.Before(next) {
		next = h.queue[0].due
	}
	return next
}

// sync follows the Balancer's peers: a new one is first checked at a
// random point of the next interval, a removed one is dropped.
// A peer the checker held down when it left that returns still down is
// the checker's again.
func (h *HealthChecker) sync(now time.Time) {
	current := h.b.Peers()
	seen := make(map[*balancer.Peer]bool, len(current))
	changed := false
	for _, p := range current {
		seen[p] = true
		if h.peers[p] == nil {
			ph := &peerHealth{p: p, index: -1}
			if _, ok := h.left[p]; ok {
				delete(h.left, p)
				ph.marked = p.IsDown()
				changed = changed || ph.marked
			}
			h.peers[p] = ph
			ph.due = now.Add(time.Duration(h.rng.Float64() * float64(h.cfg.interval)))
			heap.Push(&h.queue, ph)
		}
	}
	for p, ph := range h.peers {
		if !seen[p] {
			ph.gone = true
			if ph.marked {
				changed = true
				if len(h.left) >= maxLeft {
					for q := range h.left { // forget one, any
						delete(h.left, q)
						break
					}
				}
				h.left[p] = struct{}{}
			}
			if ph.index >= 0 {
				heap.Remove(&h.queue, ph.index)
			}
			delete(h.peers, p)
		}
	}
	if changed {
		h.publish()
	}
}

// publish makes the peers the checker holds down Stats's.
func (h *HealthChecker) publish() {
	var held []*balancer.Peer
	for p, ph := range h.peers {
		if ph.marked {
			held = append(held, p)
		}
	}
	h.held.Store(&held)
}

// schedule queues ph's next check: an interval after now, jittered.
func (h *HealthChecker) schedule(ph *peerHealth, now time.Time) {
	f := 1 + h.cfg.jitter*(2*h.rng.Float64()-1)
	ph.due = now.Add(time.Duration(math.Round(f * float64(h.cfg.interval))))
	heap.Push(&h.queue, ph)
}

// apply counts a check's result and takes its peer down or brings it up
// when the count reaches Fall or Rise.
func (h *HealthChecker) apply(r healthResult) {
	ph := r.ph
	ph.checking = false
	if ph.gone {
		return
	}
	h.nChecks.Add(1)
	if r.err != nil {
		h.nFailed.Add(1)
		err := fmt.Errorf("balancerhttp: health check of %s: %w", ph.p.Addr(), r.err)
		h.lastErr.Store(&err)
		ph.oks, ph.fails = 0, ph.fails+1
		if !ph.marked && ph.fails >= h.cfg.fall && !ph.p.IsDown() {
			h.setDown(ph, true)
		}
	} else {
		ph.oks, ph.fails = ph.oks+1, 0
		if ph.marked && ph.oks >= h.cfg.rise {
			h.setDown(ph, false)
		}
	}
	h.schedule(ph, r.at)
}

func (h *HealthChecker) setDown(ph *peerHealth, down bool) {
	if err := h.b.SetDown(ph.p, down); err != nil {
		return // removed meanwhile: the next read drops it
	}
	ph.marked = down
	h.publish()
	if f := h.cfg.onChange; f != nil {
		// On a goroutine of its own, so that f may call Close, which
		// waits for the loop: the loop stops waiting for f then.
		called := make(chan struct{})
		go func() {
			defer close(called)
			f(ph.p, down)
		}()
		select {
		case <-called:
		case <-h.stop:
		}
	}
}

// goCheck checks ph's peer on a goroutine of its own and sends the result
// to the loop.
func (h *HealthChecker) goCheck(ph *peerHealth) {
	h.checks.Add(1)
	go func() {
		defer h.checks.Done()
		err := h.check(ph.p)
		select {
		case h.results <- healthResult{ph, err, time.Now()}:
		case <-h.stop:
		}
	}()
}

// check makes one check of p: nil if it passed.
func (h *HealthChecker) check(p *balancer.Peer) error {
	ctx, cancel := context.WithTimeout(h.ctx, h.cfg.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, h.cfg.scheme+"://"+p.Addr()+h.cfg.path, nil)
	if err != nil {
		return err
	}
	resp, err := recoveredRoundTrip(h.cfg.rt, req)
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 399 {
		return &StatusError{Peer: p.Addr(), StatusCode: resp.StatusCode, Status: resp.Status}
	}
	return nil
}

// healthQueue is a min-heap of peers by due time.
type healthQueue []*peerHealth

func (q healthQueue) Len() int           { return len(q) }
func (q healthQueue) Less(i, j int) bool { return q[i].due.Before(q[j].due) }
func (q healthQueue) Swap(i, j int) {
	q[i], q[j] = q[j], q[i]
	q[i].index, q[j].index = i, j
}
func (q *healthQueue) Push(x any) {
	ph := x.(*peerHealth)
	ph.index = len(*q)
	*q = append(*q, ph)
}
func (q *healthQueue) Pop() any {
	old := *q
	ph := old[len(old)-1]
	old[len(old)-1] = nil
	ph.index = -1
	*q = old[:len(old)-1]
	return ph
}
