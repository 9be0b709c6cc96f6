package balancer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The hash and random pickers fall back to smooth round robin, where a
// peer of weight 0 can be picked as in SmoothWRR; they promise no cycle.
var _ = declareTraits("Hash", fuzzTrait{zeroWeight: zwAny})
var _ = declareTraits("ConsistentHash", fuzzTrait{zeroWeight: zwAny, ringMax: MaxRingWeight})
var _ = declareTraits("IPHash", fuzzTrait{zeroWeight: zwAny})

// The derivations below restate nginx 1.22.1's hash methods from the
// reference text, independently of the code under test: plain loops, the
// standard library's CRC-32, no helper shared with the code under test.

// refWalk walks w (0 <= w < the total weight) along the weights, as nginx's
// hash methods do: the first peer whose weight exceeds what is left of w.
func refWalk(weights []int, w int) int {
	p := 0
	for w >= weights[p] {
		w -= weights[p]
		p++
	}
	return p
}

// refTotal is the sum of the weights.
func refTotal(weights []int) int {
	total := 0
	for _, w := range weights {
		total += w
	}
	return total
}

// refHashCandidates returns the peer index each of the first n iterations
// of nginx's `hash KEY` lands on: h = crc32([REHASH] KEY), hash += (h >> 16)
// & 0x7fff, then hash % total walked along the weights.
func refHashCandidates(key string, weights []int, n int) []int {
	total := refTotal(weights)
	var out []int
	var hash uint64
	for rehash := 0; rehash < n; rehash++ {
		text := key
		if rehash > 0 {
			text = strconv.Itoa(rehash) + key
		}
		hash += uint64(crc32.ChecksumIEEE([]byte(text))>>16) & 0x7fff
		out = append(out, refWalk(weights, int(hash%uint64(total))))
	}
	return out
}

// refIPCandidates is the same for ip_hash: hash = 89, then per iteration
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

// refRing is ketama as the reference states it: for each server text,
// weight·160 points crc32(host ‖ "\0" ‖ port ‖ le32(prev)), sorted, equal
// hashes dropped after the first; a key's point is the first at or after
// crc32(key), wrapping.
type refRing struct {
	hash   []uint32
	server []int
}

func newRefRing(texts []string, weights []int) refRing {
	type pt struct {
		h uint32
		s int
	}
	var pts []pt
	for i, text := range texts {
		host, port := text, ""
		if k := len(text) - 1; k >= 0 {
			j := k
			for j >= 0 && text[j] >= '0' && text[j] <= '9' {
				j--
			}
			if j >= 0 && text[j] == ':' {
				host, port = text[:j], text[j+1:]
			}
		}
		var prev uint32
		for range weights[i] * 160 {
			var le [4]byte
			binary.LittleEndian.PutUint32(le[:], prev)
			h := crc32.ChecksumIEEE([]byte(host + "\x00" + port + string(le[:])))
			pts = append(pts, pt{h, i})
			prev = h
		}
	}
	sort.SliceStable(pts, func(a, b int) bool { return pts[a].h < pts[b].h })
	var r refRing
	for k, p := range pts {
		if k > 0 && p.h == pts[k-1].h {
			continue
		}
		r.hash = append(r.hash, p.h)
		r.server = append(r.server, p.s)
	}
	return r
}

// at returns the server of the point the walk for key reaches after skip
// points.
func (r refRing) at(key string, skip int) int {
	h := crc32.ChecksumIEEE([]byte(key))
	i := sort.Search(len(r.hash), func(k int) bool { return r.hash[k] >= h })
	return r.server[(i+skip)%len(r.hash)]
}

// hkPeers returns peers named p0, p1, ... with the given weights.
func hkPeers(weights ...int) []*Peer {
	ps := make([]*Peer, len(weights))
	for i, w := range weights {
		ps[i] = NewPeer("p"+strconv.Itoa(i), Weight(w))
	}
	return ps
}

