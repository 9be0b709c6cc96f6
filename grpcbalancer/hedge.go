package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The default budget of a Hedging: extra attempts may add 5% to the RPCs
// of any 10 s window, with no floor, as Finagle's backup requests budget
// their maxExtraLoad.
const (
	DefaultHedgeRatio        = 0.05
	DefaultHedgeMinPerSecond = 0
	DefaultHedgeWindow       = 10 * time.Second
)

// Hedging sends hedged unary RPCs as gRFC A6's hedgingPolicy says, which
// grpc-go does not implement (it ignores the field): for a method whose
// methodConfig has a hedgingPolicy, the first attempt goes at once, another
// every hedgingDelay (all at once for 0s or none) until maxAttempts (capped
// at MaxHedgedAttempts); the first OK answer, or the first with a status
// not in nonFatalStatusCodes, ends the RPC and cancels the other attempts,
// whose servers see their contexts cancelled; a non-fatal status starts the
// next attempt at once. When every attempt has ended non-fatally, the RPC
// fails with the last status. Each attempt carries
// grpc-previous-rpc-attempts, the number of attempts sent before it.
//
// Server pushback, as gRFC A6 defines it for hedging, is read from the
// grpc-retry-pushback-ms trailer of an attempt that ended with a
// non-fatal status (any other end decides the RPC): a value of n ms, a
// 32-bit integer n >= 0, sends the next attempt n ms later instead of at
// once, and the one after it hedgingDelay after that; a negative value,
// one that is not a 32-bit integer or several values (grpc-go's reading
// for retries) send no further attempt, while those in flight go on. An
// RPC with no attempt in flight that waits for a pushback's delay ends
// when its context does.
//
// A budget bounds the extra attempts: a balancer.Budget (by default a
// retrybudget.Budget of DefaultHedgeRatio, DefaultHedgeMinPerSecond and
// DefaultHedgeWindow; see WithHedgeBudget) in which each hedged RPC deposits one token and each
// attempt after the first withdraws one; once one is refused, the RPC
// sends no more. gRPC's retryThrottling is not used: it counts only
// failures, so a backend that is slow but answers OK, the case hedging is
// for, would never throttle hedges.
//
// Under an lbgo_ policy of this package the attempts of one RPC share its
// tried set, so each goes to a backend that no other attempt of the RPC
// has been sent to; an attempt that finds none is not sent (NoBackend in
// Stats) and gives back one of the budget tokens its RPC's hedges took,
// never more than they took. Under another policy they are picked
// independently.
//
// Streaming RPCs, methods without a hedgingPolicy and replies that are not
// proto messages are passed through untouched. Use the interceptor
// (Intercept) with the same service config given to the channel, or
// DialOptions, which gives both. A Hedging is safe for concurrent use and
// may serve many channels; Stats sums them.
type Hedging struct {
	sc       string
	policies hedgePolicies
	budget   lbgo.Budget
	events   func(lbgo.Event)

	rpcs, hedges, won, refused, noBackend atomic.Uint64
}

// HedgingStats counts what a Hedging has done since it was made. Each
// counter with an event (WithHedgeEvents) grows by one exactly when the
// event is emitted: Hedges with EventHedgeSent, Won with EventHedgeWon,
// Refused with EventHedgeRefused.
//
//   - RPCs: RPCs of a method with a hedgingPolicy.
//   - Hedges: attempts of an RPC sent to a backend after its first one
//     was, the load hedging added. Under an lbgo_ policy counted at the
//     pick, in the order the RPC's attempts got their backends (an
//     attempt that found none is not one); under another policy (or for
//     an attempt no pick of this package saw) each attempt after the
//     first, counted as it ends.
//   - Won: RPCs that an attempt after the first ended with the server's
//     OK answer; not an RPC whose caller's context ended it, nor one that
//     sent no hedge (its only attempt sent was not its first).
//   - Refused: attempts after the first that the budget refused.
//   - NoBackend: attempts, the first included, not sent because their
//     pick found no backend that the RPC's other attempts had not tried;
//     each gives a budget token back while the RPC's hedges have one
//     taken and not given back.
type HedgingStats struct {
	RPCs      uint64
	Hedges    uint64
	Won       uint64
	Refused   uint64
	NoBackend uint64
}

// HedgingOption configures NewHedging.
type HedgingOption func(*Hedging) error

