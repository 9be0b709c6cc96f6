package balancer

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// peerList is an immutable snapshot of a picker's peers, replaced whole on
// every change so that lock-free pickers can read it with one atomic load.
type peerList struct {
	primary []*Peer
	backup  []*Peer
	gen     uint64
	tries   int            // peers not down, both lists: nginx's pc->tries
	single  bool           // one primary and no backup: nginx's peers->single
	noLive  *atomic.Uint64 // the owner's count of ErrNoLivePeer, bumped by pickFrame
}

func (l *peerList) empty() bool { return len(l.primary)+len(l.backup) == 0 }

// ownerMu serializes a peer's change of owner (Add, Update, Remove, with
// the owner's lock held) with State's reads of a peer no picker holds,
// which have no owner's lock to take. It is never taken on a pick or a
// report.
var ownerMu sync.Mutex

// listGen numbers every peer list of every picker, so that a Request
// carried from one picker to another, or across a change, never mistakes
// one list's tried bits for another's.
var listGen atomic.Uint64

// peerSet holds a picker's peers and implements the update methods every
// picker shares. Its exported methods are promoted into each picker.
type peerSet struct {
	mu   sync.Mutex // serializes changes; the smooth pickers pick under it too
	list atomic.Pointer[peerList]
	now  func() int64

	// changed runs with mu held after every change, so a picker can
	// rebuild what it derives from the peer list.
	changed func(*peerList)

	// currentWeight, if set, returns a peer's current weight where the
	// picker keeps it implicitly (SmoothWRR's cycle). Runs with mu held.
	currentWeight func(*Peer) (int64, bool)

	// fresh, if set, makes the per-peer state of the picker's algorithm
	// for a peer claimed at now (peerstate.go). Set before init; read
	// under mu.
	fresh func(now int64) *peerState

	noLive atomic.Uint64 // picks that returned ErrNoLivePeer
	events func(Event)   // WithEvents' hook; nil: none
	sight  sightWatch    // the peers gone blind (sight.go)

	// picker names the owner in errors; noBackups, from its declaration
	// (pickerSpec), makes Add and Update refuse backup peers. Set by init.
	picker    string
	noBackups bool

	guardSet // the guards, all behind one seam (guards.go); set by init

	inSubset atomic.Bool // a wrapper holds the picker as its inner one (Claim)
}

func (s *peerSet) claimInner() bool { return s.inSubset.CompareAndSwap(false, true) }
func (s *peerSet) releaseInner()    { s.inSubset.Store(false) }

// Claim marks b as the inner picker of one wrapper that sets its peers
// wholesale, as subset.Subset hands it one client's subset: two such
// wrappers over one picker would take each other's peers in turn. It
// returns ErrPeerInUse if a wrapper holds b already, and otherwise release,
// which undoes the claim for a wrapper whose construction then failed. A
// picker of this package (or the deprecated Subset) stays claimed for its
// life; any other Balancer is not tracked, and release does nothing.
func Claim(b Balancer) (release func(), err error) {
	c, ok := b.(innerClaim)
	if !ok {
		return func() {}, nil
	}
	if !c.claimInner() {
		return nil, fmt.Errorf("balancer: Claim: the %T serves another wrapper: %w", b, ErrPeerInUse)
	}
	return c.releaseInner, nil
}

// innerClaim is an inner picker that knows whether a wrapper holds it: the
// peer set, and the deprecated Subset.
type innerClaim interface {
	claimInner() bool // false if a wrapper holds it already
	releaseInner()    // undoes a claim whose wrapper failed
}

func (s *peerSet) init(peers []*Peer, cfg config, changed func(*peerList)) error {
	clock := cfg.now
	s.now = func() int64 { return clock().UnixNano() }
	if cfg.set&optClock == 0 {
		// time.Now's wall clock, read once, advanced by the monotonic
		// clock alone: half the cost of time.Now a read, and immune to
		// steps of the wall clock.
		base := time.Now()
		wall := base.UnixNano()
		s.now = func() int64 { return wall + int64(time.Since(base)) }
	}
	s.changed = changed
	s.events = cfg.events
	s.picker, s.noBackups = cfg.spec.name, cfg.spec.noBackups
	if err := s.setupGuards(&cfg); err != nil {
		return err
	}
	s.list.Store(&peerList{noLive: &s.noLive})
	if err := s.Add(peers...); err != nil {
		return err
	}
	s.guardsReady() // before the picker is in use: no lock needed
	return nil
}

