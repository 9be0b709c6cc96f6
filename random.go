package balancer

import (
	"sync/atomic"
)

// Random and RandomTwo in detail. A draw that lands on a peer that is
// down, inside its fail window, at max_conns or already tried is a try;
// for RandomTwo, so is a second draw on the first peer, and so is the first
// peer's draw. After 20 tries per request, counted in the Request so that
// retries add to them, and for a single peer or a total weight of 0, the
// request goes to nginx's smooth round-robin over the same peers and
// current weights; so with fewer than two eligible peers a RandomTwo pick
// ends in round robin, as in nginx. RandomTwo keeps the first draw only if
// second.conns·first.weight > first.conns·second.weight, so a tie goes to
// the second; with WithReportedLoad, conns is the reported load L of
// reported_load.go, compared in floating point. nginx draws ngx_random()
// modulo the total weight; these draw from Vose's alias table, the same
// distribution, so only proportions compare with nginx.

// Random is nginx's `random` (nginx 1.22.1): each pick draws a peer in
// proportion to its weight, and draws again while the peer is down,
// failing, full or already tried. Use it where many balancers share peers
// and a round-robin position per balancer would synchronize them;
// RandomTwo spreads load better. Failures, down, max_conns and retries
// follow nginx; backup peers are refused with ErrInvalidConfig.
//
// A pick is O(1) and lock-free (the round-robin fallback is Hash's,
// lock-free too while the weights are static) and allocates nothing; Done
// takes the lock only to account a failure. Randomness: WithRand(src), or the runtime's per-thread
// generator. The zero value is not usable; use NewRandom. Random is safe
// for concurrent use.
type Random struct{ randomPicker }

// RandomTwo is nginx's `random two least_conn`, the power of two choices on
// in-flight counts that Envoy and gRPC call least request: each pick draws
// two distinct eligible peers in proportion to their weights and keeps the
// one with fewer attempts in flight per unit of weight, the second on a
// tie. Use it when requests vary in cost, at any number of peers: it is the
// scalable alternative to LeastConn. With [WithReportedLoad] the counts
// compared take in the other clients' attempts that peers' servers report
// (the round-robin fallback still ignores them). Failures, down, max_conns and retries
// follow nginx; backup peers are refused with ErrInvalidConfig.
//
// A pick is O(1) and lock-free on the healthy path and allocates nothing;
// failures go through the locked accounting in Done. Randomness as in
// Random. The zero value is not usable; use NewRandomTwo. RandomTwo is safe
// for concurrent use.
type RandomTwo struct{ randomPicker }

var (
	_ Picker = (*Random)(nil)
	_ Picker = (*RandomTwo)(nil)
)

// randomPicker is what Random and RandomTwo share.
type randomPicker struct {
	smoothRR
	table atomic.Pointer[randomTable]
	rng   randSource   // the draws: WithRand's source, or the runtime's
	rep   reportedLoad // RandomTwo's WithReportedLoad; immutable after construction
}

// randomTable is the alias table over one list's peers (nginx's ranges).
type randomTable struct {
	list  *peerList
	alias rwTable
	total int64
	// srv[i] is the reports kept of primary i (reported_load.go), read
	// beside the peer without a load from it; nil with WithReportedLoad
	// off.
	srv []*serverCount
}

// randomSpec and randomTwoSpec are Random's and RandomTwo's declarations
// (see pickerSpec).
var (
	randomSpec    = pickerSpec{name: "Random", options: []string{"WithRand", "WithSlowStart"}, noBackups: true}
	randomTwoSpec = pickerSpec{name: "RandomTwo", options: []string{"WithRand", "WithReportedLoad", "WithSlowStart"}, noBackups: true}
)