func hkClock() Option { return WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) }) }

// TestHash_derivedSequence checks Hash against the derivation for many
// keys, with some peers down and, per request, the first candidates failing
// so that the retries walk the key's sequence on.
func TestHash_derivedSequence(t *testing.T) {
	tests := []struct {
		name    string
		weights []int
		down    []int
		fail    int // attempts of each request reported failed before the success
	}{
		{"equal", []int{1, 1, 1, 1}, nil, 0},
		{"weighted", []int{5, 1, 3, 10, 2}, nil, 0},
		{"down peers", []int{5, 1, 3, 10, 2}, []int{3, 0}, 0},
		{"retries continue the sequence", []int{2, 2, 3, 1, 4, 1}, []int{2}, 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := hkPeers(tc.weights...)
			for _, i := range tc.down {
				Down()(peers[i])
			}
			for _, p := range peers {
				MaxFails(0)(p) // failures here must not take peers out
			}
			h, err := NewHash(peers, hkClock())
			require.NoError(t, err)
			var r Request
			for k := range 300 {
				key := "key-" + strconv.Itoa(k)
				// The derivation first: the peer of each attempt, the
				// first candidate not tried and not down, the request's
				// failed iterations (tries) counted across attempts.
				cands := refHashCandidates(key, tc.weights, 80)
				tried := map[int]bool{}
				var want []int
				next, tries := 0, 0
				for range tc.fail + 1 {
					for ; tries <= 20; next++ {
						if c := cands[next]; !tried[c] && !slices.Contains(tc.down, c) {
							want = append(want, c)
							tried[c] = true
							next++
							break
						}
						tries++
					}
				}
				if tries > 20 {
					continue // round robin: TestHash_twentyTries
				}
				r.Reset()
				r.SetKey(key)
				for attempt, w := range want {
					got, err := h.Pick(&r)
					require.NoError(t, err)
					require.Equal(t, peers[w], got, "key %q attempt %d", key, attempt)
					require.NoError(t, h.Done(got, Outcome{Failed: attempt < tc.fail}))
				}
			}
		})
	}
}

// TestHash_twentyTries finds, by the derivation, a key whose first 21
// candidates all land on a down peer: nginx then hands the request to
// smooth round robin, which with a and b at weight 1 and current weights 0
// picks a, the first on the tie, whatever the key's later candidates say.
// A retry stays in round robin: b.
func TestHash_twentyTries(t *testing.T) {
	weights := []int{1, 1, 400}
	key := ""
	for k := 0; k < 10000 && key == ""; k++ {
		cands := refHashCandidates("k"+strconv.Itoa(k), weights, 40)
		if !slices.ContainsFunc(cands[:21], func(c int) bool { return c != 2 }) &&
			slices.Index(cands, 1) >= 0 && slices.IndexFunc(cands, func(c int) bool { return c != 2 }) == slices.Index(cands, 1) {
			key = "k" + strconv.Itoa(k) // hashing on would give b
		}
	}
	require.NotEmpty(t, key, "no key in the search has 21 down candidates then b")
	peers := hkPeers(weights...)
	Down()(peers[2])
	h, err := NewHash(peers, hkClock())
	require.NoError(t, err)
	var r Request
	r.SetKey(key)
	p := mustPick(t, h, &r)
	assert.Equal(t, peers[0], p, "round robin after 20 tries")
	assert.EqualValues(t, 21, r.hs.tries)
	require.NoError(t, h.Done(p, Outcome{Failed: true}))
	assert.Equal(t, peers[1], mustPick(t, h, &r), "the retry stays in round robin")
}