// WithHedgeBudget makes the Hedging take its extra attempts from b (a
// retrybudget.Budget, or a Budget of the caller's), which may be shared
// with other clients' retries or hedges. nil, or a nil pointer in b, is
// refused.
func WithHedgeBudget(b lbgo.Budget) HedgingOption {
	return func(h *Hedging) error {
		if v := reflect.ValueOf(b); b == nil || v.Kind() == reflect.Pointer && v.IsNil() {
			return fmt.Errorf("%w: WithHedgeBudget(nil)", ErrBadHedgingConfig)
		}
		h.budget = b
		return nil
	}
}

// WithHedgeEvents makes the Hedging call hook for each hedge it sends
// (lbgo.EventHedgeSent), each RPC a hedge won (lbgo.EventHedgeWon) and
// each hedge the budget refused (lbgo.EventHedgeRefused), the events
// balancer.HedgePolicy.Events reports for net/http, with Time from
// time.Now: one event for each count of Stats' Hedges, Won and Refused,
// which say when each is emitted. Peer is the hedge's backend for
// EventHedgeSent and the winner's for EventHedgeWon under an lbgo_
// policy, nil otherwise (gRPC picks the backend out of this package's
// sight). The hook runs on one of the RPC's goroutines or its hedging
// timer's, EventHedgeSent in a pick (or, under another policy, as the
// hedge ends, under the RPC's lock), EventHedgeRefused under the RPC's
// lock: it must be quick, must not block, and must be safe for
// concurrent use. nil is refused.
func WithHedgeEvents(hook func(lbgo.Event)) HedgingOption {
	return func(h *Hedging) error {
		if hook == nil {
			return fmt.Errorf("%w: WithHedgeEvents(nil)", ErrBadHedgingConfig)
		}
		h.events = hook
		return nil
	}
}

// NewHedging reads the hedging policies of serviceConfig, the JSON given
// to grpc.WithDefaultServiceConfig, more strictly than grpc-go reads the
// rest: a key that names no field of the service config, its methodConfig
// or hedgingPolicy, a key matching one only without regard to case, a key
// given twice in one object, a maxAttempts below 2 or not an integer, a
// hedgingDelay that is not google.protobuf.Duration's JSON form ("0.05s")
// or lies outside [0, MaxHedgingDelay], a status code it does not know, a
// methodConfig with both a retryPolicy and a hedgingPolicy, and a method
// named twice are refused with ErrBadHedgingConfig, naming the key.
func NewHedging(serviceConfig string, opts ...HedgingOption) (*Hedging, error) {
	policies, err := parseHedging(serviceConfig)
	if err != nil {
		return nil, err
	}
	h := &Hedging{sc: serviceConfig, policies: policies}
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: a nil HedgingOption", ErrBadHedgingConfig)
		}
		if err := o(h); err != nil {
			return nil, err
		}
	}
	if h.budget == nil {
		b, err := retrybudget.New(DefaultHedgeRatio, DefaultHedgeMinPerSecond, DefaultHedgeWindow)
		if err != nil {
			return nil, err // cannot happen: the defaults are in range
		}
		h.budget = b
	}
	for _, p := range policies {
		if p != nil {
			hedgingUsed.Store(true)
			break
		}
	}
	return h, nil
}

// DialOptions returns the options that give a channel the service config
// and the interceptor: grpc.WithDefaultServiceConfig and
// grpc.WithChainUnaryInterceptor, which keeps the channel's other
// interceptors (this one runs after those given before it).
func (h *Hedging) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{
		grpc.WithDefaultServiceConfig(h.sc),
		grpc.WithChainUnaryInterceptor(h.Intercept),
	}
}

// Stats returns the Hedging's counters.
func (h *Hedging) Stats() HedgingStats {
	return HedgingStats{
		RPCs:      h.rpcs.Load(),
		Hedges:    h.hedges.Load(),
		Won:       h.won.Load(),
		Refused:   h.refused.Load(),
		NoBackend: h.noBackend.Load(),
	}
}

// HedgeCounts returns Stats' counters as plain numbers, in the order of
// HedgingStats' fields, for a reader that does not import this package:
// metrics.NewHedgeCounter exports them to Prometheus without the metrics
// module depending on gRPC.
func (h *Hedging) HedgeCounts() (rpcs, hedges, won, refused, noBackend uint64) {
	st := h.Stats()
	return st.RPCs, st.Hedges, st.Won, st.Refused, st.NoBackend
}

// event reports an event to the WithHedgeEvents hook, if any.
func (h *Hedging) event(k lbgo.EventKind, p *lbgo.Peer) {
	if h.events != nil {
		h.events(lbgo.Event{Kind: k, Peer: p, Time: time.Now()})
	}
}

