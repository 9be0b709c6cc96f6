package balancer

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer/internal/defaults"
)

// Peer is one upstream server and the balancing state a picker keeps for it,
// the same state nginx keeps per server:
//
//   - weight, the configured weight;
//   - effective_weight, lowered by weight/max_fails on each failure (clamped
//     at 0) and raised by one in each selection round in which the peer is
//     eligible, back up to weight;
//   - current_weight, the smooth round-robin state;
//   - fails, the failure count that, at max_fails, takes the peer out for
//     fail_timeout; the in-flight count (nginx's conns); the last failure
//     ("accessed") and last check ("checked") times.
//
// Build a Peer with NewPeer and hand it to one picker; its configuration then
// changes only through that picker's update methods. A peer's identity is
// the Peer, not its address: two peers with one address are two servers,
// as two nginx `server` lines with one address are. Reading a Peer (Addr,
// Weight, State) is safe at any time, from any goroutine.
//
// The zero value is not usable; use NewPeer.
type Peer struct {
	addr      string
	configErr error // the first bad PeerOption; reported when added

	// Parameters: set by NewPeer, changed only by the owner's Update under
	// its lock, read lock-free.
	maxFails    atomic.Int64
	failTimeout atomic.Int64 // nanoseconds
	maxConns    atomic.Int64
	backup      atomic.Bool
	value       atomic.Pointer[any] // the caller's value; nil: none

	// server is nginx's rr_peer server: the server text as configured
	// (RR.c 105 sets peer[n].server = server[i].name), which may differ
	// from the address; "" means addr. ConsistentHash hashes it (HashText).
	server string

	weight atomic.Int64
	down   atomic.Bool
	// slots packs two counters into the one word a pick writes: the
	// attempts in flight (nginx's conns) in the low connBits bits, and
	// every attempt ever picked above them; see eligibility.go.
	slots atomic.Int64

	// state is the per-peer state of the algorithm that claimed the peer
	// last (peerstate.go): stored by the peer set at the claim, under its
	// lock and ownerMu, before the list holding the peer is published;
	// loaded lock-free. Beside slots, which every pick reads too.
	state atomic.Pointer[peerState]

	// warmFrom is when the peer's slow start began (unix nanoseconds), 0
	// if it never did (guard_slowstart.go): written under the owner's lock,
	// read lock-free by the picks.
	warmFrom atomic.Int64

	// Total failures reported since NewPeer, for Stats.
	failures atomic.Uint64
	// outcomes counts the attempts (high 32 bits) and successes (low 32)
	// reported in WithSuccessRateEjection's current interval
	// (guard_outlier.go); written lock-free by Done, swapped to 0 by the
	// interval's evaluation.
	outcomes atomic.Uint64

	// Failure accounting. Written by the owning picker, under its lock or,
	// for the probe claim, by compare-and-swap; read lock-free.
	fails    atomic.Int64
	accessed atomic.Int64 // unix nanoseconds of the last failure
	checked  atomic.Int64 // unix nanoseconds of the last failure or probe

	// ejections is Envoy's ejection multiplier under WithEjectionBackoff
	// (guard_backoff.go), 0 without it; written under the owner's lock,
	// read lock-free by the window test. outUntil is the end of the last
	// ejection's window (unix ns), from which its decay is counted;
	// guarded by owner.mu.
	ejections atomic.Int64
	outUntil  int64

	owner atomic.Pointer[peerSet]
	// held is the picker that claimed the peer last, kept after it lets
	// the peer go, so that only that picker takes the reports of attempts
	// still in flight on a removed peer (see peerSet.finish). Set with
	// owner, under ownerMu, once a claim has succeeded.
	held atomic.Pointer[peerSet]

	// recovering is set while effectiveWeight is below the weight, so that
	// a lock-free path (ConsistentHash's first attempt, FastestFirst's
	// sampled report) can tell, without the lock, whether nginx's smooth
	// step would move it; written with effectiveWeight: by
	// setEffectiveLocked, and by smoothStep's increment, which clears it
	// when the weight is reached.
	recovering atomic.Bool

	// Guarded by owner.mu.
	effectiveWeight int64
	// smooth is the weight nginx's smooth step, failure accounting and the
	// precomputed cycle aim at (weight in RR.c): the configured weight,
	// which every weight change sets it to (setWeightLocked), or, under
	// ReportedWRR, the weight it derives from the servers' reports.
	smooth        int64
	currentWeight int64
	index         int // position in its list
}

