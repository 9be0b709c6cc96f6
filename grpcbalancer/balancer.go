package grpcbalancer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/grpclog"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/serviceconfig"
)

var logger = grpclog.Component("lbgo")

// Prefix starts the name of every policy the package registers.
const Prefix = "lbgo_"

// PolicyName returns the gRPC policy name of the picker called algorithm
// (as balancer.Algorithms names it, in any case): Prefix followed by the
// name in lower case, such as "lbgo_fastestfirst" for FastestFirst.
func PolicyName(algorithm string) string { return Prefix + strings.ToLower(algorithm) }

func init() {
	for _, a := range lbgo.Algorithms() {
		balancer.Register(builder{alg: a, name: PolicyName(a.Name)})
	}
}

// builder builds the policy of one algorithm and parses its config.
type builder struct {
	alg  lbgo.Algorithm
	name string
}

func (bb builder) Name() string { return bb.name }

func (bb builder) ParseConfig(js json.RawMessage) (serviceconfig.LoadBalancingConfig, error) {
	return parseConfig(bb.alg, js)
}

// testBuilt, when set by a test, is told of every policy instance built.
var testBuilt func(*lbBalancer)

func (bb builder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	b := &lbBalancer{cc: cc, alg: bb.alg, name: bb.name, target: opts.Target.String(), ends: map[string]*endpoint{}, seed: rand.Uint64()}
	b.probing = probes(bb.alg) || testProbeAll
	remember(b)
	if testBuilt != nil {
		testBuilt(b)
	}
	return b
}

// endpoint is one resolver endpoint: its SubConn, that SubConn's
// connectivity and health states and the picker's peer for it.
type endpoint struct {
	key   string // the peer's address: the endpoint's addresses, comma-separated
	addrs []resolver.Address
	sc    balancer.SubConn
	state connectivity.State // the SubConn's connectivity state
	// health is the state the SubConn's health listener last reported
	// since it became READY: CONNECTING until the first report, READY for
	// SERVING (and at once when client-side health checking is off),
	// TRANSIENT_FAILURE otherwise. Meaningful only while state is READY.
	health connectivity.State
	peer   *lbgo.Peer // the picker's own peer (kept across Update)
}

// up reports whether the endpoint takes RPCs: its SubConn is READY and its
// health listener says so.
func (e *endpoint) up() bool {
	return e.state == connectivity.Ready && e.health == connectivity.Ready
}

// lbBalancer is one ClientConn's policy. gRPC calls its balancer.Balancer
// methods from one goroutine; the wake-up timer calls in from another, so
// mu guards the state both touch, and is held while calling cc.UpdateState
// so that the newest state is the one gRPC sees last.
type lbBalancer struct {
	cc     balancer.ClientConn
	alg    lbgo.Algorithm
	name   string
	target string // the channel's target, for Channel
	seed   uint64 // the channel's seed for random subsetting (gRFC A68 draws one a channel)

	// probing is set for a picker that balances by probes: conns then
	// holds each READY SubConn's connection, and prober probes through
	// them for the picker.
	probing bool
	conns   probeConns

	mu      sync.Mutex
	closed  bool
	cfg     *lbConfig
	picker  lbgo.Balancer
	ends    map[string]*endpoint
	connErr error       // the last connection or resolver error, for a failing picker
	prober  *grpcProber // the picker's prober, if probing; one per picker
	pushed  *picker     // the picker handed to gRPC last

	// rpcs maps an RPC (the Done channel of its context, the same for all
	// its attempts) to the Request its retries share; see pick.go.
	rpcs sync.Map

	// waiting is set when a Pick found no live peer: the next Done pushes
	// a new picker, since a finished attempt may free a max_conns slot.
	waiting atomic.Bool

	wmu     sync.Mutex // guards the wake-up timer
	timer   *time.Timer
	timerAt time.Time
}