// hedgingUsed is set once a Hedging with a policy exists: only then does a
// pick look for a hedged attempt in its context.
var hedgingUsed atomic.Bool

// hedgeKey is the context key of a hedged attempt (a *hedgeAttempt).
type hedgeKey struct{}

// hedgeCall is one hedged RPC: the retry state its attempts share in the
// picker (pick.go), so each picks a peer the others have not.
type hedgeCall struct {
	rpc      rpc
	h        *Hedging
	backends atomic.Int32 // attempts that got a backend from a pick of this package
	hedged   atomic.Bool  // a hedge of the RPC was counted (Hedges)
}

// pickedPeer counts an attempt's pick of p under an lbgo_ policy: the RPC's
// attempts after the first to get a backend are its hedges sent.
func (a *hedgeAttempt) pickedPeer(p *lbgo.Peer) {
	a.picked.Store(p) // for EventHedgeWon
	if a.sent.CompareAndSwap(false, true) && a.call.backends.Add(1) > 1 && a.call.h != nil {
		a.call.hedged.Store(true)
		a.call.h.hedgeSent(p)
	}
}

// hedgeSent, hedgeWon and hedgeRefused count and report, together.
func (h *Hedging) hedgeSent(p *lbgo.Peer) {
	h.hedges.Add(1)
	h.event(lbgo.EventHedgeSent, p)
}

func (h *Hedging) hedgeWon(p *lbgo.Peer) {
	h.won.Add(1)
	h.event(lbgo.EventHedgeWon, p)
}

func (h *Hedging) hedgeRefused() {
	h.refused.Add(1)
	h.event(lbgo.EventHedgeRefused, nil)
}

// hedgeAttempt is one attempt of a hedged RPC.
type hedgeAttempt struct {
	i      int // 0 for the first attempt
	call   *hedgeCall
	reply  proto.Message
	cancel context.CancelCauseFunc
	noPeer atomic.Bool               // the picker found no peer the other attempts had not tried
	sent   atomic.Bool               // counted by pickedPeer, or at its end (report)
	picked atomic.Pointer[lbgo.Peer] // the peer of its last pick under an lbgo_ policy

	// Where the attempt writes what the caller asked for with grpc.Header,
	// grpc.Trailer and grpc.Peer; copied out if it wins.
	header, trailer metadata.MD
	peer            peer.Peer
}

// Intercept is the grpc.UnaryClientInterceptor that hedges.
//
// The first attempt runs on the caller's goroutine and each later one on
// its own, started by the hedging delay's timer or by an attempt's
// non-fatal end; hedgeRun decides under its lock. An RPC answered before
// the delay so costs no goroutine.
func (h *Hedging) Intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p := h.policies.lookup(method)
	msg, ok := reply.(proto.Message)
	if p == nil || !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	h.rpcs.Add(1)
	h.budget.Deposit()

	r := &hedgeRun{h: h, p: p, ctx: ctx, method: method, req: req, cc: cc, invoker: invoker, msg: msg}
	r.call.h = h
	r.decided = make(chan struct{})
	// The caller's per-call outputs, which only the winner fills.
	var onFinish []func(error)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			r.headerTo = o.HeaderAddr
		case grpc.TrailerCallOption:
			r.trailerTo = o.TrailerAddr
		case grpc.PeerCallOption:
			r.peerTo = o.PeerAddr
		case grpc.OnFinishCallOption:
			onFinish = append(onFinish, o.OnFinish)
		default:
			r.passed = append(r.passed, o)
		}
	}
	// The reply's type, read before the first attempt writes to msg.
	r.mt = msg.ProtoReflect().Type()
	r.attempts = make([]*hedgeAttempt, 0, p.maxAttempts)

	r.mu.Lock()
	first, firstCtx, firstOpts := r.startLocked()
	if p.delay == 0 {
		for r.hedgeLocked() {
		}
	} else {
		r.armLocked(p.delay)
	}
	r.mu.Unlock()

	r.report(first, invoker(firstCtx, method, req, msg, cc, firstOpts...))
	select {
	case <-r.decided:
	case <-ctx.Done():
		// Attempts in flight end with the context and decide the RPC;
		// with none, it waits for a pushback's delay: end it now.
		r.mu.Lock()
		if !r.done && r.inflight == 0 {
			r.win, r.last = -1, status.FromContextError(ctx.Err()).Err()
			r.decide()
		}
		r.mu.Unlock()
		<-r.decided
	}

	r.mu.Lock()
	if r.timer != nil {
		r.timer.Stop()
	}
	win, err := r.win, r.last
	for _, a := range r.attempts {
		a.cancel(nil)
	}
	r.mu.Unlock()
	r.wg.Wait() // the losers return soon after their cancel

	if win > 0 && err == nil {
		if r.call.hedged.Load() { // else the winner was the RPC's only attempt sent
			h.hedgeWon(r.attempts[win].picked.Load())
		}
		proto.Reset(msg)
		proto.Merge(msg, r.attempts[win].reply)
	}
	if win >= 0 {
		w := r.attempts[win]
		if r.headerTo != nil {
			*r.headerTo = w.header
		}
		if r.trailerTo != nil {
			*r.trailerTo = w.trailer
		}
		if r.peerTo != nil {
			*r.peerTo = w.peer
		}
	}
	for _, f := range onFinish {
		f(err)
	}
	return err
}

