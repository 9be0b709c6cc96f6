package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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
// A budget bounds the extra attempts: a balancer.RetryBudget (default
// DefaultHedgeRatio, DefaultHedgeMinPerSecond, DefaultHedgeWindow; see
// WithHedgeBudget) in which each hedged RPC deposits one token and each
// attempt after the first withdraws one; once one is refused, the RPC
// sends no more. gRPC's retryThrottling is not used: it counts only
// failures, so a backend that is slow but answers OK, the case hedging is
// for, would never throttle hedges.
//
// Under an lbgo_ policy of this package the attempts of one RPC share its
// tried set, so each goes to a backend that no other attempt of the RPC
// has been sent to; an attempt that finds none is not sent (NoBackend in
// Stats). Under another policy they are picked independently.
//
// Streaming RPCs, methods without a hedgingPolicy and replies that are not
// proto messages are passed through untouched. Use the interceptor
// (Intercept) with the same service config given to the channel, or
// DialOptions, which gives both. A Hedging is safe for concurrent use and
// may serve many channels; Stats sums them.
type Hedging struct {
	sc       string
	policies hedgePolicies
	budget   *lbgo.RetryBudget

	rpcs, hedges, won, refused, noBackend atomic.Uint64
}

// HedgingStats counts what a Hedging has done since it was made.
type HedgingStats struct {
	RPCs      uint64 // RPCs of a method with a hedgingPolicy
	Hedges    uint64 // attempts after the first, sent with the budget's leave
	Won       uint64 // RPCs whose OK answer came from an attempt after the first
	Refused   uint64 // attempts after the first that the budget refused
	NoBackend uint64 // attempts not sent: no backend the RPC's other attempts had not tried
}

// HedgingOption configures NewHedging.
type HedgingOption func(*Hedging) error

