package subset

import (
	"errors"
	"fmt"
	"github.com/lbgo/balancer"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func toSetOf(keys []string) map[string]bool {
	m := make(map[string]bool, len(keys))
	for _, k := range keys {
		m[k] = true
	}
	return m
}

func addrsOf(peers []*balancer.Peer) []string {
	out := make([]string, len(peers))
	for i, p := range peers {
		out[i] = p.Addr()
	}
	slices.Sort(out)
	return out
}

// subsetAddrs is the subset s chooses of peers, by key, sorted: the expected
// value, from the Subsetter alone.
func subsetAddrs(s Subsetter, peers []*balancer.Peer) []string {
	keys := make([]string, len(peers))
	for i, p := range peers {
		keys[i] = p.Addr()
	}
	var out []string
	for _, i := range s.Subset(keys) {
		out = append(out, keys[i])
	}
	slices.Sort(out)
	return out
}

// The inner picker holds the subset, and only it: picks never leave it.
func TestSubset_innerHoldsTheSubset(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		by := mustSubsetter(Rendezvous("client-7", 3))
		backends := addrPeers(10, 0)
		inner, err := pc.new(nil)
		require.NoError(t, err)
		s, err := New(inner, backends, by)
		require.NoError(t, err)
		want := subsetAddrs(by, backends)
		require.Len(t, want, 3)
		assert.Equal(t, want, addrsOf(s.Peers()))
		assert.Len(t, s.Backends(), 10)
		var r balancer.Request
		for range 60 {
			r.Reset()
			p, err := s.Pick(&r)
			require.NoError(t, err)
			assert.Contains(t, want, p.Addr())
			require.NoError(t, s.Done(p, balancer.Outcome{}))
		}
	})
}

// Update hands the inner picker the new subset: with rendezvous, one
// backend added or removed changes at most one member, and a member kept
// keeps its state (here an attempt in flight, reported after the change).
func TestSubset_update(t *testing.T) {
	by := mustSubsetter(Rendezvous("client-7", 3))
	rr, err := balancer.NewRoundRobin(nil)
	require.NoError(t, err)
	backends := addrPeers(10, 0)
	s, err := New(rr, backends, by)
	require.NoError(t, err)
	held, err := s.Pick(nil)
	require.NoError(t, err)

	// A fresh snapshot of 11 backends, one added: for each of several
	// clients, at most one member changes.
	grown := append(addrPeers(10, 0), addrPeers(1, 10)...)
	for c := range 20 {
		other := mustSubsetter(Rendezvous(fmt.Sprint("client-", c), 3))
		before, after := subsetAddrs(other, backends), subsetAddrs(other, grown)
		assert.LessOrEqual(t, churn(toSetOf(before), toSetOf(after)), 1)
	}
	require.NoError(t, s.Update(grown))
	want := subsetAddrs(by, grown)
	assert.Equal(t, want, addrsOf(s.Peers()))
	assert.Equal(t, want, addrsOf(rr.Peers()))
	if slices.Contains(want, held.Addr()) {
		assert.Equal(t, 1, held.InFlight(), "a kept member keeps its attempt")
		assert.NoError(t, s.Done(held, balancer.Outcome{}))
	}
	assert.Len(t, s.Backends(), 11)

	// Remove, SetDown and SetWeight take the peers Pick returns and the
	// backends outside the subset alike.
	var out *balancer.Peer
	for _, p := range s.Backends() {
		if !slices.Contains(want, p.Addr()) {
			out = p
			break
		}
	}
	require.NoError(t, s.SetDown(out, true))
	assert.True(t, out.IsDown())
	require.NoError(t, s.SetWeight(out, 3))
	assert.Equal(t, 3, out.Weight())
	require.NoError(t, s.Remove(out))
	assert.Equal(t, want, addrsOf(s.Peers()), "removing a non-member keeps the subset")
	in := s.Peers()[0]
	require.NoError(t, s.SetDown(in, true))
	assert.True(t, in.IsDown(), "a member stays in the subset while down")
	assert.Equal(t, want, addrsOf(s.Peers()))
	require.NoError(t, s.Remove(in))
	assert.NotContains(t, addrsOf(s.Peers()), in.Addr())
	assert.Len(t, s.Peers(), 3)
	assert.Equal(t, subsetAddrs(by, s.Backends()), addrsOf(s.Peers()))

	fresh := balancer.NewPeer(ipAddr(99))
	require.NoError(t, s.Add(fresh))
	assert.Equal(t, subsetAddrs(by, s.Backends()), addrsOf(s.Peers()))
	assert.ErrorIs(t, s.Remove(balancer.NewPeer("stranger")), balancer.ErrUnknownPeer)
	assert.ErrorIs(t, s.SetDown(balancer.NewPeer("stranger"), true), balancer.ErrUnknownPeer)
}

