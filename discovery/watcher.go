package discovery

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
)

// ErrNoAddresses is returned, wrapped, for an answer with no address: the
// name does not exist (NXDOMAIN) or has no records of the types asked.
var ErrNoAddresses = errors.New("discovery: no addresses")

// Resolver looks the peers up. Resolve answers the targets now and how
// long the answer may be trusted (0: unknown); it honours ctx.
type Resolver interface {
	Resolve(ctx context.Context) (Result, error)
}

// Result is one answer of a Resolver.
type Result struct {
	Targets []Target
	// TTL is how long the answer may be trusted, the least TTL of its
	// records; 0 where the Resolver cannot tell.
	TTL time.Duration
}

// Target is one address of an answer.
type Target struct {
	Addr   string // host:port
	Weight int    // the SRV record's weight (0 read as 1); 0 for an A or AAAA record
	Backup bool   // an SRV record below the lowest priority
	Source int    // Merge's index of the resolver that gave it; 0 otherwise
}

// Config sets how a Watcher looks up and applies its answers. The zero
// value gives the defaults.
type Config struct {
	// Interval is how long an answer without a TTL is trusted. Default 5s
	// (Envoy's dns_refresh_rate): without a TTL, a short interval bounds
	// how long a removed address is kept.
	Interval time.Duration

	// MinInterval and MaxInterval bound a TTL (and Interval): a TTL of 0
	// would look up without pause, one of a day would miss a change for a
	// day. Default 1s and 5m.
	MinInterval, MaxInterval time.Duration

	// RetryInterval is the wait after a failed lookup, doubled after each
	// failure in a row up to MaxInterval (which also bounds the first).
	// Default 1s.
	RetryInterval time.Duration

	// Timeout bounds each lookup. Default 10s.
	Timeout time.Duration

	// Peer makes the peer for a target. Default: balancer.NewPeer(t.Addr)
	// with weight t.Weight where it is above 0, and Backup where t.Backup;
	// set it to give every peer nginx's server parameters (max_fails,
	// fail_timeout, a weight that overrides SRV's, as nginx's weight= does).
	Peer func(t Target) *balancer.Peer

	// OnError, if set, is told of each failed lookup and each answer
	// refused (no address, or the balancer's Update refused it); the
	// Watcher keeps the last good list. Called from the Watcher's
	// goroutine, or from Watch for the first lookup.
	OnError func(error)

	// Wait waits d or until ctx ends, whichever is first, returning
	// ctx.Err() in the second case. Default: a timer. Tests pass a fake
	// clock's.
	Wait func(ctx context.Context, d time.Duration) error
}

func (c Config) withDefaults() (Config, error) {
	def := func(d *time.Duration, v time.Duration, name string) error {
		switch {
		case *d == 0:
			*d = v
		case *d < 0:
			return fmt.Errorf("discovery: Config.%s %v: negative: %w", name, *d, balancer.ErrInvalidConfig)
		}
		return nil
	}
	for _, f := range []struct {
		d    *time.Duration
		v    time.Duration
		name string
	}{
		{&c.Interval, 5 * time.Second, "Interval"},
		{&c.MinInterval, time.Second, "MinInterval"},
		{&c.MaxInterval, 5 * time.Minute, "MaxInterval"},
		{&c.RetryInterval, time.Second, "RetryInterval"},
		{&c.Timeout, 10 * time.Second, "Timeout"},
	} {
		if err := def(f.d, f.v, f.name); err != nil {
			return c, err
		}
	}
	if c.MinInterval > c.MaxInterval {
		return c, fmt.Errorf("discovery: Config.MinInterval %v above MaxInterval %v: %w", c.MinInterval, c.MaxInterval, balancer.ErrInvalidConfig)
	}
	if c.Peer == nil {
		c.Peer = defaultPeer
	}
	if c.Wait == nil {
		c.Wait = timerWait
	}
	return c, nil
}

func defaultPeer(t Target) *balancer.Peer {
	var opts []balancer.PeerOption
	if t.Weight > 0 {
		opts = append(opts, balancer.Weight(t.Weight))
	}
	if t.Backup {
		opts = append(opts, balancer.Backup())
	}
	return balancer.NewPeer(t.Addr, opts...)
}

func timerWait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Watcher keeps a balancer's peers in step with a Resolver's answers, on
// one goroutine, until Close or its context ends. Its methods are safe for
// concurrent use. The balancer's Add, Remove and Update belong to the
// Watcher while it runs: a change made by hand lasts until the next answer.
type Watcher struct {
	b      balancer.Updater
	r      Resolver
	c      Config
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once

	lookups, failures, updates atomic.Uint64
	mu                         sync.Mutex
	last                       []Target // the targets of the list in force
	lastErr                    error
	noBackups                  bool // the balancer refused backups: SRV's lower priorities are left out, as nginx does
}