func (b *lbBalancer) UpdateClientConnState(s balancer.ClientConnState) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	cfg, _ := s.BalancerConfig.(*lbConfig)
	if cfg == nil {
		cfg = defaultConfig()
	}
	eps := s.ResolverState.Endpoints
	if len(eps) == 0 {
		for _, a := range s.ResolverState.Addresses {
			eps = append(eps, resolver.Endpoint{Addresses: []resolver.Address{a}, Attributes: a.BalancerAttributes})
		}
	}
	eps = b.subsetOf(cfg, eps) // the config's subset, if any: only its endpoints get a SubConn

	// Reconcile SubConns: keep those of kept endpoints, create the new ones.
	next := make(map[string]*endpoint, len(eps))
	weights := make(map[string]int, len(eps))
	order := make([]*endpoint, 0, len(eps))
	ws := weightsOf(eps)
	for i, ep := range eps {
		if len(ep.Addresses) == 0 {
			continue
		}
		key := endpointKey(ep)
		if next[key] != nil {
			continue // the same endpoint twice: one peer
		}
		e := b.ends[key]
		if e == nil {
			e = &endpoint{key: key, addrs: ep.Addresses, state: connectivity.Idle}
		}
		next[key] = e
		weights[key] = ws[i]
		order = append(order, e)
	}

	// New endpoints get their SubConn now, so that the peer carries it
	// from the start; they connect once the picker holds them.
	var created []*endpoint
	for i := 0; i < len(order); i++ {
		e := order[i]
		if e.sc != nil {
			continue
		}
		sc, err := b.cc.NewSubConn(e.addrs, balancer.NewSubConnOptions{
			StateListener: func(st balancer.SubConnState) { b.subConnState(e, st) },
		})
		if err != nil {
			logger.Warningf("%s: creating a SubConn for %s: %v", b.name, e.key, err)
			delete(next, e.key)
			order = append(order[:i], order[i+1:]...)
			i--
			continue
		}
		e.sc = sc
		created = append(created, e)
	}

	// The picker's peers: a snapshot that Update reconciles, so kept peers
	// keep their state; a change of picker options builds a new picker.
	rebuild := b.picker == nil || b.cfg == nil || cfg.optsKey != b.cfg.optsKey
	// A probing picker is rebuilt with new probe settings too, and each
	// one gets a prober of its own, which it closes.
	if b.probing && b.cfg != nil && cfg.probe != b.cfg.probe {
		rebuild = true
	}
	snapshot := make([]*lbgo.Peer, len(order))
	for i, e := range order {
		snapshot[i] = cfg.newPeer(e.key, weights[e.key], !e.up(), e.sc)
	}
	var prober *grpcProber
	var err error
	if b.probing && rebuild {
		prober, err = newGRPCProber(&b.conns, cfg.probe) // refuses nothing: parseConfig checked the settings
	}
	picker := b.picker
	switch {
	case err != nil:
	case rebuild:
		picker, err = b.alg.New(snapshot, pickerOptions(b.alg, cfg, prober)...)
	default:
		err = picker.Update(snapshot)
	}
	if err != nil {
		if prober != nil {
			_ = prober.Close()
		}
		for _, e := range created {
			e.sc.Shutdown()
			e.sc = nil
		}
		logger.Warningf("%s: resolver update refused, keeping the previous peers: %v", b.name, err)
		return fmt.Errorf("%w: %s: %w", balancer.ErrBadResolverState, b.name, err)
	}
	if rebuild && b.picker != nil {
		b.closePickerLocked() // its probes under way are dropped
	}
	b.picker, b.cfg = picker, cfg
	if prober != nil {
		b.prober = prober
	}

	for key, e := range b.ends {
		if next[key] == nil {
			b.conns.drop(e.sc)
			e.sc.Shutdown()
		}
	}
	b.ends = next
	for _, e := range created {
		e.sc.Connect()
	}
	peers := picker.Peers()
	for _, p := range peers {
		if e := next[p.Addr()]; e != nil {
			e.peer = p
		}
	}

	if len(order) == 0 {
		b.connErr = errors.New("the resolver gave no addresses")
		b.pushLocked()
		return balancer.ErrBadResolverState
	}
	b.pushLocked()
	return nil
}

// endpointKey names an endpoint by its addresses.
func endpointKey(ep resolver.Endpoint) string {
	if len(ep.Addresses) == 1 {
		return ep.Addresses[0].Addr
	}
	s := make([]string, len(ep.Addresses))
	for i, a := range ep.Addresses {
		s[i] = a.Addr
	}
	return strings.Join(s, ",")
}

func (b *lbBalancer) ResolverError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.connErr = fmt.Errorf("resolver: %w", err)
	if len(b.ends) == 0 {
		b.pushLocked() // nothing to balance over: fail fast RPCs with the error
	}
}

func (b *lbBalancer) UpdateSubConnState(sc balancer.SubConn, st balancer.SubConnState) {
	logger.Errorf("%s: UpdateSubConnState(%v, %+v) called; StateListener is used instead", b.name, sc, st)
}

// subConnState maps a SubConn's connectivity state onto its peer: down
// unless READY and healthy. On READY it registers a health listener, as
// gRPC asks of a policy at each READY (grpc-go 1.85: pick_first does it for
// round_robin; with client-side health checking off, gRPC answers the
// listener with one READY). The peer stays down until the listener's
// first report.
func (b *lbBalancer) subConnState(e *endpoint, st balancer.SubConnState) {
	if b.probing && st.ConnectivityState != connectivity.Ready {
		b.conns.drop(e.sc) // gRPC has closed its producer
	}
	b.mu.Lock()
	if b.closed || b.ends[e.key] != e || st.ConnectivityState == connectivity.Shutdown {
		b.mu.Unlock()
		return
	}
	wasUp := e.up()
	e.state = st.ConnectivityState
	switch e.state {
	case connectivity.Idle:
		e.sc.Connect() // reconnect at once; gRPC's backoff already paced it
	case connectivity.TransientFailure:
		b.connErr = st.ConnectionError
	case connectivity.Ready:
		e.health = connectivity.Connecting
	}
	b.setDownLocked(e, wasUp)
	b.pushLocked()
	b.mu.Unlock()
	if st.ConnectivityState == connectivity.Ready {
		// Outside b.mu: gRPC takes its own lock here and holds it while
		// calling the listener, which takes b.mu. gRPC drops a listener
		// registered before a later state change, and calls this one and
		// the listener from one goroutine, so no update overtakes another.
		e.sc.RegisterHealthListener(func(st balancer.SubConnState) { b.healthState(e, st) })
		if b.probing {
			b.conns.ready(e.sc)
		}
	}
}

