package balancer

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Bad input to the public API. balancer_test.go already checks the
// constructor's rejections (TestContract_invalidConfig: empty address,
// negative and too large weights, an overflowing sum, negative max_fails,
// fail_timeout and max_conns, nil peers, one peer twice, a peer in use, a nil
// clock), the messages (TestContract_messagesNameTheValue), a few update
// errors (TestContract_updates) and Done's errors on a peer never added,
// nil, never picked, negative latency, a report given twice (before and
// after removal) and a report on a peer removed while in flight
// (TestContract_doneErrors). This file covers the rest, the
// same bad values through every other entry point, and for each one checks
// what those tests do not: the call changes nothing (same peers, weights,
// down flags, in-flight counts) and the picker then still runs a full
// cycle as before.
//
// Latencies are time.Duration, an int64 of nanoseconds, so NaN and
// infinite latencies cannot be expressed; the extremes that can are
// math.MinInt64 (rejected like any negative latency) and math.MaxInt64
// (accepted: a very slow reply).

// badInputSet is the picker every bad call is made on: three healthy
// primaries and a backup, one attempt held in flight on a peer of another
// picker to check that reports never cross pickers.
type badInputSet struct {
	p       Picker
	set     updater
	peers   []*Peer // a (weight 3), b (2), c (1), bk (backup)
	other   Picker  // another picker, holding o with one attempt in flight
	o       *Peer
	removed *Peer // a peer added then removed, nothing in flight
}

func newBadInputSet(t *testing.T, pc pickerCase) *badInputSet {
	t.Helper()
	s := &badInputSet{
		peers:   []*Peer{NewPeer("a", Weight(3)), NewPeer("b", Weight(2)), NewPeer("c", Weight(1)), backupOf(pc, "bk")},
		o:       NewPeer("o"),
		removed: NewPeer("gone"),
	}
	var opts []Option
	if _, err := pc.new(nil, WithRand(rand.NewPCG(1, 2))); err == nil {
		opts = append(opts, WithRand(rand.NewPCG(5, 6)))
	}
	var err error
	s.p, err = pc.new(append(s.peers[:len(s.peers):len(s.peers)], s.removed), opts...)
	require.NoError(t, err)
	s.set = toSet(s.p)
	require.NoError(t, s.set.Remove(s.removed))
	s.other, err = pc.new([]*Peer{s.o})
	require.NoError(t, err)
	got := mustPick(t, s.other, nil)
	require.Same(t, s.o, got)
	return s
}

// snapshot is what a rejected call must leave as it was.
type badInputSnapshot struct {
	peers    []*Peer
	weights  []int
	down     []bool
	inFlight []int
	oFlight  int
}

func (s *badInputSet) snapshot() badInputSnapshot {
	var snap badInputSnapshot
	snap.peers = s.set.Peers()
	for _, q := range append(s.peers, s.removed) {
		snap.weights = append(snap.weights, q.Weight())
		snap.down = append(snap.down, q.IsDown())
		snap.inFlight = append(snap.inFlight, q.InFlight())
	}
	snap.oFlight = s.o.InFlight()
	return snap
}

// fullCycle picks one full cycle of the healthy primaries, reporting each
// pick as a success, and checks its spread as each picker's doc promises:
// the weighted round-robins (and LeastConn, whose every pick here is a tie
// at 0 in flight, broken by smooth round-robin) give each peer its weight
// in any 6 consecutive picks; RoundRobin gives each one turn in any 3; the
// randomized pickers pick only primaries and, in 60 seeded picks, each of
// them at least once (the latency-aware ones may starve a peer that
// reported a huge latency, as they should, so for them only the first
// holds, and so for the keyed pickers and those whose trait is
// cyclePriority).
func (s *badInputSet) fullCycle(t *testing.T, pc pickerCase) {
	t.Helper()
	name := pc.name
	weights := map[string]int{"a": 3, "b": 2, "c": 1}
	n, want := 0, map[string]int{}
	switch {
	case name == "LeastConn" || fuzzTraits[name].cycle == cycleWeights:
		n, want = 6, weights
	case fuzzTraits[name].cycle == cycleRotation:
		n, want = 3, map[string]int{"a": 1, "b": 1, "c": 1}
	default:
		n = 60
	}
	got := map[string]int{}
	for range n {
		q := mustPick(t, s.p, nil)
		got[q.Addr()]++
		require.NoError(t, s.p.Done(q, Outcome{Latency: time.Millisecond}))
	}
	if len(want) != 0 {
		assert.Equal(t, want, got, "one full cycle")
		return
	}
	if !pc.alg.NoBackups { // else bk is a primary
		assert.Zero(t, got["bk"], "backup picked while primaries are healthy")
	}
	if pc.alg.Latency || pc.alg.Keyed || fuzzTraits[name].cycle == cyclePriority {
		// A latency-aware picker may starve a peer that reported a huge
		// latency; IPHash sends every request without an address to one
		// peer, as nginx does for a unix-socket client; a priority picker
		// promises no spread at all.
		return
	}
	for a := range weights {
		assert.Positive(t, got[a], "peer %s in %d picks: %v", a, n, got)
	}
}

