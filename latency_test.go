package balancer

import (
	"container/heap"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The regression behind Outcome.Abandoned: clients with a 30 ms deadline in
// front of two fast backends and one that stalls for 2 s. Every attempt on
// the stalled backend ends when the client gives up, at 30 ms, without a
// reply; the client then retries on another peer. Reported as a success
// with the latency so far (the old reporting), 30 ms looks like a slow but
// usable peer; reported as Abandoned, it is a lower bound on a reply still
// to come, and the latency-aware pickers must keep the stalled backend
// nearly idle.

const (
	abandonDeadline = 30 * time.Millisecond
	abandonStall    = 2 * time.Second
	abandonRequests = 2000
)

// abandonEvent is one event of the loop: an arrival (peer nil) or the end
// of an attempt on peer.
type abandonEvent struct {
	at   time.Time
	seq  int
	req  *Request
	peer *Peer
	o    Outcome
}

type abandonQueue []*abandonEvent

func (q abandonQueue) Len() int { return len(q) }
func (q abandonQueue) Less(i, j int) bool {
	if !q[i].at.Equal(q[j].at) {
		return q[i].at.Before(q[j].at)
	}
	return q[i].seq < q[j].seq
}
func (q abandonQueue) Swap(i, j int)       { q[i], q[j] = q[j], q[i] }
func (q *abandonQueue) Push(x any)         { *q = append(*q, x.(*abandonEvent)) }
func (q *abandonQueue) Pop() (x any)       { x, *q = (*q)[len(*q)-1], (*q)[:len(*q)-1]; return x }
func (q *abandonQueue) at(e *abandonEvent) { heap.Push(q, e) }

// abandonResult is what one run of the loop measured.
type abandonResult struct {
	attempts map[string]int
	total    int
	failed   int // requests that ran out of peers
	// FastestFirst: the stalled peer's derived weight, the most it had at
	// a pick after the first 10% of picks, and after each of its reports
	// from the third on.
	maxWeight int
	checked   int
	afterDone []int
}

func (r abandonResult) share(addr string) float64 {
	return float64(r.attempts[addr]) / float64(r.total)
}

// runAbandon drives a picker built by newPicker over fast-1, stalled and
// fast-2 on a fake clock. Requests arrive as a Poisson process of 500/s;
// a fast backend replies after 2 ms plus an exponential 3 ms (an attempt
// past the deadline is abandoned like any other); the stalled one never
// replies within the deadline. abandoned is how the client reports an
// attempt it gave up on.
func runAbandon(t *testing.T, newPicker func([]*Peer, ...Option) (Balancer, error), abandoned Outcome) abandonResult {
	t.Helper()
	clk := newFakeClock()
	opts := []Option{clk.opt()}
	if _, err := newPicker(nil, WithRand(rand.NewPCG(1, 1))); err == nil {
		opts = append(opts, WithRand(rand.NewPCG(7, 11)))
	}
	stalled := NewPeer("stalled")
	p, err := newPicker([]*Peer{NewPeer("fast-1"), stalled, NewPeer("fast-2")}, opts...)
	require.NoError(t, err)
	ff, _ := p.(*FastestFirst)

	rng := rand.New(rand.NewPCG(3, 5))
	res := abandonResult{attempts: map[string]int{}}
	var q abandonQueue
	seq := 0
	next := func(at time.Time, e *abandonEvent) {
		seq++
		e.at, e.seq = at, seq
		q.at(e)
	}
	arrival := clk.now()
	for range abandonRequests {
		arrival = arrival.Add(time.Duration(rng.ExpFloat64() * float64(2*time.Millisecond)))
		next(arrival, &abandonEvent{req: &Request{}})
	}
	picks, stalledDone := 0, 0
	attempt := func(r *Request) {
		peer, err := p.Pick(r)
		if err != nil {
			res.failed++
			return
		}
		picks++
		res.attempts[peer.Addr()]++
		res.total++
		if ff != nil && picks > abandonRequests/10 {
			res.maxWeight = max(res.maxWeight, stalled.State().DerivedWeight)
		}
		lat := 2*time.Millisecond + time.Duration(rng.ExpFloat64()*float64(3*time.Millisecond))
		if peer == stalled {
			lat = abandonStall
		}
		if lat >= abandonDeadline {
			o := abandoned
			o.Latency = abandonDeadline
			next(clk.now().Add(abandonDeadline), &abandonEvent{req: r, peer: peer, o: o})
			return
		}
		next(clk.now().Add(lat), &abandonEvent{req: r, peer: peer, o: Outcome{Latency: lat}})
	}
	for steps := 0; q.Len() > 0; steps++ {
		require.Less(t, steps, 100*abandonRequests, "the loop is bounded")
		e := heap.Pop(&q).(*abandonEvent)
		clk.set(e.at)
		if e.peer == nil {
			attempt(e.req)
			continue
		}
		require.NoError(t, p.Done(e.peer, e.o))
		if ff != nil && e.peer == stalled {
			if stalledDone++; stalledDone >= exploreConfirm {
				res.afterDone = append(res.afterDone, stalled.State().DerivedWeight)
			}
		}
		if e.o.Latency >= abandonDeadline {
			attempt(e.req) // the client retries on another peer
		}
	}
	return res
}

// TestAbandoned_stalledPeerStarves runs the loop for both latency-aware
// pickers. Expected values:
//
//   - share: under 2% of all attempts. A picker that ignored latency would
//     give the stalled backend a third of the first attempts and more with
//     the retries; one that took its 30 ms as a reply sees a backend about
//     3x slower than the fast ones' peak estimates (2 ms + an exponential
//     3 ms peaks near 20 ms over a few hundred replies), inside
//     FastestFirst's tolerance and close enough for P2CPeakEWMA to pick it
//     whenever the fast pair has an attempt or two in flight: the contrast
//     sub-tests show that share, several times 2%.
//   - FastestFirst's derived weight: at the floor, 1, after every report on
//     the stalled backend from the third abandoned attempt in a row on
//     (exploreConfirm), where the weight of a peer that is not answering
//     goes; between two of them it may creep up only by law 4's decay
//     toward the fastest estimate m, from at least 37.5m (floorEstimate:
//     tolerance 3 x m x (100/1)^(1/2) x band 1.25) over less than the
//     run's 4.1 s with a decay time of 5 s: e >= m + 36.5m x exp(-4.1/5)
//     = 17.1m, weight 100 x (3m/e)^2 = 3.1; with the fast estimates moving
//     meanwhile, at most 5 of the fast backends' 100.
func TestAbandoned_stalledPeerStarves(t *testing.T) {
	for _, name := range []string{"FastestFirst", "P2CPeakEWMA"} {
		alg, err := AlgorithmNamed(name)
		require.NoError(t, err)
		t.Run(name, func(t *testing.T) {
			res := runAbandon(t, alg.New, Outcome{Abandoned: true})
			t.Logf("attempts %v", res.attempts)
			assert.Less(t, res.share("stalled"), 0.02, "share of the stalled backend: %v", res.attempts)
			assert.Zero(t, res.failed, "requests that found no peer")
			if name == "FastestFirst" {
				require.NotEmpty(t, res.afterDone)
				for i, w := range res.afterDone {
					assert.Equal(t, 1, w, "derived weight after report %d on the stalled backend", i+exploreConfirm)
				}
				assert.LessOrEqual(t, res.maxWeight, 5, "derived weight of the stalled backend")
			}
		})
		// The old reporting, as a contrast: the same attempts reported as
		// successes with the latency so far. This is what the test above
		// guards against.
		t.Run(name+"/reported as success", func(t *testing.T) {
			res := runAbandon(t, alg.New, Outcome{})
			t.Logf("attempts %v", res.attempts)
			assert.Greater(t, res.share("stalled"), 0.05, "share of the stalled backend: %v", res.attempts)
		})
	}
}
