package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// picker is the gRPC picker of one pushed state. It only refers to the
// policy's balancer.Balancer, which keeps all balancing state, so a new
// picker is cheap and the state survives every push.
type picker struct {
	b   *lbBalancer
	lb  lbgo.Balancer
	cfg *lbConfig
	err error // non-nil: the ClientConn has no READY SubConn
}

// rpc is the retry state of one RPC, shared by its attempts.
//
// gRPC (grpc-go 1.85, stream.go) makes each attempt's context with
// context.WithValue over the stream's context, itself a context.WithCancel
// (or WithTimeout) made for that one RPC and cancelled when the RPC ends.
// So the Done channel of PickInfo.Ctx is the same for every attempt of one
// RPC, retries and transparent retries included, and differs between RPCs:
// it keys the map. An RPC gets an entry only when an attempt ends in an
// error (a retry may follow), and the entry goes when the RPC's context
// ends (context.AfterFunc), or at the first attempt that succeeds: nothing
// outlives the RPC. A hedged RPC (hedge.go) has its attempts run at once,
// each with a context of its own: they find their shared rpc in the
// context instead, and the lock orders their picks.
type rpc struct {
	mu   sync.Mutex // gRPC's retries are sequential; hedged attempts are not
	req  lbgo.Request
	stop func() bool // stops the AfterFunc cleanup; nil until stored
}

// attempt is one pick, until gRPC reports it done.
type attempt struct {
	p     *picker
	peer  *lbgo.Peer
	start time.Time
	ctx   context.Context
	key   <-chan struct{}
	rpc   *rpc
	hedge *hedgeAttempt   // set for an attempt of a hedged RPC (hedge.go)
	own   rpc             // the RPC's state when this is its first attempt: one allocation
	load  lbgo.ServerLoad // Outcome.Load's storage, in the same allocation
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	if p.err != nil {
		if f := testNoPeer.Load(); f != nil && p.err == balancer.ErrNoSubConnAvailable {
			(*f)(p, info.Ctx)
		}
		return balancer.PickResult{}, p.err
	}
	b := p.b
	a := &attempt{p: p, ctx: info.Ctx, key: info.Ctx.Done()}
	if hedgingUsed.Load() {
		// The attempts of a hedged RPC run at once, each with a context
		// of its own: they share the state the interceptor keeps.
		if h, ok := info.Ctx.Value(hedgeKey{}).(*hedgeAttempt); ok {
			a.hedge, a.rpc = h, &h.call.rpc
		}
	}
	if a.rpc == nil && a.key != nil {
		if v, ok := b.rpcs.Load(a.key); ok {
			a.rpc = v.(*rpc)
		}
	}
	if a.rpc == nil {
		a.rpc = &a.own
	}
	peer, err := p.pick(a.rpc, info.Ctx, a.hedge != nil)
	if errors.Is(err, errNoOtherPeer) {
		a.hedge.noPeer.Store(true)
		return balancer.PickResult{}, hedgeRefusal(b.name)
	}
	var wake time.Time
	var wakes bool
	if err != nil && noPeer(err) {
		if f := testBeforeWait.Load(); f != nil {
			(*f)()
		}
		// Wait for a peer: at the next Done (a max_conns slot) or SubConn
		// change, or at the end of the nearest fail window. Nothing must
		// fall between the pick and the waiting: a Done after the pick
		// above and before the Store below found no waiter and pushed no
		// picker, and a window that ended after the pick and before
		// NextEligible is not in it. So the pick is made once more after
		// both: such a Done is seen by it or sees the waiter (sequentially
		// consistent atomics on both sides), and such a window by it or
		// by the wake-up.
		b.waiting.Store(true)
		wake, wakes = p.lb.NextEligible()
		peer, err = p.pick(a.rpc, info.Ctx, a.hedge != nil)
		if errors.Is(err, errNoOtherPeer) {
			a.hedge.noPeer.Store(true)
			return balancer.PickResult{}, hedgeRefusal(b.name)
		}
	}
	if err != nil {
		if noPeer(err) {
			if f := testNoPeer.Load(); f != nil {
				(*f)(p, info.Ctx)
			}
			if f := testBeforeWake.Load(); f != nil {
				(*f)()
			}
			if wakes {
				b.wakeAt(wake)
			}
			return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
		}
		// A plain error: gRPC fails a fail-fast RPC with UNAVAILABLE and
		// makes a wait-for-ready one wait for the next picker.
		return balancer.PickResult{}, fmt.Errorf("%s: %w", b.name, err)
	}
	sc, ok := peer.Value().(balancer.SubConn)
	if !ok {
		// Cannot happen: every peer carries its SubConn. End the attempt
		// and let gRPC pick again.
		_ = p.lb.Done(peer, lbgo.Outcome{Abandoned: true})
		return balancer.PickResult{}, balancer.ErrNoSubConnAvailable
	}
	a.peer, a.start = peer, time.Now()
	if a.hedge != nil {
		a.hedge.pickedPeer(peer)
	}
	return balancer.PickResult{SubConn: sc, Done: a.done}, nil
}

// pick picks for the RPC r, under its lock. An attempt of a hedged RPC
// that finds no peer the RPC has not tried gets errNoOtherPeer: its other
// attempts may be in flight on every peer.
func (p *picker) pick(r *rpc, ctx context.Context, hedged bool) (*lbgo.Peer, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p.setKey(&r.req, ctx)
	peer, err := p.lb.Pick(&r.req)
	if err != nil && r.req.Attempts() > 0 && (errors.Is(err, lbgo.ErrNoLivePeer) || errors.Is(err, lbgo.ErrTriesExhausted)) {
		if hedged {
			return nil, errNoOtherPeer
		}
		// A retry that has tried every eligible peer, or as many as nginx
		// allows: gRPC's retry policy bounds the attempts, so start the
		// tried set afresh rather than fail the retry.
		r.req.Reset()
		p.setKey(&r.req, ctx)
		peer, err = p.lb.Pick(&r.req)
	}
	return peer, err
}