// backupErr is the error for a backup peer given to a picker that refuses
// them, in nginx's words ("balancing method does not support parameter
// backup"): nginx refuses `backup` with hash, ip_hash and random.
func (s *peerSet) backupErr(p *Peer) error {
	return fmt.Errorf("balancer: %s: peer %q: backup is not supported by this balancing method: %w", s.picker, p.addr, ErrInvalidConfig)
}

// load returns the current peer list.
func (s *peerSet) load() *peerList { return s.list.Load() }

// Peers returns the picker's peers, primaries then backups, in the order
// they were added, in a new slice the caller may keep and change.
func (s *peerSet) Peers() []*Peer {
	l := s.load()
	return slices.Concat(l.primary, l.backup) // a copy: the list is shared with Pick
}

// Add adds peers to the picker. It checks every peer first and adds none if
// one is invalid: a bad option value (ErrInvalidConfig), one *Peer twice
// (ErrDuplicatePeer), a peer that belongs to a picker (ErrPeerInUse), or
// weights whose sum would pass MaxWeightSum. A peer may share its address
// with others: identity is the Peer, as two nginx `server` lines with one
// address are two servers. The peers already present keep their state but
// for their current weights, which go back to 0 as on an nginx reload.
//
// An added peer starts with nothing the picker learned of it, even one
// removed from this picker a moment ago. To keep what was learned across a
// discovery change, pass the new set of peers to Update, which keeps the
// held peers it matches by address.
func (s *peerSet) Add(peers ...*Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.load()
	seen := make(map[*Peer]bool, len(peers))
	for _, p := range peers {
		switch {
		case p == nil:
			return fmt.Errorf("balancer: nil peer: %w", ErrInvalidConfig)
		case p.configErr != nil:
			return p.configErr
		case s.noBackups && p.backup.Load():
			return s.backupErr(p)
		case p.owner.Load() != nil:
			return fmt.Errorf("balancer: peer %q: %w", p.addr, ErrPeerInUse)
		case seen[p]:
			return fmt.Errorf("balancer: peer %q given twice: %w", p.addr, ErrDuplicatePeer)
		}
		seen[p] = true
	}
	all := append(append(slices.Clip(old.primary), old.backup...), peers...)
	if err := checkWeightSum(all); err != nil {
		return err
	}
	// Claim each peer by compare-and-swap: another picker adding the same
	// peer concurrently passed the check above too, and only one may win.
	ownerMu.Lock()
	for i, p := range peers {
		if !p.owner.CompareAndSwap(nil, s) {
			for _, q := range peers[:i] {
				q.owner.Store(nil)
			}
			ownerMu.Unlock()
			return fmt.Errorf("balancer: peer %q: %w", p.addr, ErrPeerInUse)
		}
	}
	for _, p := range peers {
		p.held.Store(s)
	}
	ownerMu.Unlock()
	now := s.now()
	for _, p := range peers {
		p.setWeightLocked(p.weight.Load())
		s.freshLocked(p, now) // what another picker learned says nothing here
	}
	s.publishLocked(all)
	return nil
}

// Remove takes p out of the picker. Attempts on p still in flight may still
// be reported: Done then only ends them. p may be added to a picker again,
// best once nothing is in flight on it: its in-flight count moves with it,
// and reports to the old picker are then refused with ErrUnknownPeer, as
// are reports to any picker but the one p was removed from. Adding it back
// starts it afresh (see Add).
// Remove returns ErrUnknownPeer if the picker does not hold p.
func (s *peerSet) Remove(p *Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ownsLocked(p); err != nil {
		return err
	}
	old := s.load()
	all := make([]*Peer, 0, len(old.primary)+len(old.backup))
	for _, q := range append(slices.Clip(old.primary), old.backup...) {
		if q != p {
			all = append(all, q)
		}
	}
	ownerMu.Lock()
	p.owner.Store(nil)
	p.currentWeight = 0
	ownerMu.Unlock()
	s.publishLocked(all)
	return nil
}