// TestHashPickers_roundRobinWithoutKey: an empty key or a nil Request is
// nginx's empty-key case, smooth round robin: weights {2, 1} give a b a
// (a 2 > b 1, a gives back 3: -1; then b 2 > a 1; then a 3). A single peer
// is always taken, even failing (nginx's single-server rule).
func TestHashPickers_roundRobinWithoutKey(t *testing.T) {
	for _, mk := range []struct {
		name string
		new  func([]*Peer, ...Option) (Balancer, error)
	}{
		{"Hash", as(NewHash)},
		{"ConsistentHash", as(NewConsistentHash)},
	} {
		t.Run(mk.name, func(t *testing.T) {
			for _, nilReq := range []bool{true, false} {
				peers := hkPeers(2, 1)
				p, err := mk.new(peers, hkClock())
				require.NoError(t, err)
				var got []string
				for range 6 {
					var r *Request
					if !nilReq {
						r = &Request{}
					}
					peer := mustPick(t, p, r)
					got = append(got, peer.Addr())
					require.NoError(t, p.Done(peer, Outcome{}))
				}
				assert.Equal(t, []string{"p0", "p1", "p0", "p0", "p1", "p0"}, got, "nil request: %v", nilReq)
			}
		})
	}
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
	peers := hkPeers(weights...)
	for _, p := range peers {
		MaxFails(0)(p)
	}
	h, err := NewIPHash(peers, hkClock())
	require.NoError(t, err)
	var r Request
	for _, a := range addrs {
		r.Reset()
		r.SetAddr(a)
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
	r.SetAddr(netip.MustParseAddr("10.1.2.3"))
	a := mustPick(t, h, &r)
	require.NoError(t, h.Done(a, Outcome{}))
	r.Reset()
	r.SetAddr(netip.MustParseAddr("10.1.2.200"))
	assert.Equal(t, a, mustPick(t, h, &r))
}

// TestConsistentHash_derivedRing checks every pick against the reference
// ring, for server texts with and without ports, unix paths and weights,
// and a retry after a failure walking on to the next point of another
// server (as nginx's loop, one point at a time).
func TestConsistentHash_derivedRing(t *testing.T) {
	texts := []string{"10.0.0.1", "10.0.0.2:8080", "backend.example:80", "[2001:db8::1]:443", "cache-5"}
	weights := []int{1, 3, 2, 1, 2}
	peers := make([]*Peer, len(texts))
	for i, text := range texts {
		peers[i] = NewPeer(fmt.Sprintf("10.9.9.%d:80", i), Weight(weights[i]), HashKey(text), MaxFails(0))
	}
	c, err := NewConsistentHash(peers, hkClock())
	require.NoError(t, err)
	ring := newRefRing(texts, weights)
	require.Len(t, c.ring.points, len(ring.hash))
	var r Request
	for k := range 2000 {
		key := "user:" + strconv.Itoa(k)
		r.Reset()
		r.SetKey(key)
		first := mustPick(t, c, &r)
		require.Equal(t, peers[ring.at(key, 0)], first, "key %q", key)
		require.NoError(t, c.Done(first, Outcome{Failed: true}))
		skip := 1
		for ring.at(key, skip) == ring.at(key, 0) {
			skip++
		}
		second := mustPick(t, c, &r)
		require.Equal(t, peers[ring.at(key, skip)], second, "retry of key %q", key)
		require.NoError(t, c.Done(second, Outcome{}))
	}
}

// TestConsistentHash_sharedText: peers sharing a server text (one name
// resolving to several addresses) share its points, and nginx's smooth
// step among them alternates a key between them, weights 1 and 1.
func TestConsistentHash_sharedText(t *testing.T) {
	peers := []*Peer{
		NewPeer("10.0.0.1:80", HashKey("svc")),
		NewPeer("10.0.0.2:80", HashKey("svc")),
		NewPeer("10.0.0.3:80", HashKey("other")),
	}
	c, err := NewConsistentHash(peers, hkClock())
	require.NoError(t, err)
	ring := newRefRing([]string{"svc", "other"}, []int{1, 1})
	key := ""
	for k := 0; key == ""; k++ {
		if ring.at("k"+strconv.Itoa(k), 0) == 0 {
			key = "k" + strconv.Itoa(k)
		}
	}
	var got []string
	for range 4 {
		var r Request
		r.SetKey(key)
		p := mustPick(t, c, &r)
		got = append(got, p.Addr())
		require.NoError(t, c.Done(p, Outcome{}))
	}
	assert.Equal(t, []string{"10.0.0.1:80", "10.0.0.2:80", "10.0.0.1:80", "10.0.0.2:80"}, got)
}

// TestHashPickers_badInput: every bad value is an error wrapping the
// sentinel and naming the value, never a panic.
func TestHashPickers_badInput(t *testing.T) {
	ctors := map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
	}
	tests := []struct {
		name   string
		picker string // "" for all
		peers  func() []*Peer
		opts   []Option
		want   error
		names  string
	}{
		{"backup", "", func() []*Peer { return []*Peer{NewPeer("a"), NewPeer("spare", Backup())} }, nil, ErrInvalidConfig, `"spare"`},
		{"empty hash key", "", func() []*Peer { return []*Peer{NewPeer("a", HashKey(""))} }, nil, ErrInvalidConfig, `"a"`},
		{"bound below 1", "ConsistentHash", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(0.5)}, ErrInvalidConfig, "0.5"},
		{"bound NaN", "ConsistentHash", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(math.NaN())}, ErrInvalidConfig, "NaN"},
		{"bound infinite", "ConsistentHash", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(math.Inf(1))}, ErrInvalidConfig, "+Inf"},
		{"ring too large", "ConsistentHash", func() []*Peer { return hkPeers(MaxRingWeight, 1) }, nil, ErrInvalidConfig, strconv.Itoa(MaxRingWeight + 1)},
		{"bound on Hash", "Hash", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"bound on RandomTwo", "RandomTwo", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"bound on LeastConn", "LeastConn", func() []*Peer { return hkPeers(1) }, []Option{WithBoundedLoad(2)}, ErrInvalidConfig, "WithBoundedLoad"},
		{"rand on Hash", "Hash", func() []*Peer { return hkPeers(1) }, []Option{WithRand(hkSource(nil))}, ErrInvalidConfig, "WithRand"},
	}
	for _, tc := range tests {
		for name, mk := range ctors {
			if tc.picker == "LeastConn" && name == "Hash" {
				mk = as(NewLeastConn)
			} else if tc.picker != "" && tc.picker != name {
				continue
			}
			t.Run(tc.name+"/"+name, func(t *testing.T) {
				p, err := mk(tc.peers(), tc.opts...)
				require.ErrorIs(t, err, tc.want)
				assert.Nil(t, p)
				assert.Contains(t, err.Error(), tc.names)
			})
		}
	}
	// Add refuses a backup too, and ConsistentHash a ring past the limit.
	h, err := NewHash(hkPeers(1))
	require.NoError(t, err)
	assert.ErrorIs(t, h.Add(NewPeer("b", Backup())), ErrInvalidConfig)
	c, err := NewConsistentHash(hkPeers(MaxRingWeight - 1))
	require.NoError(t, err)
	assert.ErrorIs(t, c.Add(NewPeer("big", Weight(2))), ErrInvalidConfig)
	assert.ErrorIs(t, c.SetWeight(c.Peers()[0], MaxRingWeight+1), ErrInvalidConfig)
	rt, err := NewRandomTwo(hkPeers(1))
	require.NoError(t, err)
	assert.ErrorIs(t, rt.Add(NewPeer("b", Backup())), ErrInvalidConfig)
}