// hedgeRun is one hedged RPC under way.
type hedgeRun struct {
	h       *Hedging
	p       *hedgePolicy
	ctx     context.Context
	method  string
	req     any
	cc      *grpc.ClientConn
	invoker grpc.UnaryInvoker
	msg     proto.Message
	mt      protoreflect.MessageType
	passed  []grpc.CallOption
	call    hedgeCall

	headerTo, trailerTo *metadata.MD
	peerTo              *peer.Peer

	wg      sync.WaitGroup // the attempts after the first
	decided chan struct{}  // closed when win and last are final

	mu       sync.Mutex
	attempts []*hedgeAttempt
	inflight int
	hedging  bool // more attempts may be sent
	done     bool // decided is closed
	win      int  // the attempt whose answer ends the RPC; -1: none
	last     error
	timer    *time.Timer
	due      time.Time // when the timer's next attempt is due; an earlier fire is stale
	tokens   int       // budget tokens the hedges took and report has not given back
}

// startLocked makes the next attempt and returns what its call needs.
func (r *hedgeRun) startLocked() (*hedgeAttempt, context.Context, []grpc.CallOption) {
	i := len(r.attempts)
	a := &hedgeAttempt{call: &r.call, reply: r.msg, i: i}
	if i > 0 {
		a.reply = r.mt.New().Interface()
	}
	actx := context.WithValue(r.ctx, hedgeKey{}, a)
	if i > 0 {
		actx = metadata.AppendToOutgoingContext(actx, "grpc-previous-rpc-attempts", strconv.Itoa(i))
	}
	actx, a.cancel = context.WithCancelCause(actx)
	opts := r.passed
	if r.headerTo != nil || r.trailerTo != nil || r.peerTo != nil {
		opts = append(opts[:len(opts):len(opts)], grpc.Header(&a.header), grpc.Trailer(&a.trailer), grpc.Peer(&a.peer))
	} else if r.p.nonFatal != 0 {
		// The trailer may carry a pushback (report).
		opts = append(opts[:len(opts):len(opts)], grpc.Trailer(&a.trailer))
	}
	r.attempts = append(r.attempts, a)
	r.inflight++
	if i == 0 {
		r.hedging = true
	}
	return a, actx, opts
}

// hedgeLocked sends the next attempt if the RPC is undecided and
// maxAttempts and the budget allow, and reports whether it did.
func (r *hedgeRun) hedgeLocked() bool {
	if r.done || !r.hedging || len(r.attempts) >= r.p.maxAttempts || r.ctx.Err() != nil {
		return false
	}
	if !r.h.budget.TryWithdraw() {
		r.h.hedgeRefused()
		r.hedging = false
		return false
	}
	r.tokens++
	a, actx, opts := r.startLocked()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.report(a, r.invoker(actx, r.method, r.req, a.reply, r.cc, opts...))
	}()
	return true
}

// armLocked sets the timer to send the next attempt d from now. A fire
// of the timer already under way when it is re-armed finds the attempt
// not yet due and does nothing.
func (r *hedgeRun) armLocked(d time.Duration) {
	r.due = time.Now().Add(d)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.tick)
	} else {
		r.timer.Reset(d)
	}
}