// SetWeight changes p's weight. Its effective weight is reset to the new
// weight, and every current weight goes back to 0, as with Add. A weight out of
// [0, MaxWeightSum] or one that makes the sum overflow is rejected with
// ErrInvalidConfig and changes nothing.
func (s *peerSet) SetWeight(p *Peer, w int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ownsLocked(p); err != nil {
		return err
	}
	if w < 0 || w > MaxWeightSum {
		return fmt.Errorf("balancer: peer %q: weight %d out of range [0, %d]: %w", p.addr, w, MaxWeightSum, ErrInvalidConfig)
	}
	l := s.load()
	var sum int64
	for _, q := range append(slices.Clip(l.primary), l.backup...) {
		if q != p {
			sum += q.weight.Load()
		}
	}
	if sum+int64(w) > MaxWeightSum {
		return fmt.Errorf("balancer: peer %q: weight %d makes the sum pass %d: %w", p.addr, w, MaxWeightSum, ErrInvalidConfig)
	}
	p.weight.Store(int64(w))
	p.setWeightLocked(int64(w))
	s.publishLocked(append(slices.Clip(l.primary), l.backup...))
	return nil
}

// SetDown marks p down (never chosen) or brings it back up, like editing
// nginx's down flag and reloading: every current weight goes back to 0.
func (s *peerSet) SetDown(p *Peer, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ownsLocked(p); err != nil {
		return err
	}
	if p.down.Swap(down) && !down {
		s.upLocked(p, s.now())
	}
	l := s.load()
	s.publishLocked(append(slices.Clip(l.primary), l.backup...))
	return nil
}

// Update makes the picker's peers those of snapshot, in its order, in one
// list change, as a service-discovery update or an nginx reload would. A
// snapshot peer is matched to a peer the picker holds by address: the k-th
// snapshot peer with an address to the k-th held peer with that address, in
// the order of Peers (a held peer given in snapshot itself is kept as
// itself, and the others of its address match the remaining held ones). A
// matched held peer is kept (its failures, in-flight attempts and what the
// picker learned of it stay) and takes the snapshot peer's weight, parameters, down
// flag and value; an unmatched snapshot peer is added itself; an unmatched
// held peer is removed (see Remove). The matched snapshot peers stay
// unowned: pick and report with the picker's peers (Peers, Pick). Nothing
// changes if snapshot is invalid: a nil or misconfigured peer
// (ErrInvalidConfig), one *Peer twice (ErrDuplicatePeer), a peer that
// belongs to another picker (ErrPeerInUse), weights past MaxWeightSum
// (ErrInvalidConfig). As with Add, every current weight goes back to 0.
func (s *peerSet) Update(snapshot []*Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := make(map[*Peer]bool, len(snapshot))
	var sum int64
	for _, q := range snapshot {
		switch {
		case q == nil:
			return fmt.Errorf("balancer: Update: nil peer: %w", ErrInvalidConfig)
		case q.configErr != nil:
			return q.configErr
		case s.noBackups && q.backup.Load():
			return s.backupErr(q)
		case seen[q]:
			return fmt.Errorf("balancer: Update: peer %q given twice: %w", q.addr, ErrDuplicatePeer)
		case q.owner.Load() != nil && q.owner.Load() != s:
			// Checked before the address is matched: another picker's
			// peer is refused whether or not this one holds its address.
			return fmt.Errorf("balancer: Update: peer %q: %w", q.addr, ErrPeerInUse)
		}
		seen[q] = true
		sum += q.weight.Load()
		if sum > MaxWeightSum {
			return fmt.Errorf("balancer: Update: weights sum past %d at peer %q: %w", MaxWeightSum, q.addr, ErrInvalidConfig)
		}
	}
	// The held peers not given back, chained by address in list order
	// (first[addr] and after[i] hold 1 + an index into held, 0 for none):
	// the k-th snapshot peer of an address takes the k-th of them.
	old := s.load()
	held := append(slices.Clip(old.primary), old.backup...)
	first := make(map[string]int32, len(held))
	after := make([]int32, len(held))
	for i := len(held) - 1; i >= 0; i-- {
		if p := held[i]; !seen[p] {
			after[i] = first[p.addr]
			first[p.addr] = int32(i + 1)
		}
	}
	kept := make([]bool, len(held))
	all := make([]*Peer, len(snapshot))
	added := make([]bool, len(snapshot)) // all[i] is snapshot[i], new here
	for i, q := range snapshot {
		switch k := first[q.addr]; {
		case q.owner.Load() == s:
			all[i] = q // the caller gave back the picker's own peer
		case k > 0:
			all[i], kept[k-1], first[q.addr] = held[k-1], true, after[k-1]
		default:
			all[i], added[i] = q, true
		}
	}
	// Claim the new peers; on a race with another picker, give back those
	// claimed so far.
	ownerMu.Lock()
	for i, q := range snapshot {
		if !added[i] {
			continue
		}
		if !q.owner.CompareAndSwap(nil, s) {
			for j, c := range snapshot[:i] {
				if added[j] {
					c.owner.Store(nil)
				}
			}
			ownerMu.Unlock()
			return fmt.Errorf("balancer: Update: peer %q: %w", q.addr, ErrPeerInUse)
		}
	}
	for _, q := range all {
		q.held.Store(s)
	}
	ownerMu.Unlock()
	now := s.now()
	for i, q := range snapshot {
		switch k := all[i]; {
		case added[i]:
			k.setWeightLocked(k.weight.Load())
			s.freshLocked(k, now)
		case k != q:
			wasDown := k.down.Load()
			k.adopt(q)
			if wasDown && !k.down.Load() {
				s.upLocked(k, now)
			}
		}
	}
	ownerMu.Lock()
	for i, p := range held {
		if !kept[i] && !seen[p] {
			p.owner.Store(nil)
			p.currentWeight = 0
		}
	}
	ownerMu.Unlock()
	s.publishLocked(all)
	return nil
}

