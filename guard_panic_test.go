package balancer

import (
	"math"
	"net/netip"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// guardRequest resets r into a fresh request routed by i: the hash
// pickers' key and IPHash's client address (a /24 of its own for each i,
// since IPHash hashes three octets) both follow i; the other pickers
// ignore them.
func guardRequest(r *Request, i int) *Request {
	r.Reset()
	r.SetKey("key" + strconv.Itoa(i))
	r.SetAddr(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}))
	return r
}

// failOut takes each of targets out of b with one failed attempt (max_fails
// 1): it picks with fresh requests until it holds an attempt on each target,
// reporting the other attempts as successes, then reports each held one
// failed.
func failOut(t *testing.T, b Balancer, targets []*Peer) {
	t.Helper()
	held := map[*Peer]bool{}
	var r Request
	for i := 0; len(held) < len(targets) && i < 100_000; i++ {
		p, err := b.Pick(guardRequest(&r, i))
		require.NoError(t, err)
		if slices.Contains(targets, p) && !held[p] {
			held[p] = true
			continue
		}
		require.NoError(t, b.Done(p, Outcome{}))
	}
	require.Len(t, held, len(targets), "picks reached every peer to fail")
	for p := range held {
		require.NoError(t, b.Done(p, Outcome{Failed: true}))
	}
}

// reached picks n times with fresh requests, holding every attempt (so no
// report changes any peer's failures), and returns the peers picked.
func reached(t *testing.T, b Balancer, n int) map[*Peer]bool {
	t.Helper()
	got := map[*Peer]bool{}
	var r Request
	for i := range n {
		p, err := b.Pick(guardRequest(&r, 1_000_000+i))
		require.NoError(t, err)
		got[p] = true
	}
	return got
}

// TestPanicThreshold_everyPicker: every picker of the registry, 10 peers
// (max_fails 1), k of them failed out, threshold 50%. Derivation: the peers
// not down are the 10, the eligible 10−k; panic engages when
// (10−k)·100 < 50·10, that is k > 5. So while k ≤ 5 the picks reach exactly
// the 10−k others, and from k = 6 on (10 included, where nginx would have
// none) all 10. Without the option, the others alone for every k < 10.
func TestPanicThreshold_everyPicker(t *testing.T) {
	const n, threshold = 10, 50.0
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for k := 0; k <= n; k++ {
			for _, guarded := range []bool{false, true} {
				clk := newFakeClock()
				peers := makePeers(n, numbered, nil)
				opts := []Option{clk.opt()}
				if guarded {
					opts = append(opts, WithPanicThreshold(threshold))
				}
				b, err := pc.new(peers, opts...)
				require.NoError(t, err)
				failOut(t, b, peers[:k])
				want := map[*Peer]bool{}
				panics := guarded && float64(n-k)*100 < threshold*n
				for i, p := range peers {
					if i >= k || panics {
						want[p] = true
					}
				}
				if len(want) == 0 {
					_, err := b.Pick(nil)
					assert.ErrorIs(t, err, ErrNoLivePeer, "k=%d guarded=%v", k, guarded)
					continue
				}
				got := reached(t, b, 2000)
				assert.Equal(t, addrsOf(want), addrsOf(got), "k=%d guarded=%v", k, guarded)
				assert.Equal(t, panics, b.(interface{ InPanic() bool }).InPanic(), "k=%d guarded=%v", k, guarded)
			}
		}
	})
}

// addrsOf returns the sorted addresses of a set of peers.
func addrsOf(set map[*Peer]bool) []string {
	var out []string
	for p := range set {
		out = append(out, p.Addr())
	}
	slices.Sort(out)
	return out
}

// TestGuards_badValues: every picker refuses a percent out of [0, 100],
// NaN and the infinities included, with ErrInvalidConfig and a message
// naming the option and the value; 0 and 100 are accepted.
func TestGuards_badValues(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		for _, mk := range []struct {
			name string
			opt  func(float64) Option
		}{{"WithPanicThreshold", WithPanicThreshold}, {"WithMaxEjectionPercent", WithMaxEjectionPercent}} {
			for _, v := range []float64{math.NaN(), -1, -0.001, 100.5, math.Inf(1), math.Inf(-1)} {
				_, err := pc.new([]*Peer{NewPeer("a")}, mk.opt(v))
				require.ErrorIs(t, err, ErrInvalidConfig, "%s(%v)", mk.name, v)
				assert.ErrorContains(t, err, mk.name+"("+strconv.FormatFloat(v, 'g', -1, 64)+")")
				assert.ErrorContains(t, err, pc.name)
			}
			for _, v := range []float64{0, 100} {
				_, err := pc.new([]*Peer{NewPeer("a")}, mk.opt(v))
				assert.NoError(t, err, "%s(%v)", mk.name, v)
			}
		}
	})
}

var _ = time.Second
