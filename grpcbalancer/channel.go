package grpcbalancer

import (
	"sync"

	lbgo "github.com/lbgo/balancer"
)

// Channel is the picker state of the open gRPC channel (grpc.ClientConn)
// whose lbgo_* policy serves target, for metrics and debugging: give it
// to the metrics module's New (metrics.New("api",
// grpcbalancer.Channel("dns:///api:443"))) to export the peers' in-flight
// attempts, totals, health and weights, and the picker's counters (Stats).
//
// target is the channel's target as gRPC parsed it, with its scheme: the
// string passed to grpc.NewClient when it has one ("dns:///api:443",
// "backends:///demo"), "dns:///" followed by it when it has none. Each
// call reads the policy open at that moment, so a Channel made before the
// channel connects, or kept across a change of policy, reads the current
// one. With several channels open on one target it reads the one built
// last; with none (not connected yet, closed, or not an lbgo_* policy),
// Peers returns nil.
//
// Cost: a lock and a scan of the open lbgo_* policies per call; Pick and
// Done do not touch it. Safe for concurrent use. The zero value reads the
// target "".
type Channel string

// Peers returns the peers of the channel's picker: its own Peer values,
// whose Stats and State read the live counters.
func (c Channel) Peers() []*lbgo.Peer {
	lb := c.picker()
	if lb == nil {
		return nil
	}
	return lb.Peers()
}

// Policy returns the name of the channel's lbgo_* policy
// ("lbgo_roundrobin"), or "" with none open.
func (c Channel) Policy() string {
	if b := c.policy(); b != nil {
		return b.name
	}
	return ""
}

// Stats returns the counters of the channel's picker (lbgo.Stats), zero
// with none open, so that the metrics module exports its guards too. A
// gRPC pick that finds no live peer counts 2 in NoLivePeer: the policy
// picks once more after noting that an RPC waits, so as not to miss a
// peer freed meanwhile. A change of the policy's picker options builds a
// new picker, whose counts start from 0.
func (c Channel) Stats() lbgo.PickerStats {
	if s, ok := c.picker().(lbgo.Stats); ok {
		return s.Stats()
	}
	return lbgo.PickerStats{}
}

// NoLivePeerCount returns how many of the picker's picks found no live
// peer, as Stats().NoLivePeer does.
//
// Deprecated: use Stats().NoLivePeer.
func (c Channel) NoLivePeerCount() uint64 { return c.Stats().NoLivePeer }

// ProbeStats returns the probe counters of the channel's prober, for a
// probing policy (lbgo_prequal); zero for another policy or none. A new
// picker (a change of the policy's fields) has a new prober, whose counts
// start from 0.
func (c Channel) ProbeStats() ProbeStats {
	b := c.policy()
	if b == nil {
		return ProbeStats{}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed || b.prober == nil {
		return ProbeStats{}
	}
	return b.prober.stats()
}

// policy returns the open policy built last for c, or nil.
func (c Channel) policy() *lbBalancer {
	open.mu.Lock()
	var b *lbBalancer
	for i := len(open.all) - 1; i >= 0; i-- {
		if open.all[i].target == string(c) {
			b = open.all[i]
			break
		}
	}
	open.mu.Unlock()
	return b
}

// picker returns the current picker of the policy built last for c, or
// nil.
func (c Channel) picker() lbgo.Balancer {
	b := c.policy()
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	return b.picker
}

// open lists the policies built and not yet closed, in build order, for
// Channel.
var open struct {
	mu  sync.Mutex
	all []*lbBalancer
}

func remember(b *lbBalancer) {
	open.mu.Lock()
	open.all = append(open.all, b)
	open.mu.Unlock()
}

func forget(b *lbBalancer) {
	open.mu.Lock()
	defer open.mu.Unlock()
	for i, o := range open.all {
		if o == b {
			open.all = append(open.all[:i], open.all[i+1:]...)
			return
		}
	}
}