// WithHedgeBudget makes the Hedging take its extra attempts from b, which
// may be shared with other clients' retries or hedges. nil is refused.
func WithHedgeBudget(b *lbgo.RetryBudget) HedgingOption {
	return func(h *Hedging) error {
		if b == nil {
			return fmt.Errorf("%w: WithHedgeBudget(nil)", ErrBadHedgingConfig)
		}
		h.budget = b
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
		b, err := lbgo.NewRetryBudget(DefaultHedgeRatio, DefaultHedgeMinPerSecond, DefaultHedgeWindow)
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

// hedgingUsed is set once a Hedging with a policy exists: only then does a
// pick look for a hedged attempt in its context.
var hedgingUsed atomic.Bool

// hedgeKey is the context key of a hedged attempt (a *hedgeAttempt).
type hedgeKey struct{}

// hedgeCall is one hedged RPC: the retry state its attempts share in the
// picker (pick.go), so each picks a peer the others have not.
type hedgeCall struct {
	rpc rpc
}

// hedgeAttempt is one attempt of a hedged RPC.
type hedgeAttempt struct {
	call   *hedgeCall
	reply  proto.Message
	cancel context.CancelFunc
	noPeer atomic.Bool // the picker found no peer the other attempts had not tried

	// Where the attempt writes what the caller asked for with grpc.Header,
	// grpc.Trailer and grpc.Peer; copied out if it wins.
	header, trailer metadata.MD
	peer            peer.Peer
}

type hedgeResult struct {
	i   int
	err error
}

// Intercept is the grpc.UnaryClientInterceptor that hedges.
func (h *Hedging) Intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	p := h.policies.lookup(method)
	msg, ok := reply.(proto.Message)
	if p == nil || !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	h.rpcs.Add(1)
	h.budget.Deposit()

	// The caller's per-call outputs, which only the winner fills.
	var (
		headerTo, trailerTo *metadata.MD
		peerTo              *peer.Peer
		onFinish            []func(error)
		passed              = make([]grpc.CallOption, 0, len(opts)+3)
	)
	for _, o := range opts {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			headerTo = o.HeaderAddr
		case grpc.TrailerCallOption:
			trailerTo = o.TrailerAddr
		case grpc.PeerCallOption:
			peerTo = o.PeerAddr
		case grpc.OnFinishCallOption:
			onFinish = append(onFinish, o.OnFinish)
		default:
			passed = append(passed, o)
		}
	}

	// The reply's type, read before the first attempt writes to msg.
	mt := msg.ProtoReflect().Type()
	call := &hedgeCall{}
	attempts := make([]*hedgeAttempt, 0, p.maxAttempts)
	results := make(chan hedgeResult, p.maxAttempts)
	start := func() {
		i := len(attempts)
		a := &hedgeAttempt{call: call, reply: msg}
		if i > 0 {
			a.reply = mt.New().Interface()
		}
		actx := context.WithValue(ctx, hedgeKey{}, a)
		if i > 0 {
			actx = metadata.AppendToOutgoingContext(actx, "grpc-previous-rpc-attempts", strconv.Itoa(i))
		}
		actx, a.cancel = context.WithCancel(actx)
		aopts := passed
		if headerTo != nil || trailerTo != nil || peerTo != nil {
			aopts = append(passed[:len(passed):len(passed)], grpc.Header(&a.header), grpc.Trailer(&a.trailer), grpc.Peer(&a.peer))
		}
		attempts = append(attempts, a)
		go func() { results <- hedgeResult{i, invoker(actx, method, req, a.reply, cc, aopts...)} }()
	}

	start()
	inflight, hedging := 1, true
	// hedge sends the next attempt if maxAttempts and the budget allow.
	hedge := func() {
		if !hedging || len(attempts) >= p.maxAttempts || ctx.Err() != nil {
			return
		}
		if !h.budget.TryWithdraw() {
			h.refused.Add(1)
			hedging = false
			return
		}
		h.hedges.Add(1)
		start()
		inflight++
	}
	var timer *time.Timer
	var tick <-chan time.Time
	arm := func() {
		switch {
		case !hedging || len(attempts) >= p.maxAttempts:
			tick = nil
		case timer == nil:
			timer = time.NewTimer(p.delay)
			tick = timer.C
		default:
			timer.Reset(p.delay)
			tick = timer.C
		}
	}
	if p.delay == 0 {
		for len(attempts) < p.maxAttempts && hedging {
			hedge()
		}
	} else {
		arm()
	}

	win := -1
	var last error
	for win < 0 && inflight > 0 {
		select {
		case <-tick:
			hedge()
			arm()
		case r := <-results:
			inflight--
			if attempts[r.i].noPeer.Load() {
				// Never sent: no backend left that the RPC has not
				// tried. Neither will a later attempt find one.
				h.noBackend.Add(1)
				hedging = false
				if last == nil {
					last = r.err
				}
				arm()
				continue
			}
			if r.err == nil || ctx.Err() != nil || !p.nonFatal.has(status.Code(r.err)) {
				win = r.i
				last = r.err
				break
			}
			last = r.err
			hedge() // gRFC A6: a non-fatal status sends the next at once
			arm()
		}
	}
	if timer != nil {
		timer.Stop()
	}
	for _, a := range attempts {
		a.cancel()
	}
	for ; inflight > 0; inflight-- {
		<-results // the losers return soon after their cancel
	}
	if win > 0 {
		w := attempts[win]
		if last == nil {
			h.won.Add(1)
		}
		proto.Reset(msg)
		proto.Merge(msg, w.reply)
	}
	if win >= 0 {
		w := attempts[win]
		if headerTo != nil {
			*headerTo = w.header
		}
		if trailerTo != nil {
			*trailerTo = w.trailer
		}
		if peerTo != nil {
			*peerTo = w.peer
		}
	}
	for _, f := range onFinish {
		f(last)
	}
	return last
}

// errNoOtherPeer is the pick error of a hedged attempt that finds no peer
// the RPC's other attempts have not tried.
var errNoOtherPeer = errors.New("no backend that no other attempt of the RPC has tried")

// hedgeRefusal is the status a pick gives such an attempt: gRPC ends the
// attempt with it at once, without waiting for a new picker.
func hedgeRefusal(name string) error {
	return status.Errorf(codes.Unavailable, "%s: hedged attempt not sent: %v", name, errNoOtherPeer)
}
