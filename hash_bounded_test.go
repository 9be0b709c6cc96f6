package balancer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

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

func blPeerSet(n int) []*Peer {
	ps := make([]*Peer, n)
	for i := range ps {
		ps[i] = NewPeer(fmt.Sprintf("10.0.0.%d:80", i+1))
	}
	return ps
}

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
		c, err := NewConsistentHash(blPeerSet(blPeers), opts...)
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
	peers := blPeerSet(blPeers + 1)
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

	bpeers := blPeerSet(blPeers + 1)
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
