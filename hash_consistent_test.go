package balancer

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
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

var _ = declareTraits("ConsistentHash", fuzzTrait{zeroWeight: zwAny, ringMax: MaxRingWeight})

// refRing is ketama as the reference states it (a derivation like those in
// hash_test.go, sharing nothing with the code under test): for each server
// text, weight·160 points crc32(host ‖ "\0" ‖ port ‖ le32(prev)), sorted,
// equal hashes dropped after the first; a key's point is the first at or
// after crc32(key), wrapping.
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

// TestConsistentHash_derivedRing checks every pick against the reference
// ring, for server texts with and without ports, unix paths and weights,
// and a retry after a failure walking on to the next point of another
// server (as nginx's loop, one point at a time).
func TestConsistentHash_derivedRing(t *testing.T) {
	texts := []string{"10.0.0.1", "10.0.0.2:8080", "backend.example:80", "[2001:db8::1]:443", "cache-5"}
	weights := []int{1, 3, 2, 1, 2}
	peers := make([]*Peer, len(texts))
	for i, text := range texts {
		peers[i] = NewPeer(fmt.Sprintf("10.9.9.%d:80", i), Weight(weights[i]), HashText(text), MaxFails(0))
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
		NewPeer("10.0.0.1:80", HashText("svc")),
		NewPeer("10.0.0.2:80", HashText("svc")),
		NewPeer("10.0.0.3:80", HashText("other")),
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
	c, err := NewConsistentHash(peers, clk.opt())
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

// The bounded-load workload: 10 peers of weight 1, 10,000 keys drawn from
// Zipf (s = 1.1) and 200 attempts held in flight, one replaced at a time,
// with every choice from a seeded source.
const (
	blPeers    = 10
	blKeys     = 10000
	blInFlight = 200
	blSteps    = 20000
	blFactor   = 1.25
)

func blKey(k uint64) string { return "key-" + strconv.FormatUint(k, 10) }

// blPick picks for key and fails the test on error.
func blPick(t *testing.T, c *ConsistentHash, key string) *Peer {
	t.Helper()
	var r Request
	r.SetKey(key)
	p, err := c.Pick(&r)
	require.NoError(t, err)
	return p
}

// blChurn holds blInFlight attempts for Zipf keys on c, replacing one at
// random at each step.
type blChurn struct {
	c    *ConsistentHash
	held []*Peer
	rng  *rand.Rand
	zipf *rand.Zipf
}

// blHold fills c with blInFlight attempts for Zipf keys.
func blHold(t *testing.T, c *ConsistentHash) *blChurn {
	rng := rand.New(rand.NewPCG(42, 43))
	ch := &blChurn{c: c, rng: rng, zipf: rand.NewZipf(rng, 1.1, 1, blKeys-1), held: make([]*Peer, blInFlight)}
	for i := range ch.held {
		ch.held[i] = blPick(t, c, blKey(ch.zipf.Uint64()))
	}
	return ch
}

// step ends one held attempt at random and returns its slot and the key
// of the next one, for the caller to pick.
func (ch *blChurn) step(t *testing.T) (int, string) {
	j := ch.rng.IntN(blInFlight)
	require.NoError(t, ch.c.Done(ch.held[j], Outcome{}))
	return j, blKey(ch.zipf.Uint64())
}

func (ch *blChurn) run(t *testing.T, n int) {
	for range n {
		j, key := ch.step(t)
		ch.held[j] = blPick(t, ch.c, key)
	}
}

// TestConsistentHash_boundedLoad runs the churn with and without the bound.
// With c = 1.25 each pick must land on a peer that held fewer than
// ⌈c·(T+1)/n⌉ attempts, T those in flight before it (199 in the churn), so
// no peer ever holds more than ⌈1.25·200/10⌉ = 25, 1.25 times the mean of
// 200/10 = 20. Without the bound the hottest key alone has probability
// 1/H, H = Σ_{k=1}^{10000} k^-1.1 ≈ 6.6, about 30 of the 200 attempts, so
// its peer passes 25: the bound is what keeps the busiest peer down.
func TestConsistentHash_boundedLoad(t *testing.T) {
	h := 0.0
	for k := 1; k <= blKeys; k++ {
		h += math.Pow(float64(k), -1.1)
	}
	hot := blInFlight / h
	require.Greater(t, hot, 25.0, "the workload's hottest key must pass the bound")
	mean := float64(blInFlight) / blPeers

	for _, bounded := range []bool{false, true} {
		var opts []Option
		if bounded {
			opts = append(opts, WithBoundedLoad(blFactor))
		}
		c, err := NewConsistentHash(addrPeers(blPeers, 1), opts...)
		require.NoError(t, err)
		ch := blHold(t, c)
		busiest := 0
		for range blSteps {
			j, key := ch.step(t)
			before := map[*Peer]int64{}
			for _, p := range c.Peers() {
				before[p] = p.inFlight()
			}
			p := blPick(t, c, key)
			if bounded {
				limit := int64(math.Ceil(blFactor * float64(blInFlight) / blPeers))
				require.Less(t, before[p], limit, "a peer at its bound took an attempt")
			}
			ch.held[j] = p
			for _, q := range c.Peers() {
				busiest = max(busiest, q.InFlight())
			}
		}
		ratio := float64(busiest) / mean
		t.Logf("bounded=%v: busiest peer held %d in flight, %.2f× the mean %.0f", bounded, busiest, ratio, mean)
		if bounded {
			assert.LessOrEqual(t, ratio, blFactor)
		} else {
			assert.Greater(t, ratio, blFactor)
		}
	}
}

// TestConsistentHash_keyMovement adds an 11th peer to 10 and counts the
// keys of blKeys whose peer changes.
//
// Without a bound: only keys whose point now belongs to the new peer move,
// and they move to it. Its 160 points among 1760 take a share of the ring
// distributed as Beta(160, 1600) (the arcs ending at random points): mean
// 1/11, standard deviation sqrt(160·1600/(1760²·1761)) ≈ 0.00685; sampling
// 10,000 keys adds sqrt(p(1−p)/10000) ≈ 0.00287. So the fraction moved
// must lie within 4 standard deviations, sqrt(0.00685² + 0.00287²)·4 ≈
// 0.0297, of 1/11.
//
// With the bound and 200 Zipf attempts held: a key's peer is its nginx
// peer unless that one is full and the key was diverted along the ring, so
// a key can move only if its nginx peer moved or it was diverted before or
// after the change; checked key by key. With nothing in flight the bound
// diverts no key at all.
func TestConsistentHash_keyMovement(t *testing.T) {
	assign := func(c *ConsistentHash) []*Peer {
		out := make([]*Peer, blKeys)
		for k := range out {
			p := blPick(t, c, blKey(uint64(k)))
			require.NoError(t, c.Done(p, Outcome{}))
			out[k] = p
		}
		return out
	}
	peers := addrPeers(blPeers+1, 1)
	plain, err := NewConsistentHash(peers[:blPeers])
	require.NoError(t, err)
	plain10 := assign(plain)
	require.NoError(t, plain.Add(peers[blPeers]))
	plain11 := assign(plain)
	moved := 0
	for k := range plain10 {
		if plain10[k] != plain11[k] {
			moved++
			require.Equal(t, peers[blPeers], plain11[k], "a key moved to an old peer")
		}
	}
	frac := float64(moved) / blKeys
	sd := math.Hypot(math.Sqrt(160.0*1600/(1760.0*1760*1761)), math.Sqrt((1.0/11)*(10.0/11)/blKeys))
	t.Logf("unbounded: %.4f of keys moved (1/11 = %.4f, tolerance ±%.4f)", frac, 1.0/11, 4*sd)
	assert.InDelta(t, 1.0/11, frac, 4*sd)

	bpeers := addrPeers(blPeers+1, 1)
	b, err := NewConsistentHash(bpeers[:blPeers], WithBoundedLoad(blFactor))
	require.NoError(t, err)
	idle := assign(b)
	for k := range idle {
		require.Equal(t, plain10[k].Addr(), idle[k].Addr(), "the bound diverted key %d with nothing in flight", k)
	}
	// Probe as the churn picks, with one attempt fewer in flight: the
	// bound a pick meets is then ⌈1.25·200/n⌉.
	ch := blHold(t, b)
	ch.run(t, blSteps)
	probe := func() []*Peer {
		j, _ := ch.step(t)
		out := assign(b)
		ch.held[j] = blPick(t, b, blKey(0))
		return out
	}
	b10 := probe()
	ch.run(t, blSteps)
	again, same := probe(), 0
	for k := range b10 {
		if again[k] == b10[k] {
			same++
		}
	}
	t.Logf("bounded, 200 in flight, no peer change, after the churn: %.4f of keys on another peer", 1-float64(same)/blKeys)
	require.NoError(t, b.Add(bpeers[blPeers]))
	b11now := probe()
	ch.run(t, blSteps) // every held attempt replaced, with high probability
	b11 := probe()
	for _, after := range []struct {
		name string
		b11  []*Peer
	}{{"at once", b11now}, {"after the churn", b11}} {
		bmoved, div10, div11 := 0, 0, 0
		for k := range b10 {
			d10 := b10[k].Addr() != plain10[k].Addr()
			d11 := after.b11[k].Addr() != plain11[k].Addr()
			if d10 {
				div10++
			}
			if d11 {
				div11++
			}
			if b10[k] != after.b11[k] {
				bmoved++
				require.True(t, plain10[k] != plain11[k] || d10 || d11, "key %d moved for no reason", k)
			}
		}
		t.Logf("bounded, 200 in flight, %s: %.4f of keys moved; diverted by the bound: %.4f with 10 peers, %.4f with 11",
			after.name, float64(bmoved)/blKeys, float64(div10)/blKeys, float64(div11)/blKeys)
	}
}

// TestConsistentHash_boundedTotalAcrossChanges is the reproduction of a
// bounded ConsistentHash's in-flight total going wrong across a list
// change: 40 attempts in flight on 4 peers, then a change that takes the
// busiest peer out (Remove, an Update without it), marks it down, reweighs
// it, or removes it and adds it back before or after its reports. The
// total the bound uses must stay the sum of the held peers' in-flight
// counts, counted here peer by peer, through the change and every report,
// and end at 0. Then the bound must hold against that count, and divert
// no key whose own peer is below it: each pick of a new key lands on its
// unbounded peer (from a ConsistentHash without the bound over the same
// peers) whenever that peer holds fewer than ⌈c·(T+1)·w/L⌉ attempts, T the
// attempts in flight, L the weight of the peers not down.
func TestConsistentHash_boundedTotalAcrossChanges(t *testing.T) {
	const factor = 1.25
	tests := []struct {
		name   string
		change func(c *ConsistentHash, victim *Peer) error
		after  func(c *ConsistentHash, victim *Peer) error // once every report is in
	}{
		{"Remove", func(c *ConsistentHash, v *Peer) error { return c.Remove(v) }, nil},
		{"Update without it", func(c *ConsistentHash, v *Peer) error {
			var snap []*Peer
			for _, q := range c.Peers() {
				if q != v {
					snap = append(snap, NewPeer(q.Addr()))
				}
			}
			return c.Update(snap)
		}, nil},
		{"SetDown", func(c *ConsistentHash, v *Peer) error { return c.SetDown(v, true) }, nil},
		{"SetWeight", func(c *ConsistentHash, v *Peer) error { return c.SetWeight(v, 3) }, nil},
		{"Remove, Add back at once", func(c *ConsistentHash, v *Peer) error {
			if err := c.Remove(v); err != nil {
				return err
			}
			return c.Add(v)
		}, nil},
		{"Remove, Add back after the reports", func(c *ConsistentHash, v *Peer) error { return c.Remove(v) },
			func(c *ConsistentHash, v *Peer) error { return c.Add(v) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			peers := addrPeers(4, 1)
			c, err := NewConsistentHash(peers, WithBoundedLoad(factor))
			require.NoError(t, err)
			sum := func() (t int64) {
				for _, q := range c.Peers() {
					t += q.inFlight()
				}
				return t
			}
			total := func() int64 {
				c.mu.Lock()
				defer c.mu.Unlock()
				return c.inflight
			}
			var held []*Peer
			for k := range 40 {
				held = append(held, blPick(t, c, blKey(uint64(k%7))))
			}
			require.EqualValues(t, 40, sum())
			victim := peers[0]
			for _, q := range peers {
				if q.inFlight() > victim.inFlight() {
					victim = q
				}
			}
			require.Greater(t, victim.inFlight(), int64(0))
			require.NoError(t, tc.change(c, victim))
			assert.Equal(t, sum(), total(), "after the change")
			for k, q := range held {
				require.NoError(t, c.Done(q, Outcome{}))
				require.Equal(t, sum(), total(), "after report %d", k)
			}
			require.Zero(t, sum())
			if tc.after != nil {
				require.NoError(t, tc.after(c, victim))
			}
			require.Zero(t, total(), "every report is in")

			// The bound against the peers' own count, and no diversion
			// of a key whose own peer is below it.
			var snap []*Peer
			var live int64
			for _, q := range c.Peers() {
				opts := []PeerOption{Weight(int(q.weight.Load()))}
				if q.down.Load() {
					opts = append(opts, Down())
				} else {
					live += q.weight.Load()
				}
				snap = append(snap, NewPeer(q.Addr(), opts...))
			}
			plain, err := NewConsistentHash(snap)
			require.NoError(t, err)
			held = held[:0]
			for k := range 60 {
				key := blKey(uint64(k % 5))
				own := blPick(t, plain, key)
				require.NoError(t, plain.Done(own, Outcome{}))
				limit := func(q *Peer) int64 {
					return int64(math.Ceil(factor * float64(sum()+1) * float64(q.weight.Load()) / float64(live)))
				}
				var ownHere *Peer
				for _, q := range c.Peers() {
					if q.Addr() == own.Addr() {
						ownHere = q
					}
				}
				ownBelow := ownHere.inFlight() < limit(ownHere)
				inFlight := map[*Peer]int64{}
				limits := map[*Peer]int64{}
				for _, q := range c.Peers() {
					inFlight[q], limits[q] = q.inFlight(), limit(q)
				}
				got := blPick(t, c, key)
				require.Less(t, inFlight[got], limits[got], "pick %d: a peer at its bound took an attempt", k)
				if ownBelow {
					require.Equal(t, own.Addr(), got.Addr(), "pick %d: key %q diverted from its peer below the bound", k, key)
				}
				held = append(held, got)
			}
			for _, q := range held {
				require.NoError(t, c.Done(q, Outcome{}))
			}
			assert.Zero(t, total())
		})
	}
}

// BenchmarkConsistentHashRing times building the ring (NewConsistentHash,
// which builds it once) and reports its size: points and bytes.
func BenchmarkConsistentHashRing(b *testing.B) {
	for _, n := range hashBenchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var c *ConsistentHash
			for b.Loop() {
				var err error
				if c, err = NewConsistentHash(addrPeers(n, 0)); err != nil {
					b.Fatal(err)
				}
			}
			g := c.ring
			bytes := 8*cap(g.points) + 4*cap(g.start) + 4*cap(g.members) + 4*cap(g.index)
			b.ReportMetric(float64(len(g.points)), "points")
			b.ReportMetric(float64(bytes), "ring-bytes")
		})
	}
}