// A PeerOption sets one server parameter in NewPeer. Leaving an option out
// gives nginx's default; passing it sets the value exactly, zero included,
// which is how MaxFails(0) disables failure accounting as max_fails=0 does.
type PeerOption func(*Peer)

// Weight sets the peer's weight (nginx's weight=N). Default 1. Weight 0 is
// allowed: such a peer is never chosen while another has weight.
func Weight(w int) PeerOption {
	return func(p *Peer) {
		if w < 0 || w > MaxWeightSum {
			p.invalid(fmt.Errorf("balancer: peer %q: weight %d out of range [0, %d]: %w", p.addr, w, MaxWeightSum, ErrInvalidConfig))
			return
		}
		p.weight.Store(int64(w))
	}
}

// MaxFails sets how many failures within FailTimeout take the peer out of
// rotation for FailTimeout (nginx's max_fails=N). Default 1. MaxFails(0)
// disables failure accounting: the peer is never taken out and its
// effective weight never drops.
func MaxFails(n int) PeerOption {
	return func(p *Peer) {
		if n < 0 {
			p.invalid(fmt.Errorf("balancer: peer %q: negative max_fails %d: %w", p.addr, n, ErrInvalidConfig))
			return
		}
		p.maxFails.Store(int64(n))
	}
}

// FailTimeout sets both the window in which MaxFails failures must occur and
// how long the peer then stays out (nginx's fail_timeout). Default 10 s.
func FailTimeout(d time.Duration) PeerOption {
	return func(p *Peer) {
		if d < 0 {
			p.invalid(fmt.Errorf("balancer: peer %q: negative fail_timeout %v: %w", p.addr, d, ErrInvalidConfig))
			return
		}
		p.failTimeout.Store(int64(d))
	}
}

// MaxConns caps the peer's in-flight attempts (nginx's max_conns=N). Default
// 0, unlimited.
func MaxConns(n int) PeerOption {
	return func(p *Peer) {
		if n < 0 {
			p.invalid(fmt.Errorf("balancer: peer %q: negative max_conns %d: %w", p.addr, n, ErrInvalidConfig))
			return
		}
		p.maxConns.Store(int64(n))
	}
}

// Backup marks a backup peer (nginx's backup): it is used only when no
// primary peer is eligible.
func Backup() PeerOption { return func(p *Peer) { p.backup.Store(true) } }

// Value attaches the caller's value v to the peer, such as the connection
// or client that reaches it; Peer.Value returns it from a picked peer with
// no lookup and no allocation. Update moves a snapshot peer's value to the
// peer it keeps.
func Value(v any) PeerOption { return func(p *Peer) { p.value.Store(&v) } }

// Down marks the peer permanently unavailable (nginx's down) until the
// picker's SetDown brings it up.
func Down() PeerOption { return func(p *Peer) { p.down.Store(true) } }

// NewPeer returns a peer for addr with nginx's defaults changed by opts. A
// bad option value is reported, naming the value, by the picker the peer is
// given to; NewPeer itself never fails.
func NewPeer(addr string, opts ...PeerOption) *Peer {
	p := &Peer{addr: addr}
	p.maxFails.Store(defaults.MaxFails)
	p.failTimeout.Store(int64(defaults.FailTimeout))
	p.weight.Store(defaults.Weight)
	if addr == "" {
		p.invalid(fmt.Errorf("balancer: empty peer address: %w", ErrInvalidConfig))
	}
	for _, o := range opts {
		if o != nil {
			o(p)
		}
	}
	p.setWeightLocked(p.weight.Load())
	return p
}

func (p *Peer) invalid(err error) {
	if p.configErr == nil {
		p.configErr = err
	}
}

