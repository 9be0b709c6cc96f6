package balancer

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedLoop runs Prequal over peers of the given weights for picks
// picks, one a tick, each attempt held by its server for exactly inFlight
// ticks (a closed loop of inFlight requests, ending in the order they
// began), and returns each peer's share of the attempts the servers
// ended. The servers are honest and of equal speed: a probe is answered at
// once with the server's true count n, which is this client's attempts on
// it (the only client), and a latency of one tick × (n + 1), the estimate
// of a server that takes a tick a request and grows with its queue; every
// reply's latency is what its attempt was held.
func closedLoop(t *testing.T, weights []int, inFlight, picks int) []float64 {
	t.Helper()
	const tick = time.Millisecond
	clk := newFakeClock()
	peers := makePeers(len(weights), letter, func(i int) []PeerOption { return []PeerOption{Weight(weights[i])} })
	count := map[*Peer]int{}
	pr := proberFunc(func(p *Peer, to ProbeReceiver) {
		n := count[p]
		require.NoError(t, to.Answer(p, ProbeAnswer{InFlight: float64(n), Latency: time.Duration(n+1) * tick}))
	})
	b := newTestPrequal(t, clk, peers, WithProber(pr))
	type held struct {
		p  *Peer
		at time.Time
	}
	var out []held
	served := make([]int, len(peers))
	index := map[*Peer]int{}
	for i, p := range peers {
		index[p] = i
	}
	var total int
	for k := range picks {
		if len(out) == inFlight {
			h := out[0]
			out = out[1:]
			count[h.p]--
			require.NoError(t, b.Done(h.p, Outcome{Latency: clk.now().Sub(h.at)}))
			if k >= picks/2 { // the second half: the loop has settled
				served[index[h.p]]++
				total++
			}
		}
		p := mustPick(t, b, nil)
		count[p]++
		out = append(out, held{p, clk.now()})
		clk.add(tick)
	}
	shares := make([]float64, len(peers))
	for i := range served {
		shares[i] = float64(served[i]) / float64(total)
	}
	return shares
}

// TestPrequal_weights: a configured weight shapes Prequal's choice (see
// prequalWeights). On honest servers of equal speed with weights 1, 1, 2
// and 4, a closed loop of N attempts (closedLoop), the shares are derived
// here, not by the picker: each answer's score is its latency over its
// weight, a tick × (n_i + 1)/w_i, and its count per weight n_i/w_i is what
// the hot rule reads, so the picks keep (n_i + 1)/w_i level, as weighted
// least-requests does. Level at λ: n_i = λ·w_i − 1 and Σn_i = N, so λ =
// (N + 4)/Σw. Each attempt is held N ticks and one starts a tick, so a
// peer's share of the attempts ended is its mean count over N: (λ·w_i −
// 1)/N. With N = 120: λ = 15.5, counts 14.5, 14.5, 30, 61, shares 0.121,
// 0.121, 0.25, 0.508 (nginx's shares by weight alone: 0.125, 0.125, 0.25,
// 0.5). The tolerance, 0.015, is about two attempts in flight off the
// level (1/120 each). With every weight 1, the same loop gives a quarter
// each.
func TestPrequal_weights(t *testing.T) {
	const n = 120
	for _, c := range []struct {
		name    string
		weights []int
	}{
		{"1,1,2,4", []int{1, 1, 2, 4}},
		{"equal", []int{1, 1, 1, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sum int
			for _, w := range c.weights {
				sum += w
			}
			lambda := float64(n+len(c.weights)) / float64(sum)
			got := closedLoop(t, c.weights, n, 20000)
			t.Logf("shares %.4f", got)
			for i, w := range c.weights {
				want := (lambda*float64(w) - 1) / n
				assert.InDelta(t, want, got[i], 0.015, "peer %d of weight %d", i, w)
			}
		})
	}
}

// TestPrequal_weightedScore checks the two places a weight enters, on
// hand-built pools: a cold answer's score is its expected latency over the
// weight, and the hot rule reads the count over the weight.
func TestPrequal_weightedScore(t *testing.T) {
	clk := newFakeClock()
	peers := makePeers(2, letter, func(i int) []PeerOption { return []PeerOption{Weight(1 + 3*i)} }) // a: 1, b: 4
	b := newTestPrequal(t, clk, peers, WithProber(&queueProber{}))
	// b's latency 3 ms over weight 4 is 0.75 ms a unit, below a's 1 ms:
	// b wins, though slower.
	answer(t, b, peers[0], 0, ms(1), 0)
	answer(t, b, peers[1], 0, ms(3), 0)
	assert.Equal(t, "b", mustPick(t, b, nil).Addr())

	// Counts 2 (a) and 6 (b): per weight 2 and 1.5, the quantile of the
	// recent counts per weight is the lower, so b is cold and a hot, and
	// b wins though it holds more.
	peers2 := makePeers(2, letter, func(i int) []PeerOption { return []PeerOption{Weight(1 + 3*i)} })
	c := newTestPrequal(t, clk, peers2, WithProber(&queueProber{}), WithHotQuantile(0.5))
	answer(t, c, peers2[0], 2, ms(1), 0)
	answer(t, c, peers2[1], 6, ms(8), 0)
	require.Len(t, c.pool.e, 2)
	assert.InDelta(t, 1.5, c.pool.ring.quantile(0.5), 1e-12, "the ring holds counts per weight")
	assert.Equal(t, "b", mustPick(t, c, nil).Addr())
}