// TestHashPickers_weightZero: a peer of weight 0 is never hashed or drawn
// to; with every weight 0 the pickers go to round robin, which picks the
// first eligible peer.
func TestHashPickers_weightZero(t *testing.T) {
	for name, mk := range map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
	} {
		t.Run(name, func(t *testing.T) {
			peers := hkPeers(0, 1, 1)
			p, err := mk(peers, hkClock())
			require.NoError(t, err)
			for k := range 200 {
				var r Request
				r.SetKey(strconv.Itoa(k))
				r.SetAddr(netip.AddrFrom4([4]byte{10, byte(k), byte(k), 1}))
				got := mustPick(t, p, &r)
				require.NotEqual(t, peers[0], got)
				require.NoError(t, p.Done(got, Outcome{}))
			}
			zero, err := mk(hkPeers(0, 0), hkClock())
			require.NoError(t, err)
			var r Request
			r.SetKey("x")
			assert.Equal(t, "p0", mustPick(t, zero, &r).Addr())
		})
	}
}

// TestHashPickers_concurrent runs picks, reports (some failures) and peer
// changes at once; under -race it checks the locking, and at the end every
// in-flight count is back to 0.
func TestHashPickers_concurrent(t *testing.T) {
	for name, mk := range map[string]func([]*Peer, ...Option) (Balancer, error){
		"Hash": as(NewHash), "ConsistentHash": as(NewConsistentHash), "IPHash": as(NewIPHash),
		"Random": as(NewRandom), "RandomTwo": as(NewRandomTwo),
		"BoundedConsistentHash": func(ps []*Peer, o ...Option) (Balancer, error) {
			return NewConsistentHash(ps, append(o, WithBoundedLoad(1.25))...)
		},
	} {
		t.Run(name, func(t *testing.T) {
			peers := hkPeers(1, 2, 3, 1, 2, 3, 1, 2)
			for _, p := range peers {
				FailTimeout(time.Millisecond)(p)
			}
			p, err := mk(peers)
			require.NoError(t, err)
			changer := p.(interface {
				SetDown(*Peer, bool) error
			})
			var wg sync.WaitGroup
			for g := range 4 {
				wg.Go(func() {
					var r Request
					for k := range 2000 {
						r.Reset()
						r.SetKey("k" + strconv.Itoa(k%97))
						r.SetAddr(netip.AddrFrom4([4]byte{10, byte(g), byte(k), 1}))
						for range 3 {
							peer, err := p.Pick(&r)
							if err != nil {
								if !errors.Is(err, ErrNoLivePeer) && !errors.Is(err, ErrTriesExhausted) {
									t.Error(err)
								}
								break
							}
							failed := k%11 == 0
							if err := p.Done(peer, Outcome{Failed: failed}); err != nil {
								t.Error(err)
							}
							if !failed {
								break
							}
						}
					}
				})
			}
			wg.Go(func() {
				for k := range 200 {
					_ = changer.SetDown(peers[k%len(peers)], k%2 == 0)
				}
			})
			wg.Wait()
			for _, q := range peers {
				assert.Zero(t, q.InFlight(), q.Addr())
			}
		})
	}
}

