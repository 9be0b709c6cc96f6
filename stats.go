package balancer

import (
	"fmt"
	"time"
)

// Health is where a peer stands in its picker's rotation, as a monitoring
// system shows it.
type Health uint8

// The values of Health, in the order Stats tests them: a peer marked down
// is HealthDown whatever its failures, one out for its failures is
// HealthFailed or HealthProbing whatever its in-flight count.
const (
	// HealthOK: the peer may take an attempt.
	HealthOK Health = iota
	// HealthDown: marked down (the Down option or SetDown).
	HealthDown
	// HealthFailed: max_fails failures within fail_timeout took it out
	// until its fail_timeout passes.
	HealthFailed
	// HealthProbing: out for its failures, but its fail_timeout has
	// passed: the next pick of it is a probe, or a probe is in flight.
	// A success clears its failures; a failure takes it out again.
	HealthProbing
	// HealthFull: at its max_conns limit.
	HealthFull
)

var healthNames = [...]string{"healthy", "down", "failed", "probing", "full"}

// String returns the health's lower-case name: healthy, down, failed,
// probing or full.
func (h Health) String() string {
	if int(h) < len(healthNames) {
		return healthNames[h]
	}
	return fmt.Sprintf("Health(%d)", uint8(h))
}

// Healths lists every Health, for a monitoring system that exports one
// series per value.
func Healths() []Health {
	return []Health{HealthOK, HealthDown, HealthFailed, HealthProbing, HealthFull}
}

// PeerStats is what a monitoring system reads of a peer, the one snapshot
// of a peer: its totals since NewPeer, which only grow (they move with the
// peer between pickers), and its current state. Stats fills it lock-free,
// but for EffectiveWeight and CurrentWeight, which the picker keeps under
// its lock: Snapshot fills those too.
type PeerStats struct {
	Attempts uint64 // attempts picked, ever (modulo 2^40)
	Failures uint64 // attempts reported with Outcome.Failed, ever
	InFlight int    // attempts picked and not yet reported
	Fails    int    // nginx's failure count, cleared by a success after a probe
	Health   Health

	// Latency is the peak EWMA of the peer's latency that the
	// latency-aware pickers (P2CPeakEWMA, FastestFirst) keep, as of its
	// last update; Measured is false, and Latency 0, until such a picker
	// has had a report on the peer.
	Latency  time.Duration
	Measured bool

	// Blind is set while the picker balancing by what the servers say of
	// their load (Prequal's probes, the reports of WithReportedLoad and
	// ReportedWRR) hears nothing it can use from this peer's server and
	// falls back for it (EventPeerBlind); false for the other pickers.
	Blind bool

	Weight int // as configured (Weight, SetWeight)
	// EffectiveWeight and CurrentWeight are nginx's effective_weight
	// (lowered by failures, recovering by one a pick) and current_weight
	// (the smooth step's running sum), as the picker keeps them under its
	// lock: Snapshot fills them, Stats leaves them 0.
	EffectiveWeight int
	CurrentWeight   int
	// DerivedWeight is the weight a picker derives: FastestFirst's from
	// latency (out of 100), ReportedWRR's from reports (its smooth
	// step's); 0 under the other pickers.
	DerivedWeight int
	Down          bool      // marked down (the Down option or SetDown)
	Accessed      time.Time // last failure; zero if none
	Checked       time.Time // last failure or probe; zero if none
}

// Stats returns the peer's counters and health, lock-free: each field is
// read atomically, though the fields together are not one snapshot (State
// is, under the picker's lock). Health reads the owning picker's clock
// (WithClock), or time.Now for a peer no picker holds. Stats allocates
// nothing and may be called from a WithEvents hook.
//
// The counters cost the pick one atomic add on the peer, next to the
// in-flight count it already adds to, and the report of a failure one more.
func (p *Peer) Stats() PeerStats {
	st := PeerStats{
		Attempts: p.picked(),
		Failures: p.failures.Load(),
		InFlight: int(p.inFlight()),
		Fails:    int(p.fails.Load()),
	}
	if l, ok := p.stateOf().(latencyReader); ok {
		e, measured := l.latency()
		if measured {
			st.Latency, st.Measured = time.Duration(e), true
		}
	}
	if h := p.state.Load(); h != nil {
		st.Blind = h.sight.blind()
	}
	var now int64
	if s := p.owner.Load(); s != nil {
		now = s.now()
	} else {
		now = time.Now().UnixNano()
	}
	st.Health = p.health(now)
	st.Weight = int(p.weight.Load())
	if d, ok := p.stateOf().(derivedWeigher); ok {
		st.DerivedWeight = int(d.derivedWeight())
	}
	st.Down = p.down.Load()
	st.Accessed, st.Checked = unixTime(p.accessed.Load()), unixTime(p.checked.Load())
	return st
}

// Snapshot returns Stats with EffectiveWeight and CurrentWeight, which it
// reads under the owning picker's lock, taken briefly: it is safe while
// other goroutines pick, but not from a WithEvents hook (use Stats
// there). It allocates nothing.
func (p *Peer) Snapshot() PeerStats {
	st := p.Stats()
	cw, ew := p.weightsNow()
	st.CurrentWeight, st.EffectiveWeight = int(cw), int(ew)
	return st
}

// health classifies p at now. A peer out for its failures is probing once
// its window has passed (accessed == checked, both the last failure) or
// once a probe has set checked past the last failure (RR.c 591-593).
func (p *Peer) health(now int64) Health {
	switch limit := p.maxFails.Load(); {
	case p.down.Load():
		return HealthDown
	case limit != 0 && p.fails.Load() >= limit:
		if p.accessed.Load() < p.checked.Load() || !p.inFailWindow(now) {
			return HealthProbing
		}
		return HealthFailed
	case p.full():
		return HealthFull
	}
	return HealthOK
}

// NoLivePeerCount returns how many picks have returned ErrNoLivePeer since
// the picker was made: nginx's "no live upstreams" count. Lock-free; the
// count costs those picks one atomic add and every other pick nothing.
//
// Deprecated: use Stats().NoLivePeer.
func (s *peerSet) NoLivePeerCount() uint64 { return s.noLive.Load() }
