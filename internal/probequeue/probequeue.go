// Package probequeue runs the probes of the transports' probers
// (balancerhttp's and grpcbalancer's balancer.Prober): a bounded queue
// that Put never blocks on, a fixed number of workers that each send one
// probe at a time with a timeout, the answer handed to the probe's
// receiver, counters and the latest failure's cause. Close stops the workers and waits for them.
package probequeue

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
)

// The probers' defaults and bounds, which balancerhttp's Prober and
// grpcbalancer's probing policies share (their docs give the reasons).
const (
	DefaultTimeout = 250 * time.Millisecond
	DefaultWorkers = 16
	DefaultSize    = 128
	// MaxWorkers and MaxSize bound the settings, so that a typo cannot
	// start a million goroutines or allocate a huge queue.
	MaxWorkers = 1024
	MaxSize    = 1 << 16
)

// Func sends one probe to p and returns the server's answer (InFlight and
// Latency; RoundTrip is measured around it), or an error when none came.
// ctx ends at the probe's timeout or at Close; Func must return soon
// after.
type Func func(ctx context.Context, p *balancer.Peer) (balancer.ProbeAnswer, error)

// Config is a Queue's settings; every field is required but Now.
type Config struct {
	Workers int           // probes sent at once, in [1, MaxWorkers]
	Size    int           // probes queued beyond those, in [0, MaxSize]
	Timeout time.Duration // each probe's, in (0, balancer.MaxProbeLatency]
	Now     func() time.Time
	Probe   Func
}

// Stats are a Queue's counters. Every Put ends in exactly one of
// Answered, Failed and Dropped.
type Stats struct {
	// Sent counts the probes a worker started.
	Sent uint64
	// Answered counts the answers with the server's load handed to the
	// receiver; Failed the Failed answers (an error, a timeout).
	Answered, Failed uint64
	// Dropped counts the probes that got no answer: the queue was full,
	// the Queue was closed, or Close came while they waited or were on
	// their way.
	Dropped uint64
	// Refused counts the answers the receiver refused (a peer removed
	// since, an answer out of range); they count in Answered or Failed
	// too.
	Refused uint64
	// LastError is the latest Failed answer's cause, naming its peer
	// ("probe of <addr>: <error>", wrapping the probe's error, or
	// ErrFailed when the probe answered Failed without one); nil until a
	// probe fails. Answers that follow do not clear it.
	LastError error
}

// ErrFailed is the cause Stats.LastError wraps when a probe answered
// Failed without an error.
var ErrFailed = errors.New("answered Failed")

// probeError is a failed probe's cause and its peer, made only when a
// probe fails; Error formats it when asked.
type probeError struct {
	addr string
	err  error
}

func (e *probeError) Error() string { return "probe of " + e.addr + ": " + e.err.Error() }
func (e *probeError) Unwrap() error { return e.err }

// job is one probe waiting for a worker.
type job struct {
	p  *balancer.Peer
	to balancer.ProbeReceiver
}

// closing is the bit of Queue.state set by Close.
const closing = 1 << 62

// Queue is a bounded probe queue and its workers. Put and Stats are safe
// for concurrent use, with each other and with Close.
type Queue struct {
	jobs    chan job
	probe   Func
	timeout time.Duration
	now     func() time.Time
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc

	// state is the closing bit and the number of Puts under way: Close
	// sets the bit, then waits for the Puts that began before it, so that
	// no Put sends on jobs once Close closes it. Put does no more than
	// two atomic additions and a non-blocking send.
	state atomic.Int64

	closeOnce sync.Once
	wg        sync.WaitGroup // the workers

	sent, answered, failed, dropped, refused atomic.Uint64
	// lastErr is the latest failure's cause, stored only when a probe
	// fails: an answer costs nothing more.
	lastErr atomic.Pointer[probeError]
}