// Stats is what a Watcher has done.
type Stats struct {
	Lookups  uint64   // lookups made
	Failures uint64   // lookups that failed or answers refused
	Updates  uint64   // answers that changed the balancer's list
	Targets  []Target // the targets in force, as last applied
	LastErr  error    // the last failure, nil once a lookup succeeds
}

// Watch looks r up once and gives the answer to b.Update, then keeps doing
// so on a goroutine of its own until ctx ends or Close. A first lookup that
// fails, or answers no address, is returned as the error, with b left as it
// was and no goroutine started: there is no list to keep. A Config value
// out of range is an error matching balancer.ErrInvalidConfig.
func Watch(ctx context.Context, b balancer.Updater, r Resolver, c Config) (*Watcher, error) {
	c, err := c.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Watcher{b: b, r: r, c: c, done: make(chan struct{})}
	next, err := w.resolve(ctx)
	if err != nil {
		return nil, err
	}
	ctx, w.cancel = context.WithCancel(ctx)
	go w.run(ctx, next)
	return w, nil
}

// Close stops the Watcher and waits for its goroutine to end. The balancer
// keeps its last list.
func (w *Watcher) Close() error {
	w.once.Do(w.cancel)
	<-w.done
	return nil
}

// Stats returns what the Watcher has done so far.
func (w *Watcher) Stats() Stats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return Stats{
		Lookups:  w.lookups.Load(),
		Failures: w.failures.Load(),
		Updates:  w.updates.Load(),
		Targets:  slices.Clone(w.last),
		LastErr:  w.lastErr,
	}
}

func (w *Watcher) run(ctx context.Context, next time.Duration) {
	defer close(w.done)
	first := min(w.c.RetryInterval, w.c.MaxInterval)
	retry := first
	for {
		if w.c.Wait(ctx, next) != nil {
			return
		}
		d, err := w.resolve(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			next = retry
			retry = w.c.MaxInterval
			if next < w.c.MaxInterval/2 { // doubled, without wrapping around
				retry = 2 * next
			}
		default:
			next, retry = d, first
		}
	}
}

// resolve makes one lookup and applies it, returning how long its answer
// holds; an error is reported and counted, and the list left as it was.
func (w *Watcher) resolve(ctx context.Context) (time.Duration, error) {
	w.lookups.Add(1)
	lctx, cancel := context.WithTimeout(ctx, w.c.Timeout)
	res, err := w.r.Resolve(lctx)
	cancel()
	if err == nil && len(res.Targets) == 0 {
		err = ErrNoAddresses
	}
	if err == nil {
		err = w.apply(res.Targets)
	}
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err() // stopped: not the resolver's failure
		}
		w.failures.Add(1)
		w.mu.Lock()
		w.lastErr = err
		w.mu.Unlock()
		if w.c.OnError != nil {
			w.c.OnError(err)
		}
		return 0, err
	}
	ttl := res.TTL
	if ttl == 0 {
		ttl = w.c.Interval
	}
	return min(max(ttl, w.c.MinInterval), w.c.MaxInterval), nil
}

// apply hands the targets to the balancer, unless they are those in force.
func (w *Watcher) apply(ts []Target) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = nil
	if w.noBackups {
		ts = primaries(ts)
		if len(ts) == 0 { // backups only: nothing for this picker
			return fmt.Errorf("discovery: the answer has backups only, which the balancer refuses: %w", ErrNoAddresses)
		}
	}
	if slices.Equal(ts, w.last) {
		return nil
	}
	err := w.b.Update(w.peers(ts))
	if err != nil && !w.noBackups && errors.Is(err, balancer.ErrInvalidConfig) && len(primaries(ts)) < len(ts) && len(primaries(ts)) > 0 {
		// A picker that refuses backups (nginx's hash, ip_hash and
		// random): nginx then leaves SRV's lower priorities out.
		if err2 := w.b.Update(w.peers(primaries(ts))); err2 == nil {
			w.noBackups, ts, err = true, primaries(ts), nil
		}
	}
	if err != nil {
		return fmt.Errorf("discovery: the balancer refused the answer: %w", err)
	}
	w.last = slices.Clone(ts)
	w.updates.Add(1)
	return nil
}

func (w *Watcher) peers(ts []Target) []*balancer.Peer {
	ps := make([]*balancer.Peer, len(ts))
	for i, t := range ts {
		ps[i] = w.c.Peer(t)
	}
	return ps
}

func primaries(ts []Target) []Target {
	var p []Target
	for _, t := range ts {
		if !t.Backup {
			p = append(p, t)
		}
	}
	return p
}
