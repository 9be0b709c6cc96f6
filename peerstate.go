package balancer

// Per-peer state of an algorithm.
//
// A Peer carries nginx's per-server model, shared by every picker (peer.go).
// What one algorithm alone learns of a peer (FastestFirst's latency
// estimates, bands and derived weight, P2CPeakEWMA's peak EWMA,
// RandomWeighted's warm-up start) is a struct of that algorithm, in its
// file, whose first field is a peerState:
//
//	type ffPeer struct {
//		peerState
//		...
//	}
//
// The picker gives its peer set a constructor (peerSet.fresh) before init;
// the peer set then makes one state for each peer it claims (Add, or Update
// for a snapshot peer it adds), stores it in Peer.state before it publishes
// the list, and leaves it alone for the peers Update keeps: what was learned
// stays; a peer added, even one removed a moment ago, starts afresh. Remove
// leaves the state in place, so that reports on attempts still in flight on
// a removed peer find it. The allocation is at the claim; a pick or a
// report reaches the state in O(1), with one atomic load and one type check
// (the own field, at the start of the state's memory), no map, no
// allocation and no lock. A pick that draws from a table built per list
// (P2CPeakEWMA's drawList, FastestFirst's ffAliasTable) reads the states
// from a slice of the table parallel to the peers, so that loading a state
// does not wait for the load of its peer.
//
// A report may race a claim of its peer by another picker (the peer removed
// and added elsewhere between the report's owner check and its read of the
// state), so the state is loaded atomically and its type checked: each
// algorithm's accessor (ffOf, p2cOf, rwOf, reportOf) returns a throwaway
// state, shared by all such stragglers, when the peer holds another
// algorithm's or none.
// Only lock-free reports reach that fallback, and they write only its
// atomics. Under the picker's lock, a peer of the current list always holds
// the picker's own state: it was stored before the list was published and
// is replaced only by a claim, which needs the peer removed, under that
// lock, first.

// peerState heads every algorithm's per-peer state.
type peerState struct {
	// own is the algorithm's state that this header begins: *ffPeer,
	// *p2cPeer, *rwPeer. Set once, when the state is made.
	own any

	// sight is the picker's watch of what the peer's server says of its
	// load, for the pickers that balance by it (sight.go).
	sight peerSight
}

// latencyReader is implemented by the states that keep a peak EWMA, for
// Peer.Stats.
type latencyReader interface {
	// latency returns the estimate (ns), undecayed, and whether any sample
	// was taken.
	latency() (float64, bool)
}

// derivedWeigher is implemented by the states of the pickers that derive a
// weight of their own, for Peer.State.
type derivedWeigher interface {
	derivedWeight() int64
}

// stateOf returns the state p holds, or nil.
func (p *Peer) stateOf() any {
	if h := p.state.Load(); h != nil {
		return h.own
	}
	return nil
}