// NewRandom returns a Random over peers. opts: the shared options (see
// Option). A backup peer is rejected with ErrInvalidConfig naming it.
func NewRandom(peers []*Peer, opts ...Option) (*Random, error) {
	b := &Random{}
	if err := b.setup(randomSpec, peers, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// NewRandomTwo returns a RandomTwo over peers. opts: the shared options
// (see Option). A backup peer is rejected with ErrInvalidConfig naming it.
func NewRandomTwo(peers []*Peer, opts ...Option) (*RandomTwo, error) {
	b := &RandomTwo{}
	if err := b.setup(randomTwoSpec, peers, opts); err != nil {
		return nil, err
	}
	return b, nil
}

func (b *randomPicker) setup(spec pickerSpec, peers []*Peer, opts []Option) error {
	cfg, err := newConfig(spec, opts)
	if err != nil {
		return err
	}
	if b.rep, err = reportedOptions(spec.name, &cfg); err != nil {
		return err
	}
	if b.rep.on() {
		b.fresh = newReportPeer
	}
	b.rng = newRandSource(cfg)
	b.shared, b.currentWeight = true, b.impliedLocked
	return b.init(peers, cfg, b.changedLocked)
}

func (b *randomPicker) changedLocked(l *peerList) {
	w := make([]uint64, len(l.primary))
	var total int64
	for i, p := range l.primary {
		w[i] = uint64(p.weight.Load())
		total += p.weight.Load()
	}
	var srv []*serverCount
	if b.rep.on() {
		srv = make([]*serverCount, len(l.primary))
		for i, p := range l.primary {
			srv[i] = reportOf(p)
		}
	}
	b.table.Store(&randomTable{list: l, alias: newRWTable(l.primary, w), total: total, srv: srv})
	b.smoothRR.changedLocked(l)
}

// pick runs the frame lock-free around nginx's draws, one peer (random) or
// two (random two), which return the index of the peer taken, or handOff to
// hand the request to round robin. nginx's random module hands a request to
// round robin for a single peer (the frame's rule), a total weight of 0 and
// past 20 fruitless draws. The draws are chosen by a flag, not passed as a
// function, so that the clock and the spare state stay on the stack.
func (b *randomPicker) pick(r *Request, two bool) (*Peer, error) {
	t := b.table.Load()
	clk := lazyClock{now: b.now}
	var ws *slowStart // non-nil while a peer may be warming (guard_slowstart.go)
	if b.slow.warming(&clk) {
		ws = &b.slow
	}
	var spare hashState
	p, err := pickFrame(t.list, r, func(_ []*Peer, _ bool) int {
		hs, _ := r.hashState(&spare)
		if t.total == 0 || hs.tries > maxHashTries {
			return handOff
		}
		if two {
			return b.drawTwo(t, r, hs, &clk, ws)
		}
		return b.drawOne(t, r, hs, &clk, ws)
	})
	if err == errHandOff {
		return b.roundRobin(r)
	}
	return p, err
}

// Pick draws a peer by weight until one is eligible and untried. It is
// O(1) a draw, without a lock.
func (b *Random) Pick(r *Request) (*Peer, error) { return b.pick(r, false) }

// drawOne is ngx_http_upstream_get_random_peer's loop. With ws set, a draw
// stands only with its peer's slow-start factor (a draw thinned away counts
// a try, as an ineligible one does), which draws by weight · factor.
func (b *randomPicker) drawOne(t *randomTable, r *Request, hs *hashState, clk *lazyClock, ws *slowStart) int {
	peers := t.list.primary
	for {
		i := t.alias.draw(b.rng.uint64())
		if p := peers[i]; !r.isTried(i) && p.eligible(clk) && ws.stands(p, clk, &b.rng) && p.take(clk) {
			return i
		}
		if hs.tries++; hs.tries > maxHashTries {
			return handOff
		}
	}
}

// Pick draws two distinct eligible untried peers by weight and returns the
// one with fewer attempts in flight per unit of weight, the second on a
// tie. It is O(1) a draw, without a lock.
func (b *RandomTwo) Pick(r *Request) (*Peer, error) { return b.pick(r, true) }

// drawTwo is ngx_http_upstream_get_random2_peer's loop: the first eligible
// draw is kept (and counts a try), the second decides.
// With ws set, each draw is thinned as drawOne's.
func (b *randomPicker) drawTwo(t *randomTable, r *Request, hs *hashState, clk *lazyClock, ws *slowStart) int {
	peers := t.list.primary
	first := -1
	for {
		i := t.alias.draw(b.rng.uint64())
		if p := peers[i]; i != first && !r.isTried(i) && p.eligible(clk) && ws.stands(p, clk, &b.rng) {
			if first < 0 {
				first = i
			} else {
				q := peers[first]
				if b.rep.on() {
					pl := b.rep.load(t.srv[i], p.inFlight(), clk)
					ql := b.rep.load(t.srv[first], q.inFlight(), clk)
					if pl*float64(q.weight.Load()) > ql*float64(p.weight.Load()) {
						p, i = q, first
					}
				} else if p.inFlight()*q.weight.Load() > q.inFlight()*p.weight.Load() {
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
			return handOff
		}
	}
}

// Done implements Picker.Done. With RandomTwo's WithReportedLoad, it also
// keeps the count the outcome's Load reports, lock-free.
func (b *randomPicker) Done(p *Peer, o Outcome) error {
	if err := b.report(p, o); err != nil || !b.rep.on() {
		return err
	}
	b.sawReply(p, o, reportsInFlight(o.Load)) // sight.go
	if o.Load != nil && p.owner.Load() == &b.peerSet {
		reportOf(p).note(o.Load, p.inFlight(), b.now())
	}
	return nil
}
