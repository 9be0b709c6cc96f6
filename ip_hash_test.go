package balancer

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var _ = declareTraits("IPHash", fuzzTrait{zeroWeight: zwAny})

// refIPCandidates is refHashCandidates (hash_test.go, with the other
// derivations) for ip_hash: hash = 89, then per iteration
// hash = (hash·113 + b) % 6271 over 3 bytes of IPv4, 16 of IPv6.
func refIPCandidates(addr netip.Addr, weights []int, n int) []int {
	total := refTotal(weights)
	var key []byte
	switch {
	case addr.Is4():
		b := addr.As4()
		key = b[:3]
	case addr.Is6():
		b := addr.As16()
		key = b[:]
	default:
		key = []byte{0, 0, 0}
	}
	hash := 89
	var out []int
	for range n {
		for _, b := range key {
			hash = (hash*113 + int(b)) % 6271
		}
		out = append(out, refWalk(weights, hash%total))
	}
	return out
}

// TestIPHash_derivedSequence checks IPHash against the derivation for IPv4
// (3 bytes: a /24 shares a peer), IPv6, IPv4-mapped IPv6 (16 bytes) and no
// address (3 zero bytes), with retries after failures.
func TestIPHash_derivedSequence(t *testing.T) {
	weights := []int{3, 1, 2, 5, 1}
	addrs := []netip.Addr{{}}
	for k := range 100 {
		addrs = append(addrs,
			netip.AddrFrom4([4]byte{10, byte(k), byte(k * 7), byte(k * 13)}),
			netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", k*97+1)),
			netip.MustParseAddr(fmt.Sprintf("::ffff:192.0.2.%d", k)))
	}
	peers := numberedWeighted(weights...)
	for _, p := range peers {
		MaxFails(0)(p)
	}
	h, err := NewIPHash(peers, hkClock())
	require.NoError(t, err)
	var r Request
	for _, a := range addrs {
		r.Reset()
		r.SetClientAddr(a)
		cands := refIPCandidates(a, weights, 20)
		tried := map[int]bool{}
		next := 0
		for attempt := range 2 {
			want := -1
			for ; next < len(cands); next++ {
				if c := cands[next]; !tried[c] {
					want, next = c, next+1
					break
				}
			}
			require.GreaterOrEqual(t, want, 0)
			got := mustPick(t, h, &r)
			require.Equal(t, peers[want], got, "addr %v attempt %d", a, attempt)
			tried[want] = true
			require.NoError(t, h.Done(got, Outcome{Failed: attempt == 0}))
		}
	}
	// A /24 shares a peer: only three bytes count.
	r.Reset()
	r.SetClientAddr(netip.MustParseAddr("10.1.2.3"))
	a := mustPick(t, h, &r)
	require.NoError(t, h.Done(a, Outcome{}))
	r.Reset()
	r.SetClientAddr(netip.MustParseAddr("10.1.2.200"))
	assert.Equal(t, a, mustPick(t, h, &r))
}

// ipHashPeer is ngx_http_upstream_get_ip_hash_peer: the hash goes on from
// where the last iteration left it.
func (m *ngxModel) ipHashPeer(q *ngxHashReq) func([]*ngxPeer, int64) *ngxPeer {
	return func(peers []*ngxPeer, now int64) *ngxPeer {
		var total int64
		for _, p := range peers {
			total += p.w
		}
		if !q.begun {
			q.hash, q.begun = 89, true
		}
		if q.tries > 20 || total == 0 {
			return m.getPeer(peers, now)
		}
		for {
			for _, b := range q.addr {
				q.hash = (q.hash*113 + uint64(b)) % 6271
			}
			w := int64(q.hash % uint64(total))
			k := 0
			for w >= peers[k].w {
				w -= peers[k].w
				k++
			}
			if p := peers[k]; !m.tried[p] && !p.down && !ngxFailed(p, now) {
				return ngxTook(p, now)
			}
			if q.tries++; q.tries > 20 {
				return m.getPeer(peers, now)
			}
		}
	}
}