// noPeer reports whether a pick's error means that no peer is eligible
// now, so that the RPC waits for one.
func noPeer(err error) bool {
	return errors.Is(err, lbgo.ErrNoLivePeer) || errors.Is(err, lbgo.ErrNoPeers)
}

// setKey gives a keyed picker the RPC's hash key: the value of the
// configured metadata key in the outgoing metadata, or nothing.
func (p *picker) setKey(r *lbgo.Request, ctx context.Context) {
	h := p.cfg.hashHeader
	if h == "" {
		return
	}
	md, _ := metadata.FromOutgoingContext(ctx)
	v := md.Get(h)
	if len(v) == 0 {
		r.SetKey("")
		r.SetClientAddr(netip.Addr{})
		return
	}
	r.SetKey(v[0])
	addr, _ := netip.ParseAddr(v[0])
	r.SetClientAddr(addr)
}

// testNoPeer, when set by a test, is told of every pick that returns
// ErrNoSubConnAvailable for want of a peer: the picker, and the attempt's
// context.
var testNoPeer atomic.Pointer[func(*picker, context.Context)]

// testBeforeWait, when set by a test, runs between a pick that found no
// live peer and the policy's note that a pick waits.
var testBeforeWait atomic.Pointer[func()]

// testBeforeWake, when set by a test, runs between the last pick that
// found no live peer and the policy's wake-up for the end of a fail window.
var testBeforeWake atomic.Pointer[func()]

// testDone, when set by a test, sees every outcome the policies report.
var testDone atomic.Pointer[func(*lbgo.Peer, lbgo.Outcome)]

// done reports the attempt to the picker and keeps or drops the RPC's retry
// state.
func (a *attempt) done(info balancer.DoneInfo) {
	p, b, r := a.p, a.p.b, a.rpc
	o := OutcomeOf(a.ctx, info, time.Since(a.start), p.cfg.failures.has)
	l, err := LoadOf(info, &a.load)
	if err != nil {
		badLoadReports.Add(1)
		logger.Infof("%s: %s's load report ignored: %v", b.name, a.peer, err)
	}
	o.Load = l
	if f := testDone.Load(); f != nil {
		(*f)(a.peer, o)
	}
	if err := p.lb.Done(a.peer, o); err != nil && !errors.Is(err, lbgo.ErrUnknownPeer) {
		logger.Warningf("%s: Done(%s): %v", b.name, a.peer, err)
	}
	retryMayFollow := info.Err != nil || !info.BytesSent
	switch {
	case a.hedge != nil:
		// A hedged RPC's state lives with its interceptor, as long as
		// the RPC.
	case retryMayFollow && r.stop == nil && a.key != nil && a.ctx.Err() == nil:
		// Keep the RPC's tried set for a retry, until the RPC ends.
		r.mu.Lock()
		key := a.key
		r.stop = context.AfterFunc(a.ctx, func() { b.rpcs.CompareAndDelete(key, r) })
		r.mu.Unlock()
		b.rpcs.Store(key, r)
	case !retryMayFollow && r.stop != nil:
		r.stop()
		b.rpcs.CompareAndDelete(a.key, r)
	}
	if b.waiting.Load() && b.waiting.CompareAndSwap(true, false) {
		b.wakeAt(time.Now()) // an attempt ended: a waiting RPC may have a peer now
	}
}

// OutcomeOf is the outcome the policies report for one attempt of an RPC
// whose attempt context is ctx, given gRPC's DoneInfo, the latency from pick
// to done and the set of status codes that count as failures of the peer.
//
//   - Abandoned, not a failure, when the client ended the RPC (the status
//     is CANCELLED, or DEADLINE_EXCEEDED once ctx has ended) and when
//     the attempt was never sent (BytesSent false: its stream was never
//     opened, so the server never saw it; the connection's own failure
//     reaches the picker through the SubConn state). nginx does not count
//     a client's abort against a server either. Abandoned and Superseded
//     when ctx's cause is lbgo.ErrSuperseded: Hedging cancelled the
//     attempt because another attempt of its RPC ended it.
//   - Failed when the status code is in isFailure, also once ctx has
//     ended: an attempt that was sent and ended with any status but
//     CANCELLED or DEADLINE_EXCEEDED got the server's answer (a hedge's
//     loser answered before its cancellation, a caller that gave up just
//     after), so it is classified as with a live ctx. CANCELLED is
//     Abandoned always, DEADLINE_EXCEEDED when ctx has ended: what gRPC
//     gives an attempt whose context ended.
//   - Otherwise a success, whatever the code: the server answered.
//
// It leaves Load nil: the policies add the server's report with LoadOf.
func OutcomeOf(ctx context.Context, info balancer.DoneInfo, latency time.Duration, isFailure func(codes.Code) bool) lbgo.Outcome {
	o := lbgo.Outcome{Latency: max(latency, 0)}
	switch {
	case info.Err == nil:
		o.Abandoned = !info.BytesSent // gRPC found the SubConn not ready and picks again
	case !info.BytesSent:
		o.Abandoned = true
	default:
		switch code := status.Code(info.Err); {
		case code == codes.Canceled, code == codes.DeadlineExceeded && ctx.Err() != nil:
			o.Abandoned = true
		default:
			o.Failed = isFailure != nil && isFailure(code)
		}
	}
	o.Superseded = o.Abandoned && ctx.Err() != nil && context.Cause(ctx) == lbgo.ErrSuperseded
	return o
}