// A bad list changes nothing, and says what was wrong.
func TestSubset_badInput(t *testing.T) {
	by := mustSubsetter(Ring(0, 1, 2))
	rr, err := balancer.NewRoundRobin(nil)
	require.NoError(t, err)
	s, err := New(rr, addrPeers(4, 0), by)
	require.NoError(t, err)
	before := addrsOf(s.Peers())
	p := balancer.NewPeer(ipAddr(50))
	other, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer(ipAddr(60))})
	require.NoError(t, err)
	for _, tc := range []struct {
		name     string
		snapshot []*balancer.Peer
		want     error
	}{
		{"nil peer", []*balancer.Peer{balancer.NewPeer(ipAddr(1)), nil}, balancer.ErrInvalidConfig},
		{"twice", []*balancer.Peer{p, p}, balancer.ErrDuplicatePeer},
		{"bad weight", []*balancer.Peer{balancer.NewPeer(ipAddr(1), balancer.Weight(-1))}, balancer.ErrInvalidConfig},
		{"another picker's", append(addrPeers(2, 0), other.Peers()...), balancer.ErrPeerInUse},
		// Wherever it falls, member or not.
		{"another picker's, among many", append(addrPeers(8, 0), other.Peers()...), balancer.ErrPeerInUse},
		{"another picker's, first", append(other.Peers(), addrPeers(8, 0)...), balancer.ErrPeerInUse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.Update(tc.snapshot)
			assert.ErrorIs(t, err, tc.want)
			assert.Equal(t, before, addrsOf(s.Peers()))
			assert.Len(t, s.Backends(), 4)
		})
	}
	_, err = New(nil, nil, by)
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
	_, err = New(rr, nil, nil)
	assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
}

// Pick and Done go straight to the inner picker: nothing allocated.
func TestSubset_pickAllocatesNothing(t *testing.T) {
	inner, err := balancer.NewP2CPeakEWMA(nil)
	require.NoError(t, err)
	s, err := New(inner, addrPeers(100, 0), mustSubsetter(Ring(3, 10, 10)))
	require.NoError(t, err)
	var r balancer.Request
	allocs := testing.AllocsPerRun(1000, func() {
		r.Reset()
		p, err := s.Pick(&r)
		if err != nil {
			panic(err)
		}
		_ = s.Done(p, balancer.Outcome{})
	})
	assert.Zero(t, allocs)
}

// Picks and reports racing updates of the backend list (-race).
func TestSubset_concurrent(t *testing.T) {
	inner, err := balancer.NewLeastConn(nil)
	require.NoError(t, err)
	s, err := New(inner, addrPeers(40, 0), mustSubsetter(Rendezvous("c", 5)))
	require.NoError(t, err)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			var r balancer.Request
			for range 2000 {
				r.Reset()
				p, err := s.Pick(&r)
				if errors.Is(err, balancer.ErrNoLivePeer) {
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				_ = s.Done(p, balancer.Outcome{})
			}
		})
	}
	for i := range 50 {
		assert.NoError(t, s.Update(addrPeers(30+i%20, i%7)))
	}
	wg.Wait()
	assert.Len(t, s.Peers(), 5)
}

// A Subset counts its picks that found no live peer, as every picker of
// the package does (the metrics Collector reads NoLivePeerCount): the
// inner picker's count.
func TestSubset_noLivePeerCount(t *testing.T) {
	inner, err := balancer.NewRoundRobin(nil)
	require.NoError(t, err)
	s, err := New(inner, addrPeers(6, 0, balancer.Down()), mustSubsetter(Ring(0, 2, 3)))
	require.NoError(t, err)
	for range 4 {
		_, err := s.Pick(nil)
		require.ErrorIs(t, err, balancer.ErrNoLivePeer)
	}
	c, ok := any(s).(interface{ NoLivePeerCount() uint64 })
	require.True(t, ok, "Subset has no NoLivePeerCount")
	assert.Equal(t, uint64(4), c.NoLivePeerCount())
}

// fixedSubsetter returns the same positions whatever the keys: a
// Subsetter of the caller's that breaks the interface's contract.
type fixedSubsetter []int

func (f fixedSubsetter) Subset([]string) []int { return f }

// A Subsetter of the caller's that returns a position out of the list or
// one twice is refused, naming it, and changes nothing.
func TestSubset_badSubsetter(t *testing.T) {
	for _, tc := range []struct {
		name string
		pos  []int
		want string
	}{
		{"past the end", []int{0, 4}, "position 4 of 4 backends"},
		{"negative", []int{-1}, "position -1 of 4 backends"},
		{"twice", []int{1, 1}, "position 1 twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			good := fixedSubsetter{0}
			by := &switchSubsetter{s: good}
			inner, err := balancer.NewRoundRobin(nil)
			require.NoError(t, err)
			s, err := New(inner, addrPeers(4, 0), by)
			require.NoError(t, err)
			before := s.Backends()
			by.s = fixedSubsetter(tc.pos)
			err = s.Update(addrPeers(4, 0))
			require.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.want)
			assert.Equal(t, before, s.Backends())
			assert.Equal(t, addrsOf(before[:1]), addrsOf(s.Peers()))
		})
	}
}

// switchSubsetter is the Subsetter s, which the test changes between
// calls.
type switchSubsetter struct{ s Subsetter }

func (w *switchSubsetter) Subset(keys []string) []int { return w.s.Subset(keys) }
