package balancer

import (
	"sync/atomic"
)

// Random is nginx's `random` (ngx_http_upstream_random_module.c, nginx
// 1.22.1): each pick draws a peer at random in proportion to its weight,
// and draws again while the peer is down, inside its fail window, at
// max_conns or already tried by the request. Use it where many balancers
// share peers and a round-robin position per balancer would synchronize
// them; RandomTwo spreads load better.
//
// After 20 fruitless draws, counted per request so that retries add to
// them, and for a single peer or a total weight of 0, the request goes to
// nginx's smooth round-robin over the same peers and current weights (see
// SmoothWRR). Failures, max_fails/fail_timeout (the probe after the window
// claimed by compare-and-swap), down, max_conns and the retry bound follow
// nginx's round-robin module; backup peers are refused with
// ErrInvalidConfig, as nginx refuses them. nginx draws ngx_random() modulo
// the total weight; Random draws from Vose's alias table (see
// RandomWeighted), the same distribution, so only proportions compare.
//
// Cost of a pick: O(1) and lock-free (one alias-table draw per try, a
// locked scan only for the round-robin fallback), no allocation; Done takes
// the lock only to account a failure or clear one. Randomness: WithRand(src),
// used under a small mutex, or the runtime's per-thread generator. The zero
// value is not usable; use NewRandom. Random is safe for concurrent use by
// multiple goroutines.
type Random struct{ randomPicker }

// RandomTwo is nginx's `random two least_conn` (the default and only
// method of `random two`), the power of two choices on in-flight counts
// that Envoy and gRPC call least request: each pick draws two distinct
// eligible peers at random in proportion to their weights and keeps the one
// with fewer attempts in flight per unit of weight, compared by cross
// multiplication as nginx does (the first is kept only if
// second.conns·first.weight > first.conns·second.weight, so a tie goes to
// the second). Use it when requests vary in cost and a full least_conn scan
// (LeastConn) is too slow or too herd-prone across many balancers.
//
// A draw that lands on the first peer again or on an ineligible or tried
// peer is a try, and so is the first peer's draw; after 20 tries per
// request, for a single peer or a total weight of 0, the request goes to
// nginx's smooth round-robin over the same peers and current weights. So
// with fewer than two eligible peers a pick ends in round robin, as in
// nginx. Failures, max_fails/fail_timeout, down, max_conns and the retry
// bound follow nginx's round-robin module; backup peers are refused with
// ErrInvalidConfig.
//
// Cost of a pick: O(1) and lock-free on the healthy path (two alias-table
// draws over an immutable snapshot and two atomic reads), no allocation;
// failures go through the locked accounting in Done. Randomness as in
// Random. The zero value is not usable; use NewRandomTwo. RandomTwo is safe
// for concurrent use by multiple goroutines.
type RandomTwo struct{ randomPicker }

var (
	_ Picker = (*Random)(nil)
	_ Picker = (*RandomTwo)(nil)
)

// randomPicker is what Random and RandomTwo share.
type randomPicker struct {
	peerSet
	name  string
	table atomic.Pointer[randomTable]
	rng   randSource // the draws: WithRand's source, or the runtime's
}

// randomTable is the alias table over one list's peers (nginx's ranges).
type randomTable struct {
	list  *peerList
	alias rwTable
	total int64
}

