package balancer

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Subsetter chooses one client's subset of a backend list. Every client of
// a fleet runs the same Subsetter with its own index or key, so that
// together they spread over the backends.
type Subsetter interface {
	// Subset returns the positions in keys of the client's subset,
	// ascending: min(size, len(keys)) of them. It depends on the keys
	// alone, not their order. Two equal keys are two backends, the k-th
	// of a key ranked after the (k-1)-th.
	Subset(keys []string) []int
}

// Subset is a Balancer that hands an inner one only this client's subset of
// the backends: the inner picker holds the subset's peers, and Pick, Done
// and Connected go straight to it (no lock of Subset's, nothing allocated).
// Update, Add and Remove change the backend list, recompute the subset and
// hand it to the inner Update, which keeps the members it keeps (failures,
// in-flight attempts, what it learned). A backend is ranked by its
// HashText: the server text if one was given, else its address.
//
// Membership depends on the hash texts alone: a backend down, failing or of
// any weight stays in the subset (the inner picker skips it), so a subset
// changes only when the list does. Peers returns the subset, Backends the
// whole list. The backends outside the subset belong to the Subset too:
// give them to no other picker.
//
// Subset is safe for concurrent use: changes are serialized, and a pick
// sees a change once its inner Update has returned.
type Subset struct {
	inner   Balancer    // immutable
	by      Subsetter   // immutable
	claimed atomic.Bool // a Subset holds this one as its inner picker

	mu sync.Mutex // serializes changes
	// Guarded by mu: the backend list as last given, where each member is
	// the inner picker's own peer, and which of them are members.
	backends []*Peer
	member   map[*Peer]bool
}

var (
	_ Balancer  = (*Subset)(nil)
	_ Connector = (*Subset)(nil)
	_ Stats     = (*Subset)(nil)
)

// NewSubset wraps inner, handing it by's subset of backends (see Update).
// Give it an inner picker built with no peers of its own: Update replaces
// them. An inner picker serves one Subset for its life: one of this
// package's pickers (or a Subset) already given to a NewSubset that
// succeeded is refused with ErrPeerInUse, as a peer held by another
// picker is. It refuses a nil inner or by with ErrInvalidConfig, and
// backends as Update does.
func NewSubset(inner Balancer, backends []*Peer, by Subsetter) (*Subset, error) {
	if inner == nil || by == nil {
		return nil, fmt.Errorf("balancer: NewSubset: nil inner picker or subsetter: %w", ErrInvalidConfig)
	}
	c, claims := inner.(subsetInner)
	if claims && !c.claimInner() {
		return nil, fmt.Errorf("balancer: NewSubset: the inner %T serves another Subset: %w", inner, ErrPeerInUse)
	}
	s := &Subset{inner: inner, by: by}
	if err := s.Update(backends); err != nil {
		if claims {
			c.releaseInner()
		}
		return nil, err
	}
	return s, nil
}

// subsetInner is an inner picker that knows whether a Subset holds it
// (peerSet, and Subset itself): two Subsets handing one inner picker
// their subsets in turn would take each other's peers.
type subsetInner interface {
	claimInner() bool // false if a Subset holds it already
	releaseInner()    // undoes a claim whose NewSubset failed
}

func (s *Subset) claimInner() bool { return s.claimed.CompareAndSwap(false, true) }
func (s *Subset) releaseInner()    { s.claimed.Store(false) }

// Pick picks from the subset with the inner picker.
func (s *Subset) Pick(r *Request) (*Peer, error) { return s.inner.Pick(r) }

// Done reports to the inner picker.
func (s *Subset) Done(p *Peer, o Outcome) error { return s.inner.Done(p, o) }

// Connected reports to the inner picker, if it is a Connector; otherwise
// it does nothing.
func (s *Subset) Connected(p *Peer) error {
	if c, ok := s.inner.(Connector); ok {
		return c.Connected(p)
	}
	return nil
}

// Stats returns the inner picker's counters, zero if it keeps none (every
// picker of this package does), so a Subset hides none of them.
func (s *Subset) Stats() PickerStats {
	if c, ok := s.inner.(Stats); ok {
		return c.Stats()
	}
	return PickerStats{}
}

// NoLivePeerCount is the inner picker's count of picks that returned
// ErrNoLivePeer, 0 if it keeps none (every picker of this package does).
//
// Deprecated: use Stats().NoLivePeer.
func (s *Subset) NoLivePeerCount() uint64 { return s.Stats().NoLivePeer }

// BlindCount is the inner picker's count of the peers it went blind to
// (EventPeerBlind), 0 if it keeps none.
//
// Deprecated: use Stats().Blinded.
func (s *Subset) BlindCount() uint64 { return s.Stats().Blinded }

// Peers returns the subset: the inner picker's peers.
func (s *Subset) Peers() []*Peer { return s.inner.Peers() }

// NextEligible is the inner picker's.
func (s *Subset) NextEligible() (time.Time, bool) { return s.inner.NextEligible() }

// Backends returns the whole backend list, in a new slice: the members as
// the inner picker's peers, the others as last given, but where the inner
// picker kept a peer leaving the subset for a new member of its address:
// there the snapshot peer it matched stands, with the configuration given
// for that place.
func (s *Subset) Backends() []*Peer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.backends)
}

