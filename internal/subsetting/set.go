package subsetting

import (
	"fmt"
	"slices"
	"sync"
)

// Peer is what a Set reads of a backend: *balancer.Peer's methods.
type Peer interface {
	comparable
	Addr() string
	IsBackup() bool
	HashText() string
	Err() error  // the first bad option the peer was built with
	InUse() bool // a picker holds it
}

// Inner is the update side of the picker a Set hands its subset to.
type Inner[P any] interface {
	Update(snapshot []P) error
	Peers() []P
	SetWeight(p P, w int) error
	SetDown(p P, down bool) error
}

// Env is what a Set needs of its caller's package: the errors it returns
// and the changes of a peer no picker holds.
type Env[P any] struct {
	Who                                string // put before every error: "subset"
	Invalid, Duplicate, InUse, Unknown error  // the sentinels: balancer's
	// Copy returns a new peer, held by no picker, with p's address and
	// configuration (weight, max_fails, fail_timeout, max_conns, backup and
	// down flags, value), as Update would give it to a peer it keeps.
	Copy func(p P) P
	// Adopt gives p, held by no picker, q's configuration as Copy has it.
	Adopt func(p, q P) error
	// SetWeight and SetDown change a peer no picker holds.
	SetWeight func(p P, w int) error
	SetDown   func(p P, down bool) error
}

// Set is the membership side of a Subset: the backend list as last given,
// its subset, and the inner picker's Update that holds it. Its methods
// serialize on its own lock; the pick path never reaches it.
type Set[P Peer] struct {
	env   *Env[P]
	inner Inner[P]
	by    Subsetter

	mu sync.Mutex // serializes changes
	// Guarded by mu: the backend list as last given, where each member is
	// the inner picker's own peer, and which of them are members.
	backends []P
	member   map[P]bool
}

// NewSet returns a Set handing inner by's subset of backends.
func NewSet[P Peer](env *Env[P], inner Inner[P], by Subsetter, backends []P) (*Set[P], error) {
	s := &Set[P]{env: env, inner: inner, by: by}
	if err := s.Update(backends); err != nil {
		return nil, err
	}
	return s, nil
}

// Backends returns the whole backend list, in a new slice.
func (s *Set[P]) Backends() []P {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.backends)
}

// Update makes snapshot the backend list.
func (s *Set[P]) Update(snapshot []P) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(slices.Clone(snapshot))
}

// Add is Update with peers appended to the backend list.
func (s *Set[P]) Add(peers ...P) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.updateLocked(append(slices.Clone(s.backends), peers...))
}

// Remove is Update with p taken out of the backend list.
func (s *Set[P]) Remove(p P) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var none P
	i := slices.Index(s.backends, p)
	if p == none || i < 0 {
		return fmt.Errorf("%s: %v: %w", s.env.Who, p, s.env.Unknown)
	}
	return s.updateLocked(slices.Delete(slices.Clone(s.backends), i, i+1))
}

// SetWeight changes a backend's weight: a member's through the inner
// picker.
func (s *Set[P]) SetWeight(p P, w int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var none P
	switch {
	case s.member[p]:
		return s.inner.SetWeight(p, w)
	case p == none || !slices.Contains(s.backends, p):
		return fmt.Errorf("%s: %v: %w", s.env.Who, p, s.env.Unknown)
	}
	return s.env.SetWeight(p, w)
}

// SetDown marks a backend down or up: a member through the inner picker.
func (s *Set[P]) SetDown(p P, down bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var none P
	switch {
	case s.member[p]:
		return s.inner.SetDown(p, down)
	case p == none || !slices.Contains(s.backends, p):
		return fmt.Errorf("%s: %v: %w", s.env.Who, p, s.env.Unknown)
	}
	return s.env.SetDown(p, down)
}

// updateLocked makes all, which the caller gives up, the backend list.
// Requires s.mu.
func (s *Set[P]) updateLocked(all []P) error {
	var none P
	seen := make(map[P]bool, len(all))
	keys := make([]string, len(all))
	for i, p := range all {
		switch {
		case p == none:
			return fmt.Errorf("%s: nil peer: %w", s.env.Who, s.env.Invalid)
		case p.Err() != nil:
			return p.Err()
		case seen[p]:
			return fmt.Errorf("%s: peer %q given twice: %w", s.env.Who, p.Addr(), s.env.Duplicate)
		case p.InUse() && !s.member[p]:
			// Held by a picker, and not the inner one as a member: another's.
			return fmt.Errorf("%s: peer %q: %w", s.env.Who, p.Addr(), s.env.InUse)
		}
		seen[p] = true
		keys[i] = p.HashText()
	}
	pos := s.by.Subset(keys)
	sub := make([]P, len(pos))
	inSub := make(map[int]bool, len(pos))
	for i, at := range pos {
		switch {
		case at < 0 || at >= len(all):
			return fmt.Errorf("%s: the subsetter gave position %d of %d backends: %w", s.env.Who, at, len(all), s.env.Invalid)
		case inSub[at]:
			return fmt.Errorf("%s: the subsetter gave position %d twice: %w", s.env.Who, at, s.env.Invalid)
		}
		sub[i], inSub[at] = all[at], true
	}
	// A member leaving the subset while it stays in the list may be kept
	// by the inner Update for a new member of its address (see below):
	// remember where it stands and a copy of the configuration it was
	// given there.
	type stand struct {
		at    int
		given P
	}
	leaving := map[P]stand{}
	for j, p := range all {
		if !inSub[j] && s.member[p] {
			leaving[p] = stand{j, s.env.Copy(p)}
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
	held := map[kind][]P{}
	for _, p := range s.inner.Peers() {
		k := kind{p.Addr(), p.IsBackup()}
		held[k] = append(held[k], p)
	}
	member := make(map[P]bool, len(pos))
	for _, at := range pos {
		k := kind{all[at].Addr(), all[at].IsBackup()}
		if q := held[k]; len(q) > 0 {
			if l, ok := leaving[q[0]]; ok && q[0] != all[at] {
				// Kept for this member, so it no longer stands where it
				// was: the snapshot peer it matched, held by no picker,
				// takes its place with the configuration given there.
				// (Adopt fails only if a picker took that peer since the
				// check above: a caller handing one peer to two pickers
				// at once, which the check refuses when it sees it.)
				_ = s.env.Adopt(all[at], l.given)
				all[l.at] = all[at]
			}
			all[at], held[k] = q[0], q[1:]
		}
		member[all[at]] = true
	}
	s.backends, s.member = all, member
	return nil
}