// NewRandom returns a Random over peers. It accepts WithClock and
// WithRand. A backup peer is rejected with ErrInvalidConfig naming it.
func NewRandom(peers []*Peer, opts ...Option) (*Random, error) {
	b := &Random{}
	if err := b.setup("Random", peers, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// NewRandomTwo returns a RandomTwo over peers. It accepts WithClock and
// WithRand. A backup peer is rejected with ErrInvalidConfig naming it.
func NewRandomTwo(peers []*Peer, opts ...Option) (*RandomTwo, error) {
	b := &RandomTwo{}
	if err := b.setup("RandomTwo", peers, opts); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *randomPicker) setup(name string, peers []*Peer, opts []Option) error {
	cfg, err := newConfig(name, optPicker|optRand, opts)
	if err != nil {
		return err
	}
	if err := refuseBackups(name, peers); err != nil {
		return err
	}
	b.name, b.rng = name, newRandSource(cfg)
	return b.init(peers, cfg, b.changedLocked)
}

// Add adds peers as peerSet.Add does, refusing backup peers with
// ErrInvalidConfig.
func (b *randomPicker) Add(peers ...*Peer) error {
	if err := refuseBackups(b.name, peers); err != nil {
		return err
	}
	return b.peerSet.Add(peers...)
}

// Update reconciles a snapshot as peerSet.Update does, refusing backup
// peers with ErrInvalidConfig.
func (b *randomPicker) Update(snapshot []*Peer) error {
	if err := refuseBackups(b.name, snapshot); err != nil {
		return err
	}
	return b.peerSet.Update(snapshot)
}

func (b *randomPicker) changedLocked(l *peerList) {
	w := make([]uint64, len(l.primary))
	var total int64
	for i, p := range l.primary {
		w[i] = uint64(p.weight.Load())
		total += p.weight.Load()
	}
	b.table.Store(&randomTable{list: l, alias: newRWTable(l.primary, w), total: total})
}

// pick runs the frame lock-free around nginx's draws, one peer (random) or
// two (random two), which return the index of the peer taken, or -1 to
// hand the request to round robin. nginx's random module hands a request to
// round robin for a single peer (the frame's rule), a total weight of 0 and
// past 20 fruitless draws. The draws are chosen by a flag, not passed as a
// function, so that the clock and the spare state stay on the stack.
func (b *randomPicker) pick(r *Request, two bool) (*Peer, error) {
	t := b.table.Load()
	clk := lazyClock{now: b.now}
	var spare hashState
	fall := false
	p, err := pickFrame(t.list, r, func(_ []*Peer, _ bool) int {
		hs, _ := r.hashState(&spare)
		if t.total == 0 || hs.tries > maxHashTries {
			fall = true
			return handOff
		}
		var i int
		if two {
			i = b.drawTwo(t, r, hs, &clk)
		} else {
			i = b.drawOne(t, r, hs, &clk)
		}
		if fall = i < 0; fall {
			return handOff
		}
		return i
	})
	if fall {
		return b.fallback(r)
	}
	return p, err
}

// fallback is the round-robin fallback: the frame again, under the lock,
// on the list current there, around nginx's smooth scan.
func (b *randomPicker) fallback(r *Request) (*Peer, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	clk := lazyClock{now: b.now}
	return pickFrame(b.load(), r, func(peers []*Peer, _ bool) int {
		return fallbackLocked(peers, r, &clk)
	})
}

// Pick draws a peer by weight until one is eligible and untried, and counts
// the attempt in flight until Done. It is O(1) a draw, without a lock.
func (b *Random) Pick(r *Request) (*Peer, error) { return b.pick(r, false) }

// drawOne is ngx_http_upstream_get_random_peer's loop.
func (b *randomPicker) drawOne(t *randomTable, r *Request, hs *hashState, clk *lazyClock) int {
	peers := t.list.primary
	for {
		i := t.alias.draw(b.rng.uint64())
		if p := peers[i]; !r.isTried(i) && p.eligible(clk) && p.take(clk) {
			return i
		}
		if hs.tries++; hs.tries > maxHashTries {
			return -1
		}
	}
}

// Pick draws two distinct eligible untried peers by weight and returns the
// one with fewer attempts in flight per unit of weight, the second on a
// tie, counting the attempt in flight until Done. It is O(1) a draw,
// without a lock.
func (b *RandomTwo) Pick(r *Request) (*Peer, error) { return b.pick(r, true) }

// drawTwo is ngx_http_upstream_get_random2_peer's loop: the first eligible
// draw is kept (and counts a try), the second decides.
func (b *randomPicker) drawTwo(t *randomTable, r *Request, hs *hashState, clk *lazyClock) int {
	peers := t.list.primary
	first := -1
	for {
		i := t.alias.draw(b.rng.uint64())
		if p := peers[i]; i != first && !r.isTried(i) && p.eligible(clk) {
			if first < 0 {
				first = i
			} else {
				q := peers[first]
				if p.inFlight()*q.weight.Load() > q.inFlight()*p.weight.Load() {
					p, i = q, first
				}
				if p.take(clk) {
					return i
				}
				// Another pick filled p or claimed its probe since it
				// was read: start the pair again.
				first = -1
			}
		}
		if hs.tries++; hs.tries > maxHashTries {
			return -1
		}
	}
}

// Done reports the outcome of an attempt on p, which ends its in-flight
// count. A success on a peer with no failures on record takes no lock.
func (b *randomPicker) Done(p *Peer, o Outcome) error { return b.done(p, o) }
