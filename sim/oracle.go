package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
)

// Names of the oracles in reports.
const (
	OracleSED   = "Oracle SED"
	OracleInfo  = "Oracle full-info"
	OracleSplit = "Oracle split"
	OracleProbe = "Oracle probed"
)

// sed is the clairvoyant shortest-expected-delay policy (O1, C3's
// clairvoyant baseline): it sends each attempt to the backend where it would
// finish soonest, reading the true state no client can see. With first-come
// first-served workers the start time of a new job is known exactly (the
// earliest time a worker frees), so the expected delay is that wait plus the
// backend's true current mean service time. Backends inside a fault are
// skipped; ties, as between idle identical backends, are broken at random.
type sed struct{ least }

func newSED(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker {
	return &sed{newLeast(w, peers, src)}
}

// least is what the delay oracles share: the world they read, the peers
// they hand out and the choice of the least expected delay.
type least struct {
	w     *world
	peers []*balancer.Peer
	rng   *rand.Rand
	ties  []int
}

func newLeast(w *world, peers []*balancer.Peer, src rand.Source) least {
	return least{w: w, peers: peers, rng: rand.New(src), ties: make([]int, 0, len(peers))}
}

// pick returns the peer of the backend with the least delay(b), skipping
// backends inside a fault and breaking ties at random.
func (o *least) pick(delay func(b *backendState) float64) (*balancer.Peer, error) {
	now := o.w.now
	best := math.Inf(1)
	o.ties = o.ties[:0]
	for i := range o.w.backends {
		b := &o.w.backends[i]
		if _, p := b.faultAt(now); p > 0 {
			continue
		}
		d := delay(b)
		switch {
		case d < best:
			best = d
			o.ties = append(o.ties[:0], i)
		case d == best:
			o.ties = append(o.ties, i)
		}
	}
	switch len(o.ties) {
	case 0:
		return nil, fmt.Errorf("sim: every backend is failing: %w", balancer.ErrNoLivePeer)
	case 1:
		return o.peers[o.ties[0]], nil
	}
	return o.peers[o.ties[o.rng.IntN(len(o.ties))]], nil
}

// Pick returns the backend with the least expected delay. It is O(n).
func (o *sed) Pick(*balancer.Request) (*balancer.Peer, error) {
	now := o.w.now
	return o.pick(func(b *backendState) float64 { return b.expectedDelay(now) })
}

// Done ignores the outcome: the oracle does not need to learn.
func (o *sed) Done(*balancer.Peer, balancer.Outcome) error { return nil }

// split is O2, the best static split, made clairvoyant: each attempt goes
// to backend i with probability λ_i/Λ from the square-root rule over the
// backends' true current capacities (workers over the current mean service
// time), leaving out the backends inside a fault; the split is redone
// whenever a capacity changes. Random splitting keeps each backend's
// arrivals Poisson, so on steady M/M/1 backends the simulated mean must
// match the analytic T*: the engine's self-test. On backends with unlimited
// workers there is no queue to balance and the best split sends everything
// to the backends with the least mean service time.
//
// T* bounds random splits only: a smooth round robin with fixed weights
// spreads each backend's arrivals more evenly than Poisson and does better.
type split struct {
	w     *world
	peers []*balancer.Peer
	cum   []float64 // cumulative probabilities
	rng   *rand.Rand
	next  int64 // when the split must be redone
}

func newSplit(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker {
	return &split{w: w, peers: peers, cum: make([]float64, len(peers)), rng: rand.New(src), next: math.MinInt64}
}

// Pick draws a backend with the split's probabilities. It is O(n), and
// O(n) more when the split is redone.
func (o *split) Pick(*balancer.Request) (*balancer.Peer, error) {
	if o.w.now >= o.next {
		o.redo()
	}
	total := o.cum[len(o.cum)-1]
	if total == 0 {
		return nil, fmt.Errorf("sim: every backend is failing: %w", balancer.ErrNoLivePeer)
	}
	u := o.rng.Float64() * total
	for i, c := range o.cum {
		if u < c {
			return o.peers[i], nil
		}
	}
	return o.peers[len(o.peers)-1], nil
}

// redo recomputes the split for the current state and notes when that
// state next changes.
func (o *split) redo() {
	now := o.w.now
	bs := o.w.backends
	o.next = math.MaxInt64
	weights := make([]float64, len(bs))
	mus := make([]float64, 0, len(bs))
	live := make([]int, 0, len(bs))
	unlimited := false
	least := math.Inf(1)
	for i := range bs {
		b := &bs[i]
		o.next = min(o.next, b.nextChange(now))
		if _, p := b.faultAt(now); p > 0 {
			continue
		}
		m := b.meanAt(now)
		live = append(live, i)
		least = min(least, m)
		if b.workers == nil {
			unlimited = true
		}
		mus = append(mus, float64(len(b.workers))*float64(time.Second)/m)
	}
	rate := float64(time.Second) / o.w.gap
	switch {
	case len(live) == 0:
	case unlimited:
		// No queueing anywhere it matters: only the fastest are worth it.
		for _, i := range live {
			if bs[i].meanAt(now) <= least*(1+1e-9) {
				weights[i] = float64(o.w.sc.weight(i))
			}
		}
	default:
		if lam, _, err := SqrtSplit(mus, rate); err == nil {
			for k, i := range live {
				weights[i] = lam[k]
			}
		} else {
			// Overloaded: no split is stable; share by capacity.
			for k, i := range live {
				weights[i] = mus[k]
			}
		}
	}
	var acc float64
	for i, v := range weights {
		acc += v
		o.cum[i] = acc
	}
}

// Done ignores the outcome.
func (o *split) Done(*balancer.Peer, balancer.Outcome) error { return nil }

// TStar returns the analytic mean T* of the best static random split of s
// and the pooled lower bound, with ok false unless s is made of M/M/1
// backends (MM1), the only case where they are exact. T* bounds pickers
// that draw each backend independently with fixed probabilities; a smooth
// round robin with fixed weights spreads each backend's arrivals more
// evenly than Poisson and can beat it.
func TStar(s *Scenario) (tstar, pooled float64, ok bool) {
	if !s.MM1() {
		return 0, 0, false
	}
	mus := make([]float64, len(s.Backends))
	for i := range mus {
		mus[i] = s.Capacity(i)
	}
	lambda := s.ArrivalRate()
	_, t, err := SqrtSplit(mus, lambda)
	if err != nil {
		return 0, 0, false
	}
	return t, PooledBound(mus, lambda), true
}

// informed is the full-information oracle: at each pick it reads every
// backend's true requests in flight q (queued or in service, from every
// client, the ones whose client gave up included) and its current mean
// service time m, but nothing of the service times to come, and picks the
// least expected delay of a new job under that knowledge. With c workers
// and exponential service at the current speed the job waits for
// q − c + 1 completions at rate c/m when all workers are busy, so its
// expected delay is
//
//	m × (1 + max(0, q − c + 1) / c)
//
// (m alone with unlimited workers). Backends inside a fault are skipped
// and ties broken at random, as Oracle SED does. Unlike Oracle SED it does
// not know when the busy workers free, nor a redraw of the speed about to
// come: it is the bound of a picker told each backend's load and speed at
// the moment of the pick.
type informed struct{ least }

func newInformed(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker {
	return &informed{newLeast(w, peers, src)}
}

// informedDelay returns the delay informed expects on a backend with q
// requests in flight, c workers (0: unlimited) and mean service time m.
func informedDelay(q, c int, m float64) float64 {
	if c == 0 || q < c {
		return m
	}
	return m * (1 + float64(q-c+1)/float64(c))
}

// Pick returns the backend with the least expected delay. It is O(n) but
// for the attempts timed out in service that a backend still holds.
func (o *informed) Pick(*balancer.Request) (*balancer.Peer, error) {
	now := o.w.now
	return o.pick(func(b *backendState) float64 { return trueDelay(b, now, 0) })
}

// trueDelay is the delay the full-information oracle expects at now on
// backend b, with extra more jobs ahead of the new one than b holds.
func trueDelay(b *backendState, now int64, extra int) float64 {
	if b.far() {
		// Every job sent to it and not ended is ahead of this one;
		// the network both ways comes on top.
		return informedDelay(int(b.queued)+extra, len(b.workers), b.meanAt(now)) + float64(b.up+b.down)
	}
	b.srv.settle(now)
	return informedDelay(int(b.rif)+len(b.srv.late)+extra, len(b.workers), b.meanAt(now))
}

// Done ignores the outcome.
func (o *informed) Done(*balancer.Peer, balancer.Outcome) error { return nil }

// probed is the full-information oracle told only what a client that
// probes with its picks can know, but told it exactly: at each pick it
// takes, among OracleProbes backends drawn at random at this client's
// previous pick, the one of the least expected delay (Oracle full-info's)
// as that backend was then, counting the job the previous pick sent it.
// That is what Prequal would choose were every probe answer exact: its
// probes go out with a pick and their answers serve the next ones, one of
// the client's own intervals between requests later, while the other
// clients go on sending. Its distance to Oracle full-info is the price
// of that age alone; a probing picker's distance to it, the price of its
// rule and of the servers' estimates. Before its first pick, and when
// every backend drawn was inside a fault, it draws a backend not inside
// one at random.
type probed struct {
	least
	snap []float64 // expected delays at the previous pick; +Inf: not drawn
	k    int       // backends drawn a pick
}

// OracleProbes is how many backends Oracle probed knows of at a pick: the
// probes a Prequal pick sends by default (the zero
// balancer.PrequalSettings.ProbesPerPick).
const OracleProbes = defaults.ProbesPerPick

func newProbed(w *world, peers []*balancer.Peer, src rand.Source) balancer.Picker {
	return newProbedK(w, peers, src, OracleProbes)
}

// newProbedK is Oracle probed knowing k backends a pick.
func newProbedK(w *world, peers []*balancer.Peer, src rand.Source, k int) *probed {
	snap := make([]float64, len(peers))
	for i := range snap {
		snap[i] = math.Inf(1)
	}
	return &probed{least: newLeast(w, peers, src), snap: snap, k: k}
}

// Pick chooses from the previous pick's snapshot, then takes this pick's.
// It is O(n).
func (o *probed) Pick(*balancer.Request) (*balancer.Peer, error) {
	now := o.w.now
	i, best := -1, math.Inf(1)
	o.ties = o.ties[:0]
	for k, d := range o.snap {
		switch {
		case d < best:
			i, best = k, d
			o.ties = append(o.ties[:0], k)
		case d == best && d < math.Inf(1):
			o.ties = append(o.ties, k)
		}
	}
	if len(o.ties) > 1 {
		i = o.ties[o.rng.IntN(len(o.ties))]
	}
	if i < 0 {
		o.ties = o.ties[:0]
		for k := range o.w.backends {
			if _, p := o.w.backends[k].faultAt(now); p == 0 {
				o.ties = append(o.ties, k)
			}
		}
		if len(o.ties) == 0 {
			return nil, fmt.Errorf("sim: every backend is failing: %w", balancer.ErrNoLivePeer)
		}
		i = o.ties[o.rng.IntN(len(o.ties))]
	}
	o.snapshot(now, i)
	return o.peers[i], nil
}

// snapshot draws o.k distinct backends (all of them if fewer)
// and records their expected delays at now, the one chosen counting the
// job this pick sends it; a backend inside a fault is left out, as the
// failed answer of a real probe would be.
func (o *probed) snapshot(now int64, chosen int) {
	for k := range o.snap {
		o.snap[k] = math.Inf(1)
	}
	n := len(o.snap)
	for drawn := 0; drawn < min(o.k, n); {
		k := o.rng.IntN(n)
		if o.snap[k] == -1 {
			continue
		}
		o.snap[k] = -1 // drawn
		drawn++
	}
	for k, d := range o.snap {
		if d != -1 {
			continue
		}
		b := &o.w.backends[k]
		if _, p := b.faultAt(now); p > 0 {
			o.snap[k] = math.Inf(1)
			continue
		}
		extra := 0
		if k == chosen {
			extra = 1
		}
		o.snap[k] = trueDelay(b, now, extra)
	}
}

// Done ignores the outcome.
func (o *probed) Done(*balancer.Peer, balancer.Outcome) error { return nil }