// freshLocked gives p, claimed at now, a new state of the picker's
// algorithm, or none. Requires s.mu, and p claimed by s but not yet in a
// published list.
func (s *peerSet) freshLocked(p *Peer, now int64) {
	p.warmFrom.Store(0)
	s.joinedLocked(p, now)
	var st *peerState
	if s.fresh != nil {
		st = s.fresh(now)
	}
	p.state.Store(st)
	p.outcomes.Store(0) // WithSuccessRateEjection's counts are the picker's too
}

// NextEligible returns the earliest time at which a peer now inside its
// fail window (max_fails failures within fail_timeout) becomes eligible
// again, so that a caller that got ErrNoLivePeer can wait exactly that long
// before it picks again; false if no peer is out for its failures (down
// peers wait for SetDown, full ones for a report). O(n), without a lock.
func (s *peerSet) NextEligible() (time.Time, bool) {
	l := s.load()
	if l.single {
		return time.Time{}, false // nginx's single server is never out for its failures
	}
	now := s.now()
	var next int64
	found := false
	for _, peers := range [2][]*Peer{l.primary, l.backup} {
		for _, p := range peers {
			if p.down.Load() || !p.inFailWindow(now) {
				continue
			}
			// inFailWindow compares with <=: out through checked+timeout.
			// A fail_timeout reaching past the last representable
			// instant saturates there instead of wrapping into the past.
			// (fail_timeout is never negative, so only an overflow makes
			// the sum fall below checked.)
			c := p.checked.Load()
			at := c + p.window() + 1
			if at <= c {
				at = math.MaxInt64
			}
			if !found || at < next {
				next, found = at, true
			}
		}
	}
	if !found {
		return time.Time{}, false
	}
	return time.Unix(0, next), true
}

func (s *peerSet) ownsLocked(p *Peer) error {
	if p == nil {
		return fmt.Errorf("balancer: nil peer: %w", ErrUnknownPeer)
	}
	if p.owner.Load() != s {
		return fmt.Errorf("balancer: peer %q: %w", p.addr, ErrUnknownPeer)
	}
	return nil
}