// TestCRC32Decimal checks the REHASH digits' CRC against the standard
// library's over the formatted text.
func TestCRC32Decimal(t *testing.T) {
	for _, v := range []uint64{1, 9, 10, 19, 20, 99, 100, 12345, math.MaxUint64} {
		assert.Equal(t, crc32.ChecksumIEEE([]byte(strconv.FormatUint(v, 10))), crc32Decimal(v), "%d", v)
	}
}

// TestConsistentHash_findIndexed checks the ring's indexed search against a
// plain search for the first point at or above a hash (nginx's
// ngx_http_upstream_find_chash_point), on rings of several sizes, at every
// point's hash, one either side of it, and at random hashes.
func TestConsistentHash_findIndexed(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, n := range []int{1, 2, 3, 10, 100, 1000} {
		peers := make([]*Peer, n)
		for i := range peers {
			peers[i] = NewPeer(fmt.Sprintf("10.1.%d.%d:80", i/256, i%256), Weight(1+i%3))
		}
		c, err := NewConsistentHash(peers)
		require.NoError(t, err)
		g := c.ring
		plain := func(h uint32) int {
			return sort.Search(len(g.points), func(k int) bool { return g.points[k]>>32 >= uint64(h) })
		}
		hashes := []uint32{0, 1, math.MaxUint32, math.MaxUint32 - 1}
		for _, p := range g.points {
			h := uint32(p >> 32)
			hashes = append(hashes, h, h-1, h+1)
		}
		for range 10000 {
			hashes = append(hashes, rng.Uint32())
		}
		for _, h := range hashes {
			require.Equal(t, plain(h), g.find(h), "%d peers: hash %#x", n, h)
		}
	}
}