// healthState maps a READY SubConn's health, as its listener reports it,
// onto its peer: down unless READY (SERVING).
func (b *lbBalancer) healthState(e *endpoint, st balancer.SubConnState) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.ends[e.key] != e || e.state != connectivity.Ready {
		return
	}
	wasUp := e.up()
	e.health = st.ConnectivityState
	if e.health == connectivity.TransientFailure && st.ConnectionError != nil {
		b.connErr = st.ConnectionError
	}
	b.setDownLocked(e, wasUp)
	b.pushLocked()
}

// setDownLocked marks e's peer down or up when e.up() is no longer wasUp.
// Requires b.mu.
func (b *lbBalancer) setDownLocked(e *endpoint, wasUp bool) {
	if up := e.up(); up != wasUp && e.peer != nil {
		if err := b.picker.SetDown(e.peer, !up); err != nil {
			logger.Warningf("%s: SetDown(%s): %v", b.name, e.key, err)
		}
	}
}

func (b *lbBalancer) ExitIdle() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, e := range b.ends {
		if e.state == connectivity.Idle && e.sc != nil {
			e.sc.Connect()
		}
	}
}

func (b *lbBalancer) Close() {
	forget(b)
	b.mu.Lock()
	b.closed = true
	for _, e := range b.ends {
		if e.sc != nil {
			e.sc.Shutdown()
		}
	}
	b.ends = nil
	if b.picker != nil {
		b.closePickerLocked()
	}
	b.mu.Unlock()
	b.conns.dropAll()
	b.wmu.Lock()
	if b.timer != nil {
		b.timer.Stop()
		b.timer = nil
	}
	b.wmu.Unlock()
}

// closePickerLocked closes the picker being replaced or the policy's at
// its close: its Close, if it has one (Prequal's closes its prober), and
// the prober, which waits for the probes under way (they end now, and are
// not answered). gRPC's pickers made over it may still pick from it,
// which a closed Prequal does as P2CPeakEWMA. Requires b.mu.
func (b *lbBalancer) closePickerLocked() {
	if c, ok := b.picker.(io.Closer); ok {
		if err := c.Close(); err != nil {
			logger.Warningf("%s: closing the picker: %v", b.name, err)
		}
	}
	if b.prober != nil {
		_ = b.prober.Close()
		b.prober = nil
	}
}

// pushLocked hands gRPC a new picker over the current peers, with the
// ClientConn's aggregate state: READY if an endpoint is up (READY and
// healthy), else CONNECTING if one is connecting, idle (about to connect)
// or READY awaiting its first health report, else TRANSIENT_FAILURE, whose
// picker fails fail-fast RPCs with the last connection or health error
// while wait-for-ready ones wait. Requires b.mu.
func (b *lbBalancer) pushLocked() {
	ready, connecting := false, false
	for _, e := range b.ends {
		switch {
		case e.up():
			ready = true
		case e.state == connectivity.Connecting, e.state == connectivity.Idle,
			e.state == connectivity.Ready && e.health == connectivity.Connecting:
			connecting = true
		}
	}
	p := &picker{b: b, lb: b.picker, cfg: b.cfg}
	state := connectivity.Ready
	switch {
	case ready:
	case connecting:
		state = connectivity.Connecting
		p.err = balancer.ErrNoSubConnAvailable
	default:
		state = connectivity.TransientFailure
		p.err = fmt.Errorf("%s: no peer is connected and healthy: %v", b.name, b.connErr)
	}
	b.pushed = p
	b.cc.UpdateState(balancer.State{ConnectivityState: state, Picker: p})
}

// wakeAt makes the policy push a new picker at t, unless a wake-up at or
// before t is already set.
func (b *lbBalancer) wakeAt(t time.Time) {
	b.wmu.Lock()
	defer b.wmu.Unlock()
	if b.timer != nil && !b.timerAt.After(t) {
		return
	}
	if b.timer != nil {
		b.timer.Stop()
	}
	b.timerAt = t
	b.timer = time.AfterFunc(time.Until(t), b.wake)
}

// wake pushes a new picker, so RPCs that waited for an eligible peer pick
// again.
func (b *lbBalancer) wake() {
	b.wmu.Lock()
	b.timer = nil
	b.wmu.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.closed && b.picker != nil {
		b.pushLocked()
	}
}
