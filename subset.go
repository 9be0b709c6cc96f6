package balancer

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer/internal/subsetting"
)

// This file keeps subsetting's old names, moved to package subset
// (github.com/lbgo/balancer/subset), for one release. Package subset
// imports this one, so these cannot be aliases of its names: they are thin
// wrappers of the implementation both share (internal/subsetting).

// Subsetter chooses one client's subset of a backend list.
//
// Deprecated: use subset.Subsetter; a Subsetter is either.
type Subsetter interface {
	// Subset returns the positions in keys of the client's subset,
	// ascending: min(size, len(keys)) of them. It depends on the keys
	// alone, not their order. Two equal keys are two backends, the k-th
	// of a key ranked after the (k-1)-th.
	Subset(keys []string) []int
}

// MaxSubsetClients bounds a subsetter's client count and subset size.
//
// Deprecated: use subset.MaxClients.
const MaxSubsetClients = subsetting.MaxClients

// DeterministicSubsetter returns the SRE book's deterministic subsetting.
//
// Deprecated: use subset.Deterministic.
func DeterministicSubsetter(clientIndex, clientCount, size int) (Subsetter, error) {
	return subsetter("DeterministicSubsetter")(subsetting.Deterministic(clientIndex, clientCount, size))
}

// RendezvousSubsetter returns rendezvous (highest random weight)
// subsetting for the client named clientKey.
//
// Deprecated: use subset.Rendezvous.
func RendezvousSubsetter(clientKey string, size int) (Subsetter, error) {
	return subsetter("RendezvousSubsetter")(subsetting.Rendezvous(clientKey, size))
}

// RandomSubsetter returns random subsetting (gRFC A68) with the client's
// seed.
//
// Deprecated: use subset.Random.
func RandomSubsetter(size int, seed uint64) (Subsetter, error) {
	return subsetter("RandomSubsetter")(subsetting.Random(size, seed))
}

// RingSubsetter returns deterministic subsetting on a ring.
//
// Deprecated: use subset.Ring.
func RingSubsetter(clientIndex, clientCount, size int) (Subsetter, error) {
	return subsetter("RingSubsetter")(subsetting.Ring(clientIndex, clientCount, size))
}

// subsetter names who in a constructor's refusal.
func subsetter(who string) func(subsetting.Subsetter, error) (Subsetter, error) {
	return func(s subsetting.Subsetter, err error) (Subsetter, error) {
		if err != nil {
			return nil, fmt.Errorf("balancer: %s: %v: %w", who, err, ErrInvalidConfig)
		}
		return s, nil
	}
}

// Subset is a Balancer that hands an inner one only this client's subset
// of the backends.
//
// Deprecated: use subset.Subset, built by subset.New.
type Subset struct {
	inner   Balancer    // immutable
	claimed atomic.Bool // a wrapper holds this one as its inner picker (Claim)
	set     *subsetting.Set[*Peer]
}

var (
	_ Balancer  = (*Subset)(nil)
	_ Connector = (*Subset)(nil)
	_ Stats     = (*Subset)(nil)
)

// subsetEnv is the deprecated Subset's: its errors as they were, and the
// changes of a peer no picker holds made as the picker's update methods
// make them.
var subsetEnv = &subsetting.Env[*Peer]{
	Who:     "balancer: Subset",
	Invalid: ErrInvalidConfig, Duplicate: ErrDuplicatePeer, InUse: ErrPeerInUse, Unknown: ErrUnknownPeer,
	Copy: func(p *Peer) *Peer {
		c := &Peer{addr: p.addr}
		c.adopt(p)
		return c
	},
	Adopt: (*Peer).Adopt,
	SetWeight: func(p *Peer, w int) error {
		if w < 0 || w > MaxWeightSum {
			return fmt.Errorf("balancer: peer %q: weight %d out of range [0, %d]: %w", p.addr, w, MaxWeightSum, ErrInvalidConfig)
		}
		// Held by no picker: State reads these under ownerMu.
		ownerMu.Lock()
		p.weight.Store(int64(w))
		p.setWeightLocked(int64(w))
		ownerMu.Unlock()
		return nil
	},
	SetDown: func(p *Peer, down bool) error {
		p.down.Store(down)
		return nil
	},
}

// NewSubset wraps inner, handing it by's subset of backends.
//
// Deprecated: use subset.New.
func NewSubset(inner Balancer, backends []*Peer, by Subsetter) (*Subset, error) {
	if inner == nil || by == nil {
		return nil, fmt.Errorf("balancer: NewSubset: nil inner picker or subsetter: %w", ErrInvalidConfig)
	}
	release, err := Claim(inner)
	if err != nil {
		return nil, fmt.Errorf("balancer: NewSubset: the inner %T serves another Subset: %w", inner, ErrPeerInUse)
	}
	set, err := subsetting.NewSet(subsetEnv, inner, by, backends)
	if err != nil {
		release()
		return nil, err
	}
	return &Subset{inner: inner, set: set}, nil
}

func (s *Subset) claimInner() bool { return s.claimed.CompareAndSwap(false, true) }
func (s *Subset) releaseInner()    { s.claimed.Store(false) }

// Pick picks from the subset with the inner picker.
func (s *Subset) Pick(r *Request) (*Peer, error) { return s.inner.Pick(r) }

// Done reports to the inner picker.
func (s *Subset) Done(p *Peer, o Outcome) error { return s.inner.Done(p, o) }

// Connected reports to the inner picker, if it is a Connector.
func (s *Subset) Connected(p *Peer) error {
	if c, ok := s.inner.(Connector); ok {
		return c.Connected(p)
	}
	return nil
}

// Stats returns the inner picker's counters, zero if it keeps none.
func (s *Subset) Stats() PickerStats {
	if c, ok := s.inner.(Stats); ok {
		return c.Stats()
	}
	return PickerStats{}
}

// NoLivePeerCount is the inner picker's count of picks that returned
// ErrNoLivePeer.
//
// Deprecated: use Stats().NoLivePeer.
func (s *Subset) NoLivePeerCount() uint64 { return s.Stats().NoLivePeer }

// BlindCount is the inner picker's count of the peers it went blind to.
//
// Deprecated: use Stats().Blinded.
func (s *Subset) BlindCount() uint64 { return s.Stats().Blinded }

// Peers returns the subset: the inner picker's peers.
func (s *Subset) Peers() []*Peer { return s.inner.Peers() }

// NextEligible is the inner picker's.
func (s *Subset) NextEligible() (time.Time, bool) { return s.inner.NextEligible() }

// Backends returns the whole backend list, in a new slice.
func (s *Subset) Backends() []*Peer { return s.set.Backends() }

// Update makes snapshot the backend list and hands its subset to the
// inner picker's Update.
func (s *Subset) Update(snapshot []*Peer) error { return s.set.Update(snapshot) }

// Add is Update with peers appended to the backend list.
func (s *Subset) Add(peers ...*Peer) error { return s.set.Add(peers...) }

// Remove is Update with p taken out of the backend list.
func (s *Subset) Remove(p *Peer) error { return s.set.Remove(p) }

// SetWeight changes a backend's weight: a member's through the inner
// picker.
func (s *Subset) SetWeight(p *Peer, w int) error { return s.set.SetWeight(p, w) }

// SetDown marks a backend down or up: a member through the inner picker.
func (s *Subset) SetDown(p *Peer, down bool) error { return s.set.SetDown(p, down) }