// TestConsistentHash_effectiveWeightRecovers: a peer whose effective weight
// a failure lowered recovers it one step per pick of its point, as nginx's
// smooth step does (effective_weight++ while below weight), even with no
// failure left on record, where a first attempt would otherwise skip the
// lock: weight 4 and max_fails 2, so each failure costs 4/2 = 2.
func TestConsistentHash_effectiveWeightRecovers(t *testing.T) {
	clk := newFakeClock()
	peers := make([]*Peer, 3)
	for i := range peers {
		peers[i] = NewPeer(fmt.Sprintf("10.2.0.%d:80", i), Weight(4), MaxFails(2), FailTimeout(10*time.Second))
	}
	c, err := NewConsistentHash(peers, WithClock(clk.now))
	require.NoError(t, err)
	var r Request
	pick := func() *Peer {
		r.Reset()
		r.SetKey("user:42")
		return mustPick(t, c, &r)
	}
	a := pick()
	require.NoError(t, c.Done(a, Outcome{Failed: true}))
	assert.Equal(t, 2, a.State().EffectiveWeight, "after one failure")
	require.Equal(t, a, pick()) // fails 1 < max_fails: still eligible; its step raises ew to 3
	require.NoError(t, c.Done(a, Outcome{Failed: true}))
	assert.Equal(t, 1, a.State().EffectiveWeight, "3 − 2 after the second failure")
	b := pick()
	require.NotEqual(t, a, b, "inside its fail window")
	require.NoError(t, c.Done(b, Outcome{}))

	clk.add(11 * time.Second)
	require.Equal(t, a, pick(), "the probe after the window") // ew 1 → 2
	require.NoError(t, c.Done(a, Outcome{}))                  // answers the probe: fails = 0
	require.Equal(t, 0, a.State().Fails)
	for _, want := range []int{2, 3, 4, 4, 4} {
		assert.Equal(t, want, a.State().EffectiveWeight)
		require.Equal(t, a, pick())
		require.NoError(t, c.Done(a, Outcome{}))
	}
}

// TestConsistentHash_maxConnsUnderRetries races lock-free first attempts
// (which take a slot by compare-and-swap) with retries, which walk the ring
// under the lock: no peer may ever hold more than its max_conns.
func TestConsistentHash_maxConnsUnderRetries(t *testing.T) {
	peers := []*Peer{NewPeer("10.0.0.1", MaxConns(1)), NewPeer("10.0.0.2", MaxConns(1))}
	c, err := NewConsistentHash(peers)
	require.NoError(t, err)
	var over atomic.Int64
	var held [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var r Request
			for k := range 20000 {
				r.Reset()
				r.SetKey(fmt.Sprint(g, "-", k))
				p, err := c.Pick(&r)
				if err != nil {
					continue
				}
				if g%2 == 1 { // a retry: the second attempt walks under the lock
					_ = c.Done(p, Outcome{})
					if p, err = c.Pick(&r); err != nil {
						continue
					}
				}
				i := slices.Index(peers, p)
				if held[i].Add(1) > 1 {
					over.Add(1)
				}
				held[i].Add(-1)
				_ = c.Done(p, Outcome{})
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, over.Load(), "attempts past max_conns=1")
}
