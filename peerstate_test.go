package balancer

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// latOf returns the peak EWMA that p's picker keeps of it, P2CPeakEWMA's
// or FastestFirst's, or a zero one if p holds neither.
func latOf(p *Peer) *latencyStats {
	switch s := p.stateOf().(type) {
	case *ffPeer:
		return &s.lat
	case *p2cPeer:
		return &s.lat
	case *prequalPeer:
		return &s.lat
	}
	return new(latencyStats)
}

// TestPeer_fieldsSharedOnly holds Peer to nginx's per-server model (an
// ngx_http_upstream_rr_peer_t of nginx 1.22.1), the peer set's
// bookkeeping and the caller's value: a field one algorithm alone reads or
// writes belongs in that algorithm's per-peer state (peerstate.go). A new
// Peer field fails this test until it is listed here with the part of the
// shared model it is.
func TestPeer_fieldsSharedOnly(t *testing.T) {
	shared := map[string]string{
		"addr":            "nginx's name",
		"server":          "nginx's server, the configured text (HashText)",
		"configErr":       "NewPeer's first bad option, reported by the peer set",
		"weight":          "weight",
		"smooth":          "weight as the smooth step and failure accounting read it: the configured one, or one derived in its place (ReportedWRR)",
		"maxFails":        "max_fails",
		"failTimeout":     "fail_timeout",
		"maxConns":        "max_conns",
		"backup":          "backup (nginx keeps it as the list a peer is in)",
		"down":            "down",
		"value":           "the caller's value",
		"slots":           "conns and every attempt picked",
		"failures":        "every failure reported, for Stats",
		"fails":           "fails",
		"accessed":        "accessed",
		"checked":         "checked",
		"ejections":       "the ejection count every picker's fail window reads under WithEjectionBackoff (a guard of nginx's model, not an algorithm's)",
		"outUntil":        "the end of the last ejection's window, from which WithEjectionBackoff's decay counts",
		"outcomes":        "attempts and successes in WithSuccessRateEjection's interval, a guard every picker shares",
		"effectiveWeight": "effective_weight",
		"recovering":      "effective_weight < weight, written with it",
		"currentWeight":   "current_weight",
		"index":           "the peer set's position of the peer in its list",
		"owner":           "the peer set holding the peer",
		"held":            "the peer set that held the peer last",
		"state":           "the holding algorithm's own state, which it declares",
		"warmFrom":        "when its slow start began: a guard every weighted picker shares (guard_slowstart.go), as nginx Plus keeps slow_start per server",
	}
	typ := reflect.TypeFor[Peer]()
	seen := map[string]bool{}
	for i := range typ.NumField() {
		name := typ.Field(i).Name
		seen[name] = true
		assert.Contains(t, shared, name, "Peer.%s is no part of the shared model: move it to its algorithm's state", name)
	}
	for name := range shared {
		assert.True(t, seen[name], "Peer.%s is listed but gone: drop it from the list", name)
	}
}

// TestPeerState_ownedByAlgorithm checks that each algorithm that keeps
// per-peer state finds its own on a peer it holds, that the state moves
// with neither Remove nor a claim by another algorithm, and that Update
// keeps it for a kept peer while Add starts afresh.
func TestPeerState_ownedByAlgorithm(t *testing.T) {
	tests := []struct {
		name string
		make func([]*Peer) (Updater, error)
		is   func(any) bool
	}{
		{"FastestFirst", func(p []*Peer) (Updater, error) { return NewFastestFirst(p) }, func(s any) bool { _, ok := s.(*ffPeer); return ok }},
		{"P2CPeakEWMA", func(p []*Peer) (Updater, error) { return NewP2CPeakEWMA(p) }, func(s any) bool { _, ok := s.(*p2cPeer); return ok }},
		{"Prequal", func(p []*Peer) (Updater, error) { return NewPrequal(p) }, func(s any) bool { _, ok := s.(*prequalPeer); return ok }},
		{"RandomWeighted", func(p []*Peer) (Updater, error) { return NewRandomWeighted(p) }, func(s any) bool { _, ok := s.(*rwPeer); return ok }},
		{"RoundRobin", func(p []*Peer) (Updater, error) { return NewRoundRobin(p) }, func(s any) bool { return s == nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := NewPeer("a")
			u, err := tt.make([]*Peer{a})
			require.NoError(t, err)
			require.True(t, tt.is(a.stateOf()), "state %T", a.stateOf())
			kept := a.state.Load()

			require.NoError(t, u.Update([]*Peer{NewPeer("a", Weight(2))}))
			assert.Same(t, kept, a.state.Load(), "Update keeps a kept peer's state")

			require.NoError(t, u.Remove(a))
			assert.Same(t, kept, a.state.Load(), "Remove leaves the state for reports in flight")
			require.NoError(t, u.Add(a))
			assert.True(t, tt.is(a.stateOf()))
			if kept != nil {
				assert.NotSame(t, kept, a.state.Load(), "Add starts afresh")
			}

			// Claimed by another algorithm, the peer holds that one's state.
			require.NoError(t, u.Remove(a))
			_, err = NewLeastConn([]*Peer{a})
			require.NoError(t, err)
			assert.Nil(t, a.stateOf(), "LeastConn keeps no per-peer state")
		})
	}
}