// chashPeer is ngx_http_upstream_get_chash_peer over ring, whose points
// name peers by index: the smooth step among the eligible untried peers
// whose server text is the point's, else the next point, a try.
func (m *ngxModel) chashPeer(q *ngxHashReq, ring refRing, text map[*ngxPeer]string) func([]*ngxPeer, int64) *ngxPeer {
	return func(peers []*ngxPeer, now int64) *ngxPeer {
		if q.tries > 20 || q.key == "" || len(ring.hash) == 0 {
			return m.getPeer(peers, now)
		}
		if !q.begun {
			h := crc32.ChecksumIEEE([]byte(q.key))
			q.hash = uint64(sort.Search(len(ring.hash), func(k int) bool { return ring.hash[k] >= h }))
			q.begun = true
		}
		for {
			server := text[peers[ring.server[q.hash%uint64(len(ring.hash))]]]
			var best *ngxPeer
			var total int64
			for _, p := range peers {
				if text[p] != server || m.tried[p] || p.down || ngxFailed(p, now) {
					continue
				}
				p.cw += p.ew
				total += p.ew
				if p.ew < p.w {
					p.ew++
				}
				if best == nil || p.cw > best.cw {
					best = p
				}
			}
			if best != nil {
				best.cw -= total
				return ngxTook(best, now)
			}
			q.hash++
			if q.tries++; q.tries > 20 {
				return m.getPeer(peers, now)
			}
		}
	}
}