// New starts a Queue's workers. An out-of-range setting is refused with
// balancer.ErrInvalidConfig, naming it.
func New(c Config) (*Queue, error) {
	switch {
	case c.Workers < 1 || c.Workers > MaxWorkers:
		return nil, fmt.Errorf("%w: probe workers %d: out of [1, %d]", balancer.ErrInvalidConfig, c.Workers, MaxWorkers)
	case c.Size < 0 || c.Size > MaxSize:
		return nil, fmt.Errorf("%w: probe queue %d: out of [0, %d]", balancer.ErrInvalidConfig, c.Size, MaxSize)
	case c.Timeout <= 0 || c.Timeout > balancer.MaxProbeLatency:
		return nil, fmt.Errorf("%w: probe timeout %v: out of (0, %v]", balancer.ErrInvalidConfig, c.Timeout, balancer.MaxProbeLatency)
	case c.Probe == nil:
		return nil, fmt.Errorf("%w: no probe function", balancer.ErrInvalidConfig)
	}
	q := &Queue{jobs: make(chan job, c.Size), probe: c.Probe, timeout: c.Timeout, now: c.Now}
	if q.now == nil {
		q.now = time.Now
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	for range c.Workers {
		q.wg.Go(q.work)
	}
	return q, nil
}

// Put queues a probe of p whose answer goes to to, and reports whether it
// did: false, counted as dropped, when the queue is full or closed, or p
// or to is nil. It never blocks and allocates nothing.
func (q *Queue) Put(p *balancer.Peer, to balancer.ProbeReceiver) bool {
	queued := false
	if p == nil || to == nil {
		q.dropped.Add(1)
		return false
	}
	if q.state.Add(1)&closing == 0 {
		select {
		case q.jobs <- job{p, to}:
			queued = true
		default:
		}
	}
	q.state.Add(-1)
	if !queued {
		q.dropped.Add(1)
	}
	return queued
}

// work sends the queued probes, one at a time, until Close; what is still
// queued then is dropped.
func (q *Queue) work() {
	for j := range q.jobs {
		if q.ctx.Err() != nil {
			q.dropped.Add(1)
			continue
		}
		q.run(j)
	}
}

// run sends one probe and hands its answer to its receiver, unless Close
// cut it short.
func (q *Queue) run(j job) {
	q.sent.Add(1)
	ctx, cancel := context.WithTimeout(q.ctx, q.timeout)
	start := q.now()
	a, err := q.probe(ctx, j.p)
	rt := q.now().Sub(start)
	cancel()
	if q.ctx.Err() != nil {
		q.dropped.Add(1) // closed: the receiver may be gone too
		return
	}
	if err != nil || a.Failed {
		if err == nil {
			err = ErrFailed
		}
		pe := &probeError{addr: j.p.Addr(), err: err}
		q.lastErr.Store(pe)
		a = balancer.ProbeAnswer{Failed: true, Err: pe}
		q.failed.Add(1)
	} else {
		a.RoundTrip = max(rt, 0)
		q.answered.Add(1)
	}
	if j.to.Answer(j.p, a) != nil {
		q.refused.Add(1)
	}
}

// Close stops the workers, cutting the probes under way short, drops the
// queued ones, and returns once every worker has returned. No answer is
// given after Close returns. Close is idempotent; Put after it drops.
func (q *Queue) Close() {
	q.closeOnce.Do(func() {
		q.state.Add(closing)
		for q.state.Load() != closing {
			runtime.Gosched() // a Put under way: it does not block
		}
		q.cancel()
		close(q.jobs)
	})
	q.wg.Wait()
}

// Stats returns the counters.
func (q *Queue) Stats() Stats {
	s := Stats{
		Sent: q.sent.Load(), Answered: q.answered.Load(), Failed: q.failed.Load(),
		Dropped: q.dropped.Load(), Refused: q.refused.Load(),
	}
	if e := q.lastErr.Load(); e != nil {
		s.LastError = e // a nil *probeError would make a non-nil error
	}
	return s
}