func TestBadInput(t *testing.T) {
	type call func(t *testing.T, s *badInputSet) error
	tests := []struct {
		name string
		call call
		want error // nil: a documented no-op that succeeds
	}{
		// Add: every rejected Add adds nothing, not even the valid peers
		// given with the bad one.
		{"Add empty address", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("")) }, ErrInvalidConfig},
		{"Add negative weight", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", Weight(-1))) }, ErrInvalidConfig},
		{"Add weight MinInt", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", Weight(math.MinInt))) }, ErrInvalidConfig},
		{"Add weight MaxInt", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", Weight(math.MaxInt))) }, ErrInvalidConfig},
		{"Add weight past MaxWeightSum", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", Weight(MaxWeightSum+1))) }, ErrInvalidConfig},
		{"Add weight MaxWeightSum overflowing the sum", func(t *testing.T, s *badInputSet) error {
			return s.set.Add(NewPeer("x", Weight(MaxWeightSum)))
		}, ErrInvalidConfig},
		{"Add negative max_fails", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", MaxFails(-1))) }, ErrInvalidConfig},
		{"Add fail_timeout MinInt64", func(t *testing.T, s *badInputSet) error {
			return s.set.Add(NewPeer("x", FailTimeout(math.MinInt64)))
		}, ErrInvalidConfig},
		{"Add negative max_conns", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x", MaxConns(-5))) }, ErrInvalidConfig},
		{"Add nil", func(t *testing.T, s *badInputSet) error { return s.set.Add(nil) }, ErrInvalidConfig},
		{"Add nil among valid", func(t *testing.T, s *badInputSet) error { return s.set.Add(NewPeer("x"), nil) }, ErrInvalidConfig},
		{"Add valid then invalid", func(t *testing.T, s *badInputSet) error {
			return s.set.Add(NewPeer("x"), NewPeer("y", Weight(-1)))
		}, ErrInvalidConfig},
		{"Add the same peer twice in one call", func(t *testing.T, s *badInputSet) error {
			x := NewPeer("x")
			return s.set.Add(x, x)
		}, ErrDuplicatePeer},
		{"Add a held peer", func(t *testing.T, s *badInputSet) error { return s.set.Add(s.peers[0]) }, ErrPeerInUse},
		{"Add another picker's peer", func(t *testing.T, s *badInputSet) error { return s.set.Add(s.o) }, ErrPeerInUse},
		{"Add nothing", func(t *testing.T, s *badInputSet) error { return s.set.Add() }, nil},

		// SetWeight: a rejected weight leaves the old one.
		{"SetWeight negative", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.peers[0], -1) }, ErrInvalidConfig},
		{"SetWeight MinInt", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.peers[0], math.MinInt) }, ErrInvalidConfig},
		{"SetWeight MaxInt", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.peers[0], math.MaxInt) }, ErrInvalidConfig},
		{"SetWeight past MaxWeightSum", func(t *testing.T, s *badInputSet) error {
			return s.set.SetWeight(s.peers[1], MaxWeightSum+1)
		}, ErrInvalidConfig},
		{"SetWeight overflowing the sum", func(t *testing.T, s *badInputSet) error {
			return s.set.SetWeight(s.peers[1], MaxWeightSum)
		}, ErrInvalidConfig},
		{"SetWeight nil", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(nil, 1) }, ErrUnknownPeer},
		{"SetWeight removed", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.removed, 1) }, ErrUnknownPeer},
		{"SetWeight another picker's peer", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.o, 1) }, ErrUnknownPeer},
		{"SetWeight unchanged", func(t *testing.T, s *badInputSet) error { return s.set.SetWeight(s.peers[0], 3) }, nil},

		// SetDown and Remove on peers the picker does not hold.
		{"SetDown nil", func(t *testing.T, s *badInputSet) error { return s.set.SetDown(nil, true) }, ErrUnknownPeer},
		{"SetDown removed", func(t *testing.T, s *badInputSet) error { return s.set.SetDown(s.removed, true) }, ErrUnknownPeer},
		{"SetDown another picker's peer", func(t *testing.T, s *badInputSet) error { return s.set.SetDown(s.o, true) }, ErrUnknownPeer},
		{"SetDown up when up", func(t *testing.T, s *badInputSet) error { return s.set.SetDown(s.peers[0], false) }, nil},
		{"Remove nil", func(t *testing.T, s *badInputSet) error { return s.set.Remove(nil) }, ErrUnknownPeer},
		{"Remove removed", func(t *testing.T, s *badInputSet) error { return s.set.Remove(s.removed) }, ErrUnknownPeer},
		{"Remove another picker's peer", func(t *testing.T, s *badInputSet) error { return s.set.Remove(s.o) }, ErrUnknownPeer},

		// Done: reports nothing is waiting for. The other picker's attempt
		// stays in flight there.
		{"Done another picker's peer in flight", func(t *testing.T, s *badInputSet) error { return s.p.Done(s.o, Outcome{}) }, ErrUnknownPeer},
		{"Done removed, nothing in flight", func(t *testing.T, s *badInputSet) error {
			return s.p.Done(s.removed, Outcome{Failed: true})
		}, ErrUnknownPeer},
		{"Done held, nothing in flight", func(t *testing.T, s *badInputSet) error {
			return s.p.Done(s.peers[2], Outcome{Failed: true})
		}, ErrNotInFlight},
		{"Done backup, nothing in flight", func(t *testing.T, s *badInputSet) error { return s.p.Done(s.peers[3], Outcome{}) }, ErrNotInFlight},
		{"Done a zero Peer", func(t *testing.T, s *badInputSet) error { return s.p.Done(&Peer{}, Outcome{}) }, ErrUnknownPeer},
		{"Done latency MinInt64 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			err := s.p.Done(q, Outcome{Latency: math.MinInt64})
			if q.InFlight() != 1 {
				return errors.New("rejected report ended the attempt")
			}
			if err2 := s.p.Done(q, Outcome{}); err2 != nil {
				return err2
			}
			return err
		}, ErrInvalidLatency},
		{"Done latency -1ns, failed, on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			err := s.p.Done(q, Outcome{Failed: true, Latency: -1})
			if q.State().Fails != 0 {
				return errors.New("rejected report counted a failure")
			}
			if err2 := s.p.Done(q, Outcome{}); err2 != nil {
				return err2
			}
			return err
		}, ErrInvalidLatency},
		{"Done failed and abandoned on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			err := s.p.Done(q, Outcome{Failed: true, Abandoned: true, Latency: time.Millisecond})
			if q.InFlight() != 1 || q.State().Fails != 0 {
				return errors.New("rejected report changed the peer")
			}
			if err2 := s.p.Done(q, Outcome{}); err2 != nil {
				return err2
			}
			return err
		}, ErrInvalidOutcome},
		{"Done superseded but not abandoned on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			err := s.p.Done(q, Outcome{Superseded: true, Latency: time.Millisecond})
			if q.InFlight() != 1 || q.State().Fails != 0 {
				return errors.New("rejected report changed the peer")
			}
			if err2 := s.p.Done(q, Outcome{}); err2 != nil {
				return err2
			}
			return err
		}, ErrInvalidOutcome},

		// Update: a rejected snapshot changes nothing (balancer_test.go
		// checks the rest of the peers' state).
		{"Update with nil", func(t *testing.T, s *badInputSet) error {
			return s.set.Update(append(s.set.Peers(), nil))
		}, ErrInvalidConfig},
		{"Update with a held peer twice", func(t *testing.T, s *badInputSet) error {
			return s.set.Update(append(s.set.Peers(), s.peers[0]))
		}, ErrDuplicatePeer},
		{"Update with a new peer twice", func(t *testing.T, s *badInputSet) error {
			x := NewPeer("x")
			return s.set.Update(append(s.set.Peers(), x, x))
		}, ErrDuplicatePeer},
		{"Update with another picker's peer", func(t *testing.T, s *badInputSet) error {
			return s.set.Update(append(s.set.Peers(), s.o))
		}, ErrPeerInUse},
		{"Update with weights past MaxWeightSum", func(t *testing.T, s *badInputSet) error {
			return s.set.Update(append(s.set.Peers(), NewPeer("x", Weight(MaxWeightSum))))
		}, ErrInvalidConfig},
		{"Update with the picker's own peers", func(t *testing.T, s *badInputSet) error {
			return s.set.Update(s.set.Peers())
		}, nil},

		{"Done with a load report, accepted and ignored", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			return s.p.Done(q, Outcome{Latency: time.Millisecond, Load: &ServerLoad{Utilization: 1.5, RPS: 1e9, EPS: 3, InFlight: 7, HasInFlight: true}})
		}, nil},
		{"Done failed with Load.Utilization NaN on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{Utilization: math.NaN(), HasInFlight: true}, "Load.Utilization")
		}, ErrInvalidOutcome},
		{"Done failed with Load.Utilization +Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{Utilization: math.Inf(1), HasInFlight: true}, "Load.Utilization")
		}, ErrInvalidOutcome},
		{"Done failed with Load.Utilization -Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{Utilization: math.Inf(-1), HasInFlight: true}, "Load.Utilization")
		}, ErrInvalidOutcome},
		{"Done failed with Load.Utilization -1 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{Utilization: -1, HasInFlight: true}, "Load.Utilization")
		}, ErrInvalidOutcome},
		{"Done failed with Load.Utilization -0.001 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{Utilization: -0.001, HasInFlight: true}, "Load.Utilization")
		}, ErrInvalidOutcome},
		{"Done failed with Load.RPS NaN on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{RPS: math.NaN(), HasInFlight: true}, "Load.RPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.RPS +Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{RPS: math.Inf(1), HasInFlight: true}, "Load.RPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.RPS -Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{RPS: math.Inf(-1), HasInFlight: true}, "Load.RPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.RPS -1 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{RPS: -1, HasInFlight: true}, "Load.RPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.RPS -0.001 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{RPS: -0.001, HasInFlight: true}, "Load.RPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.EPS NaN on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{EPS: math.NaN(), HasInFlight: true}, "Load.EPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.EPS +Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{EPS: math.Inf(1), HasInFlight: true}, "Load.EPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.EPS -Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{EPS: math.Inf(-1), HasInFlight: true}, "Load.EPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.EPS -1 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{EPS: -1, HasInFlight: true}, "Load.EPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.EPS -0.001 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{EPS: -0.001, HasInFlight: true}, "Load.EPS")
		}, ErrInvalidOutcome},
		{"Done failed with Load.InFlight NaN on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{InFlight: math.NaN(), HasInFlight: true}, "Load.InFlight")
		}, ErrInvalidOutcome},
		{"Done failed with Load.InFlight +Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{InFlight: math.Inf(1), HasInFlight: true}, "Load.InFlight")
		}, ErrInvalidOutcome},
		{"Done failed with Load.InFlight -Inf on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{InFlight: math.Inf(-1), HasInFlight: true}, "Load.InFlight")
		}, ErrInvalidOutcome},
		{"Done failed with Load.InFlight -1 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{InFlight: -1, HasInFlight: true}, "Load.InFlight")
		}, ErrInvalidOutcome},
		{"Done failed with Load.InFlight -0.001 on an attempt in flight", func(t *testing.T, s *badInputSet) error {
			return badLoad(t, s, ServerLoad{InFlight: -0.001, HasInFlight: true}, "Load.InFlight")
		}, ErrInvalidOutcome},
		{"Done latency MaxInt64 is a slow success", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			return s.p.Done(q, Outcome{Latency: math.MaxInt64})
		}, nil},
		{"Done latency 0", func(t *testing.T, s *badInputSet) error {
			q := mustPick(t, s.p, nil)
			return s.p.Done(q, Outcome{})
		}, nil},
	}
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := newBadInputSet(t, pc)
				s.fullCycle(t, pc)
				before := s.snapshot()
				err := tt.call(t, s)
				if tt.want == nil {
					assert.NoError(t, err)
				} else {
					assert.ErrorIs(t, err, tt.want)
				}
				assert.Equal(t, before, s.snapshot(), "the call changed the picker")
				s.fullCycle(t, pc)
				assert.Equal(t, 1, s.o.InFlight(), "the other picker's attempt")
				require.NoError(t, s.other.Done(s.o, Outcome{}))
			})
		}
	})
}

// badLoad reports a failed attempt whose Load holds a bad value, checks
// that the error names the value's field and that the picker counted no
// failure and kept the attempt in flight, then ends the attempt.
func badLoad(t *testing.T, s *badInputSet, l ServerLoad, field string) error {
	t.Helper()
	q := mustPick(t, s.p, nil)
	err := s.p.Done(q, Outcome{Failed: true, Latency: time.Millisecond, Load: &l})
	assert.ErrorContains(t, err, field)
	assert.ErrorContains(t, err, q.Addr())
	if q.InFlight() != 1 || q.State().Fails != 0 {
		return errors.New("rejected report changed the peer")
	}
	if err2 := s.p.Done(q, Outcome{}); err2 != nil {
		return err2
	}
	return err
}