// adopt gives p, a peer the picker keeps across Update, the configuration of
// q, the snapshot peer matched to it (see peerSet.Update). A changed weight resets the
// effective weight, as SetWeight does. Requires the owner's lock.
func (p *Peer) adopt(q *Peer) {
	if w := q.weight.Load(); w != p.weight.Load() {
		p.weight.Store(w)
		p.setWeightLocked(w)
	}
	p.maxFails.Store(q.maxFails.Load())
	p.failTimeout.Store(q.failTimeout.Load())
	p.maxConns.Store(q.maxConns.Load())
	p.backup.Store(q.backup.Load())
	p.down.Store(q.down.Load())
	p.value.Store(q.value.Load())
}

// Adopt gives p, a peer no picker holds, q's configuration: its weight,
// max_fails, fail_timeout, max_conns, backup and down flags and value (not
// its address or hash text), as Update gives a peer it keeps the
// configuration of the snapshot peer matched to it; a changed weight resets
// the effective weight. It is for code that keeps peers beside a picker, as
// subset.Subset keeps the backends outside its subset. It changes nothing
// and returns ErrPeerInUse if a picker holds p (change p through it), and
// q's Err if q has one.
func (p *Peer) Adopt(q *Peer) error {
	if q.configErr != nil {
		return q.configErr
	}
	ownerMu.Lock() // a claim stores the owner under it: p stays free meanwhile
	defer ownerMu.Unlock()
	if p.owner.Load() != nil {
		return fmt.Errorf("balancer: Adopt: peer %q: %w", p.addr, ErrPeerInUse)
	}
	p.adopt(q)
	return nil
}

// Err returns the error of the first bad option p was built with (an
// ErrInvalidConfig naming the value), nil if there was none: what a picker
// refuses p with when it is added.
func (p *Peer) Err() error { return p.configErr }

// InUse reports whether a picker holds p: whether adding p to another
// picker would be refused with ErrPeerInUse.
func (p *Peer) InUse() bool { return p.owner.Load() != nil }

// setWeightLocked aims the smooth step at w, the configured weight, with
// the effective weight at w. Requires the owner's lock, or p held by no
// picker.
func (p *Peer) setWeightLocked(w int64) {
	p.smooth = w
	p.setEffectiveLocked(w)
}

// setEffectiveLocked sets p's effective weight, and recovering with it
// (below the smooth step's weight).
// Requires the owner's lock, or p held by no picker.
func (p *Peer) setEffectiveLocked(ew int64) {
	p.effectiveWeight = ew
	p.recovering.Store(ew < p.smooth)
}

// Addr returns the address the peer was created with: the server's.
// (Request.ClientAddr is the client's.)
func (p *Peer) Addr() string { return p.addr }

// String returns the peer's address, as Addr does: it is there so that
// fmt's %v and %s print a peer as its address. Code that wants the address
// calls Addr.
func (p *Peer) String() string { return p.addr }

// Weight returns the configured weight.
func (p *Peer) Weight() int { return int(p.weight.Load()) }

// MaxFails returns max_fails; 0 means failure accounting is off.
func (p *Peer) MaxFails() int { return int(p.maxFails.Load()) }

// FailTimeout returns fail_timeout.
func (p *Peer) FailTimeout() time.Duration { return time.Duration(p.failTimeout.Load()) }

// MaxConns returns max_conns; 0 means unlimited.
func (p *Peer) MaxConns() int { return int(p.maxConns.Load()) }

// Value returns the value attached with the Value option, or nil.
func (p *Peer) Value() any {
	if v := p.value.Load(); v != nil {
		return *v
	}
	return nil
}

// IsBackup reports whether the peer is a backup peer.
func (p *Peer) IsBackup() bool { return p.backup.Load() }

// IsDown reports whether the peer is marked down.
func (p *Peer) IsDown() bool { return p.down.Load() }

// InFlight returns the number of attempts picked and not yet reported.
//
// Deprecated: use Stats().InFlight.
func (p *Peer) InFlight() int { return int(p.inFlight()) }