// tick is the hedging timer: send the next attempt, and wait another
// delay for the one after. If no attempt may be sent and none is in
// flight (the RPC waited for a pushback's delay), the RPC ends.
func (r *hedgeRun) tick() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || time.Now().Before(r.due) {
		return
	}
	if r.hedgeLocked() {
		if r.hedging && len(r.attempts) < r.p.maxAttempts {
			r.armLocked(r.p.delay)
		}
		return
	}
	if r.inflight == 0 {
		if err := r.ctx.Err(); err != nil {
			r.last = status.FromContextError(err).Err()
		}
		r.win = -1
		r.decide()
	}
}

// pendingLocked reports whether the RPC may send another attempt.
func (r *hedgeRun) pendingLocked() bool {
	return !r.done && r.hedging && len(r.attempts) < r.p.maxAttempts && r.ctx.Err() == nil
}

// report takes an attempt's end into account.
func (r *hedgeRun) report(a *hedgeAttempt, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.inflight--
	// What the attempt was, counted once the RPC is decided too.
	switch unsent := a.noPeer.Load() && !a.sent.Load(); {
	case unsent:
		// Never sent: no backend left that the RPC has not tried. One
		// of the RPC's tokens goes back, as for a retry whose pick
		// finds no peer: the RPC sent one attempt fewer than it took
		// tokens for (the first attempt too may be the one unsent).
		r.h.noBackend.Add(1)
		if r.tokens > 0 {
			r.tokens--
			r.h.budget.Refund()
		}
	case a.i > 0 && a.sent.CompareAndSwap(false, true):
		// No pick of this package saw it get a backend: another
		// policy picked it.
		r.call.hedged.Store(true)
		r.h.hedgeSent(nil)
	}
	if r.done {
		return
	}
	switch {
	case a.noPeer.Load():
		// Neither will a later attempt find a backend.
		r.hedging = false
		if r.last == nil {
			r.last = err
		}
	case err == nil || r.ctx.Err() != nil || !r.p.nonFatal.has(status.Code(err)):
		r.win, r.last = a.i, err
		r.decide()
		return
	default:
		r.last = err
		switch d, stop, ok := pushback(a.trailer); {
		case stop:
			// gRFC A6: pushback that says not to retry sends no
			// more hedges; those in flight go on.
			r.hedging = false
		case ok:
			// Pushback of d: the next attempt d from now, the one
			// after it a hedging delay later (tick).
			if r.pendingLocked() {
				r.armLocked(d)
			}
		default:
			// A non-fatal status sends the next attempt at once,
			// and the one after it a delay later.
			if r.hedgeLocked() && r.timer != nil {
				r.armLocked(r.p.delay)
			}
		}
	}
	// Nothing in flight: the RPC ends, unless a pushback's delay holds
	// its next attempt (every other way to pending sends one at once).
	if r.inflight == 0 && !r.pendingLocked() {
		r.win = -1
		r.decide()
	}
}

// The trailer key of gRFC A6's server pushback.
const pushbackKey = "grpc-retry-pushback-ms"

// pushback reads an attempt's trailer for gRFC A6's server pushback: ok
// when the server sent one; stop when it says not to retry (a negative
// value, one that is not a 32-bit integer, or several values, as grpc-go
// reads them for its retries); otherwise the delay d it asks for.
func pushback(md metadata.MD) (d time.Duration, stop, ok bool) {
	v := md[pushbackKey]
	switch len(v) {
	case 0:
		return 0, false, false
	case 1:
	default:
		return 0, true, true
	}
	n, err := strconv.ParseInt(v[0], 10, 32)
	if err != nil || n < 0 {
		return 0, true, true
	}
	return time.Duration(n) * time.Millisecond, false, true
}

// decide ends the RPC: the other attempts are cancelled at once, since
// the first may hold the caller's goroutine; with an attempt that ended
// it, with lbgo.ErrSuperseded, so that the policy reports each of them
// Superseded (OutcomeOf).
func (r *hedgeRun) decide() {
	r.done = true
	for _, a := range r.attempts {
		if r.win >= 0 && a.i != r.win {
			a.cancel(lbgo.ErrSuperseded)
		} else {
			a.cancel(nil)
		}
	}
	close(r.decided)
}

// errNoOtherPeer is the pick error of a hedged attempt that finds no peer
// the RPC's other attempts have not tried.
var errNoOtherPeer = errors.New("no backend that no other attempt of the RPC has tried")

// hedgeRefusal is the status a pick gives such an attempt: gRPC ends the
// attempt with it at once, without waiting for a new picker.
func hedgeRefusal(name string) error {
	return status.Errorf(codes.Unavailable, "%s: hedged attempt not sent: %v", name, errNoOtherPeer)
}
