// Package subset hands a picker of package balancer one client's subset of
// a backend list, so that each backend serves a bounded number of clients:
// Subset, the wrapper that holds the whole list and gives its inner picker
// the subset, and the Subsetters that choose it (Deterministic, the SRE
// book's; Ring; Rendezvous and Random, for clients without an index). It
// reaches balancer through its exported API alone. docs/subsetting.md
// compares the subsetters.
package subset

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/subsetting"
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
	inner   balancer.Balancer // immutable
	claimed atomic.Bool       // a Subset holds this one as its inner picker
	set     *subsetting.Set[*balancer.Peer]
}

var (
	_ balancer.Balancer  = (*Subset)(nil)
	_ balancer.Connector = (*Subset)(nil)
	_ balancer.Stats     = (*Subset)(nil)
)

// New wraps inner, handing it by's subset of backends (see Update). Give
// it an inner picker built with no peers of its own: Update replaces them.
// An inner picker serves one Subset for its life: one of package
// balancer's pickers (or a Subset) already given to a New that succeeded
// is refused with balancer.ErrPeerInUse, as a peer held by another picker
// is (balancer.Claim). It refuses a nil inner or by with
// balancer.ErrInvalidConfig, and backends as Update does.
func New(inner balancer.Balancer, backends []*balancer.Peer, by Subsetter) (*Subset, error) {
	if inner == nil || by == nil {
		return nil, fmt.Errorf("subset: New: nil inner picker or subsetter: %w", balancer.ErrInvalidConfig)
	}
	release, err := claim(inner)
	if err != nil {
		return nil, fmt.Errorf("subset: New: the inner %T serves another Subset: %w", inner, balancer.ErrPeerInUse)
	}
	set, err := subsetting.NewSet(env, inner, by, backends)
	if err != nil {
		release()
		return nil, err
	}
	return &Subset{inner: inner, set: set}, nil
}

// claim claims inner for one Subset: a Subset by its own flag, a picker
// of package balancer by balancer.Claim.
func claim(inner balancer.Balancer) (release func(), err error) {
	if s, ok := inner.(*Subset); ok {
		if !s.claimed.CompareAndSwap(false, true) {
			return nil, balancer.ErrPeerInUse
		}
		return func() { s.claimed.Store(false) }, nil
	}
	return balancer.Claim(inner)
}

// Pick picks from the subset with the inner picker.
func (s *Subset) Pick(r *balancer.Request) (*balancer.Peer, error) { return s.inner.Pick(r) }

// Done reports to the inner picker.
func (s *Subset) Done(p *balancer.Peer, o balancer.Outcome) error { return s.inner.Done(p, o) }

// Connected reports to the inner picker, if it is a Connector; otherwise
// it does nothing.
func (s *Subset) Connected(p *balancer.Peer) error {
	if c, ok := s.inner.(balancer.Connector); ok {
		return c.Connected(p)
	}
	return nil
}

// Stats returns the inner picker's counters, zero if it keeps none (every
// picker of package balancer does), so a Subset hides none of them.
func (s *Subset) Stats() balancer.PickerStats {
	if c, ok := s.inner.(balancer.Stats); ok {
		return c.Stats()
	}
	return balancer.PickerStats{}
}

// NoLivePeerCount is the inner picker's count of picks that returned
// balancer.ErrNoLivePeer, 0 if it keeps none (every picker of package balancer does).
//
// Deprecated: use Stats().NoLivePeer.
func (s *Subset) NoLivePeerCount() uint64 { return s.Stats().NoLivePeer }

// BlindCount is the inner picker's count of the peers it went blind to
// (balancer.EventPeerBlind), 0 if it keeps none.
//
// Deprecated: use Stats().Blinded.
func (s *Subset) BlindCount() uint64 { return s.Stats().Blinded }

// Peers returns the subset: the inner picker's peers.
func (s *Subset) Peers() []*balancer.Peer { return s.inner.Peers() }

// NextEligible is the inner picker's.
func (s *Subset) NextEligible() (time.Time, bool) { return s.inner.NextEligible() }

// Backends returns the whole backend list, in a new slice: the members as
// the inner picker's peers, the others as last given, but where the inner
// picker kept a peer leaving the subset for a new member of its address:
// there the snapshot peer it matched stands, with the configuration given
// for that place.
func (s *Subset) Backends() []*balancer.Peer { return s.set.Backends() }

// Update makes snapshot the backend list and hands its subset to the
// inner picker's Update, in snapshot's order. Nothing changes if snapshot
// holds a nil or misconfigured peer (balancer.ErrInvalidConfig), one *Peer
// twice (balancer.ErrDuplicatePeer) or a peer of another picker
// (balancer.ErrPeerInUse), if the Subsetter returns a position out of the
// list or one twice (balancer.ErrInvalidConfig), or if the inner Update
// refuses the subset.
func (s *Subset) Update(snapshot []*balancer.Peer) error { return s.set.Update(snapshot) }

// Add is Update with peers appended to the backend list.
func (s *Subset) Add(peers ...*balancer.Peer) error { return s.set.Add(peers...) }

// Remove is Update with p taken out of the backend list: a member is
// replaced as the Subsetter says, a non-member leaves the subset as it is.
// It returns balancer.ErrUnknownPeer if p is not a backend.
func (s *Subset) Remove(p *balancer.Peer) error { return s.set.Remove(p) }

// SetWeight changes a backend's weight: a member's through the inner
// picker, another's with balancer.Peer.Adopt. The subset does not change.
func (s *Subset) SetWeight(p *balancer.Peer, w int) error { return s.set.SetWeight(p, w) }

// SetDown marks a backend down or up: a member through the inner picker,
// another with balancer.Peer.Adopt. The subset does not change.
func (s *Subset) SetDown(p *balancer.Peer, down bool) error { return s.set.SetDown(p, down) }