// PeerState is a snapshot of a peer's balancing state.
//
// Deprecated: use PeerStats, which Peer.Snapshot fills.
type PeerState struct {
	Weight          int
	EffectiveWeight int
	DerivedWeight   int // the weight a picker derives: FastestFirst's from latency (out of 100), ReportedWRR's from reports (its smooth step's); 0 under other pickers
	CurrentWeight   int
	Fails           int
	InFlight        int
	Down            bool
	Accessed        time.Time // last failure; zero if none
	Checked         time.Time // last failure or probe; zero if none
}

// weightsNow returns p's current and effective weights under its owner's
// lock, the current weight as the owner keeps it (SmoothWRR's cycle and
// weight groups keep it implicitly). An owner that lost p between the load
// and the lock (a concurrent Remove) is let go, and the new owner, if any,
// asked.
func (p *Peer) weightsNow() (cw, ew int64) {
	for {
		s := p.owner.Load()
		if s == nil {
			ownerMu.Lock()
			if p.owner.Load() == nil { // no picker holds it: nothing writes them
				cw, ew = p.currentWeight, p.effectiveWeight
				ownerMu.Unlock()
				return cw, ew
			}
			ownerMu.Unlock()
			continue
		}
		s.mu.Lock()
		if p.owner.Load() != s {
			s.mu.Unlock()
			continue
		}
		cw, ew = p.currentWeight, p.effectiveWeight
		if s.currentWeight != nil {
			if v, ok := s.currentWeight(p); ok {
				cw = v
			}
		}
		cw = s.slow.currentLocked(cw) // while a peer warms (guard_slowstart.go)
		s.mu.Unlock()
		return cw, ew
	}
}

// State returns a consistent snapshot of the peer's state. It takes the
// owning picker's lock briefly, so it is safe while other goroutines pick.
//
// Deprecated: use Snapshot, which returns PeerStats.
func (p *Peer) State() PeerState {
	cw, ew := p.weightsNow()
	var derived int64
	if d, ok := p.stateOf().(derivedWeigher); ok {
		derived = d.derivedWeight()
	}
	return PeerState{
		Weight:          int(p.weight.Load()),
		EffectiveWeight: int(ew),
		DerivedWeight:   int(derived),
		CurrentWeight:   int(cw),
		Fails:           int(p.fails.Load()),
		InFlight:        int(p.inFlight()),
		Down:            p.down.Load(),
		Accessed:        unixTime(p.accessed.Load()),
		Checked:         unixTime(p.checked.Load()),
	}
}

func unixTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// checkWeightSum returns an error if the weights of peers overflow MaxWeightSum.
func checkWeightSum(peers []*Peer) error {
	var sum int64
	for _, p := range peers {
		sum += p.weight.Load()
		if sum > MaxWeightSum {
			return fmt.Errorf("balancer: weights sum past %d at peer %q: %w", MaxWeightSum, p.addr, ErrInvalidConfig)
		}
	}
	return nil
}

// HashText sets the text ConsistentHash hashes for the peer to place it on
// its ring, and subsetting to rank it: the server as written in nginx's
// configuration, which may differ from the address the peer is dialed at
// (`server 10.0.0.1;` hashes "10.0.0.1", while the peer is at
// 10.0.0.1:80). Peers that share a hash text share their ring points, as
// the addresses one nginx server name resolves to do, and smooth
// round-robin chooses among them. Default: the peer's address. An empty
// text is rejected with ErrInvalidConfig when the peer is added. (A
// request's key, Request.SetKey, is what is looked up on the ring.)
func HashText(text string) PeerOption {
	return func(p *Peer) {
		if text == "" {
			p.invalid(fmt.Errorf("balancer: peer %q: empty hash text: %w", p.addr, ErrInvalidConfig))
			return
		}
		p.server = text
	}
}

// HashText returns the text ConsistentHash and subsetting hash for p: the
// one given with the HashText option, or the peer's address.
func (p *Peer) HashText() string {
	if p.server != "" {
		return p.server
	}
	return p.addr
}

// HashKey sets the text ConsistentHash hashes for the peer.
//
// Deprecated: use HashText; "key" is the request's (Request.SetKey).
func HashKey(text string) PeerOption { return HashText(text) }

// HashKey returns the text ConsistentHash hashes for p.
//
// Deprecated: use HashText; "key" is the request's (Request.SetKey).
func (p *Peer) HashKey() string { return p.HashText() }