// Update makes snapshot the backend list and hands its subset to the
// inner picker's Update, in snapshot's order. Nothing changes if snapshot
// holds a nil or misconfigured peer (ErrInvalidConfig), one *Peer twice
// (ErrDuplicatePeer) or a peer of another picker (ErrPeerInUse), if the
// Subsetter returns a position out of the list or one twice
// (ErrInvalidConfig), or if the inner Update refuses the subset.
func (s *Subset) Update(snapshot []*Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(slices.Clone(snapshot))
}

// Add is Update with peers appended to the backend list.
func (s *Subset) Add(peers ...*Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(append(slices.Clone(s.backends), peers...))
}

// Remove is Update with p taken out of the backend list: a member is
// replaced as the Subsetter says, a non-member leaves the subset as it is.
// It returns ErrUnknownPeer if p is not a backend.
func (s *Subset) Remove(p *Peer) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.Index(s.backends, p)
	if p == nil || i < 0 {
		return fmt.Errorf("balancer: Subset: %v: %w", p, ErrUnknownPeer)
	}
	return s.updateLocked(slices.Delete(slices.Clone(s.backends), i, i+1))
}

// SetWeight changes a backend's weight: a member's through the inner
// picker. The subset does not change.
func (s *Subset) SetWeight(p *Peer, w int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.member[p]:
		return s.inner.SetWeight(p, w)
	case p == nil || !slices.Contains(s.backends, p):
		return fmt.Errorf("balancer: Subset: %v: %w", p, ErrUnknownPeer)
	case w < 0 || w > MaxWeightSum:
		return fmt.Errorf("balancer: peer %q: weight %d out of range [0, %d]: %w", p.addr, w, MaxWeightSum, ErrInvalidConfig)
	}
	// Held by no picker: State reads these under ownerMu.
	ownerMu.Lock()
	p.weight.Store(int64(w))
	p.setWeightLocked(int64(w))
	ownerMu.Unlock()
	return nil
}

// SetDown marks a backend down or up: a member through the inner picker.
// The subset does not change.
func (s *Subset) SetDown(p *Peer, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.member[p]:
		return s.inner.SetDown(p, down)
	case p == nil || !slices.Contains(s.backends, p):
		return fmt.Errorf("balancer: Subset: %v: %w", p, ErrUnknownPeer)
	}
	p.down.Store(down)
	return nil
}

// updateLocked makes all, which the caller gives up, the backend list.
// Requires s.mu.
func (s *Subset) updateLocked(all []*Peer) error {
	seen := make(map[*Peer]bool, len(all))
	keys := make([]string, len(all))
	for i, p := range all {
		switch {
		case p == nil:
			return fmt.Errorf("balancer: Subset: nil peer: %w", ErrInvalidConfig)
		case p.configErr != nil:
			return p.configErr
		case seen[p]:
			return fmt.Errorf("balancer: Subset: peer %q given twice: %w", p.addr, ErrDuplicatePeer)
		case p.owner.Load() != nil && !s.member[p]:
			// Held by a picker, and not the inner one as a member: another's.
			return fmt.Errorf("balancer: Subset: peer %q: %w", p.addr, ErrPeerInUse)
		}
		seen[p] = true
		keys[i] = p.HashText()
	}
	pos := s.by.Subset(keys)
	sub := make([]*Peer, len(pos))
	inSub := make(map[int]bool, len(pos))
	for i, at := range pos {
		switch {
		case at < 0 || at >= len(all):
			return fmt.Errorf("balancer: Subset: the subsetter gave position %d of %d backends: %w", at, len(all), ErrInvalidConfig)
		case inSub[at]:
			return fmt.Errorf("balancer: Subset: the subsetter gave position %d twice: %w", at, ErrInvalidConfig)
		}
		sub[i], inSub[at] = all[at], true
	}
	// A member leaving the subset while it stays in the list may be kept
	// by the inner Update for a new member of its address (see below):
	// remember where it stands and a copy of the configuration it was
	// given there.
	type stand struct {
		at    int
		given *Peer
	}
	leaving := map[*Peer]stand{}
	for j, p := range all {
		if !inSub[j] && s.member[p] {
			c := &Peer{addr: p.addr}
			c.adopt(p)
			leaving[p] = stand{j, c}
		}
	}
	if err := s.inner.Update(sub); err != nil {
		return err
	}
	// Put the inner picker's own peers in the list in place of the
	// snapshot peers it matched by address: its Peers are the subset's, in
	// order, primaries then backups, so the k-th of an address and kind
	// is the k-th of the subset's.
	type kind struct {
		addr   string
		backup bool
	}
	held := map[kind][]*Peer{}
	for _, p := range s.inner.Peers() {
		k := kind{p.addr, p.backup.Load()}
		held[k] = append(held[k], p)
	}
	member := make(map[*Peer]bool, len(pos))
	for _, at := range pos {
		k := kind{all[at].addr, all[at].backup.Load()}
		if q := held[k]; len(q) > 0 {
			if l, ok := leaving[q[0]]; ok && q[0] != all[at] {
				// Kept for this member, so it no longer stands where it
				// was: the snapshot peer it matched, held by no picker,
				// takes its place with the configuration given there.
				ownerMu.Lock()
				all[at].adopt(l.given)
				ownerMu.Unlock()
				all[l.at] = all[at]
			}
			all[at], held[k] = q[0], q[1:]
		}
		member[all[at]] = true
	}
	s.backends, s.member = all, member
	return nil
}