// publishLocked builds and stores a new list from all, in order, and lets the
// picker rebuild. Requires s.mu.
func (s *peerSet) publishLocked(all []*Peer) {
	l := &peerList{gen: listGen.Add(1), noLive: &s.noLive}
	for _, p := range all {
		p.currentWeight = 0
		if p.backup.Load() {
			p.index = len(l.backup)
			l.backup = append(l.backup, p)
		} else {
			p.index = len(l.primary)
			l.primary = append(l.primary, p)
		}
		if !p.down.Load() {
			l.tries++
		}
	}
	l.single = len(l.primary) == 1 && len(l.backup) == 0
	s.list.Store(l)
	s.listChanged()
	if s.changed != nil {
		s.changed(l)
	}
}

// finish validates a report on p and ends its in-flight attempt. A report on
// a peer removed from s while in flight, and not yet added to another
// picker, is accepted and only ends the attempt: callers account the
// outcome only if p.owner is still s, checked under s.mu. A report to a
// picker that did not hold p last is refused before it touches anything,
// so that it cannot end an attempt of the picker that did. The owner, read
// once, decides, and held only when no picker holds p, so a concurrent
// Remove or Add cannot make a report get lost: a report racing an Add of p
// elsewhere is taken or refused as if it came just before or just after
// the Add.
func (s *peerSet) finish(p *Peer, o Outcome) error {
	if p == nil {
		return fmt.Errorf("balancer: Done(nil): %w", ErrUnknownPeer)
	}
	owner := p.owner.Load()
	if owner != s && (owner != nil || p.held.Load() != s) {
		return fmt.Errorf("balancer: Done(%q): %w", p.addr, ErrUnknownPeer)
	}
	if o.Latency < 0 {
		return fmt.Errorf("balancer: Done(%q): latency %v: %w", p.addr, o.Latency, ErrInvalidLatency)
	}
	if o.Failed && o.Abandoned {
		return fmt.Errorf("balancer: Done(%q): an attempt both failed and abandoned: %w", p.addr, ErrInvalidOutcome)
	}
	if o.Superseded && !o.Abandoned {
		return fmt.Errorf("balancer: Done(%q): an attempt superseded but not abandoned: %w", p.addr, ErrInvalidOutcome)
	}
	if o.Load != nil {
		if err := o.Load.check(p.addr); err != nil {
			return err
		}
	}
	if !p.release() {
		if owner == nil {
			return fmt.Errorf("balancer: Done(%q): %w", p.addr, ErrUnknownPeer)
		}
		return fmt.Errorf("balancer: Done(%q): %w", p.addr, ErrNotInFlight)
	}
	if o.Failed {
		p.failures.Add(1)
	}
	s.outcome(p, o)
	return nil
}

// done is Done for the pickers whose only per-peer state is nginx's failure
// accounting: a success on a peer with no failures on record only ends the
// attempt, without the lock.
func (s *peerSet) done(p *Peer, o Outcome) error {
	if err := s.finish(p, o); err != nil || (!o.Failed && !p.needsLockOnSuccess()) {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.doneLocked(s.load(), p, o)
	return nil
}

// doneLocked applies an outcome to nginx's failure accounting (RR.c
// 599-670), including the single-peer rule: with one server nginx records
// no failure (RR.c 618-627), and here any report on it clears its failures.
// Requires s.mu.
func (s *peerSet) doneLocked(l *peerList, p *Peer, o Outcome) {
	var before failMark
	if s.events != nil || s.backoffMax != 0 {
		before = p.markLocked()
	}
	readmitted := false
	switch {
	case p.owner.Load() != s:
		// Removed while in flight: nothing left to account.
	case l.single && !p.backup.Load():
		p.fails.Store(0)
	case o.Failed:
		s.failLocked(p, s.now())
	case s.guard == nil: // the common report: nginx's test, inlined
		p.succeedLocked()
	default:
		readmitted = s.succeedLocked(p)
	}
	if s.backoffMax != 0 && p.owner.Load() == s {
		s.backoffLocked(p, before)
	}
	if s.events != nil {
		s.noteDoneLocked(p, before)
	}
	if readmitted {
		s.recheck(s.now())
	}
}
