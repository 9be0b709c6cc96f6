package balancer

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// fakeClock is a settable clock for tests; it never moves by itself.
type fakeClock struct{ t time.Time }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(100, 0)} }

func (c *fakeClock) now() time.Time { return c.t }

func (c *fakeClock) add(d time.Duration) { c.t = c.t.Add(d) }

// weighted returns peers named a, b, c... with the given weights.
func weighted(ws ...int) []*Peer {
	ps := make([]*Peer, len(ws))
	for i, w := range ws {
		ps[i] = NewPeer(string(rune('a'+i)), Weight(w))
	}
	return ps
}

// picks returns n picks, each reported as a success.
func picks(t *testing.T, p Picker, n int) string {
	t.Helper()
	out := make([]string, n)
	for i := range out {
		peer, err := p.Pick(nil)
		require.NoError(t, err)
		require.NoError(t, p.Done(peer, Outcome{}))
		out[i] = peer.Addr()
	}
	return strings.Join(out, " ")
}

// pickerCase builds one picker type for the contract suite. Every picker in
// the package must appear here.
type pickerCase struct {
	name string
	new  func(peers []*Peer, opts ...Option) (Balancer, error)
	alg  Algorithm
}

// pickerCases is every picker of the registry (Algorithms), so a picker
// added there runs the whole contract suite.
var pickerCases = func() []pickerCase {
	var cs []pickerCase
	for _, a := range Algorithms() {
		cs = append(cs, pickerCase{a.Name, a.New, a})
	}
	return cs
}()

// forEachPicker runs f as a subtest for every picker type.
func forEachPicker(t *testing.T, f func(t *testing.T, pc pickerCase)) {
	for _, pc := range pickerCases {
		t.Run(pc.name, func(t *testing.T) { f(t, pc) })
	}
}

// mustPick picks for r and fails the test on error.
func mustPick(t *testing.T, p Picker, r *Request) *Peer {
	t.Helper()
	peer, err := p.Pick(r)
	require.NoError(t, err)
	require.NotNil(t, peer)
	return peer
}

// updater is the update API every picker implements.
type updater = Updater

func toSet(p Picker) updater { return p.(updater) }

// benchPeers returns n healthy peers weighted i%10+1, the workload every
// benchmark here and in the comparison module uses.
func benchPeers(n int) []*Peer {
	peers := make([]*Peer, n)
	for i := range peers {
		peers[i] = NewPeer(fmt.Sprintf("10.0.%d.%d:80", i/256, i%256), Weight(i%10+1))
	}
	return peers
}

// backupOf returns a peer for addr that is a backup, or a primary for a
// picker that refuses backups (nginx's hash, ip_hash and random methods).
func backupOf(pc pickerCase, addr string, opts ...PeerOption) *Peer {
	if pc.alg.NoBackups {
		return NewPeer(addr, opts...)
	}
	return NewPeer(addr, append(opts, Backup())...)
}
