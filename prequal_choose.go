package balancer

import "math"

// Prequal's choice for one attempt: the pool's candidate by the hot-cold
// rule (prequal_pool.go), against the peers whose probes fail or whose last
// attempt failed, which P2CPeakEWMA's rule balances.

// silentShare: why the peers whose probes fail get their weight's share.
// A server without the probe handler, or behind a path that answers 404,
// is as likely to be fast as any other; its cost, P2CPeakEWMA's peak EWMA,
// jumps to every slow reply and decays over WithDecay, while a probed
// peer's is the server's mean estimate. Compared with each other, a
// silent server as fast as the others lost almost every pick (a review
// measured 7 of 20,000 where a fifth was its share, and no mean of its
// own replies fixed it: one slow sample and it lost every comparison
// until the sample aged). So a pick first draws one peer by weight, and
// if that peer is silent the attempt goes to the unprobed peers by
// P2CPeakEWMA's rule among them, provided the one chosen has no more
// attempts in flight than another peer drawn by weight; otherwise the
// pool's candidate competes with that unprobed one as below. The silent peers together take about
// their weight's share (a little more, from the comparison), never the
// whole pool's: a slow silent server is held to P2CPeakEWMA's choice
// among the silent, and nginx's failure model still takes out one that
// fails. A peer whose last attempt failed has no share of its own (a
// stalled server's probes time out too, so it is silent as well: with a
// share it got a tenth of the attempts after each fail window, and the
// blackhole-stall scenario's p99.9 went from 285 to 779 ms): it competes
// by its cost, penalty included, until an attempt on it succeeds.

// choose returns the index in peers of the peer chosen for r's attempt,
// taken, or -1: the pool's candidate, unless an unprobed peer's expected
// latency is lower; without a candidate, P2CPeakEWMA's choice.
func (b *Prequal) choose(peers []*Peer, d *drawList, backup bool, r *Request, clk *lazyClock) int {
	if b.pool.n.Load() == 0 {
		return b.twoChoices.choose(peers, d, r, &b.peakEWMA, clk, nil)
	}
	u, limit := -1, math.Inf(1)
	if b.unprobed.Load() > 0 {
		if u = b.drawUnprobed(peers, d, r, clk); u >= 0 {
			if b.silentTurn(peers, d, u) && peers[u].take(clk) {
				return u
			}
			probing, c := b.cost(peers[u], p2cState(d.st[u]), clk.get(), clk)
			if !probing {
				limit = c / weightOf(peers[u]) // per unit of weight, as the pool's score
			}
		}
	}
	i, found := b.poolPick(peers, backup, r, clk, limit)
	switch {
	case i >= 0:
		return i
	case found && u >= 0 && peers[u].take(clk):
		return u // the unprobed peer's cost was the lower
	}
	return b.twoChoices.choose(peers, d, r, &b.peakEWMA, clk, nil)
}

// poolPick runs the pool's part of a pick under its lock: ages the
// answers, chooses by the hot-cold rule, and, if the candidate's latency
// is below limit, takes its attempt and charges its answer (i ≥ 0); found
// reports a candidate whose latency was not below limit. It then removes
// one more answer if answersPerRemoval answers came since the last.
func (b *Prequal) poolPick(peers []*Peer, backup bool, r *Request, clk *lazyClock, limit float64) (i int, found bool) {
	pl := &b.pool
	now := clk.get()
	i = -1
	pl.mu.Lock()
	pl.ageLocked(now)
	thr := pl.ring.quantile(pl.q)
	if j := pl.chooseLocked(peers, backup, r, clk, thr); j >= 0 {
		e := &pl.e[j]
		switch {
		case e.score() >= limit:
			found = true
		case e.peer.take(clk):
			i = e.st.pos
			pl.useLocked(j)
		}
	}
	if pl.removes && pl.answers >= answersPerRemoval {
		pl.answers -= answersPerRemoval
		pl.removeOneLocked(thr)
	}
	pl.mu.Unlock()
	return i, found
}

// silentTurn reports whether this pick is the silent peers' (see
// silentShare) and goes to u, the unprobed peer drawn: one peer drawn by
// weight is silent and its last attempt did not fail, and u has no more
// attempts in flight than another peer drawn by weight (a stalled server,
// silent too, piles attempts up and loses); false when a few draws find
// no other peer (the pick then goes on to the comparison).
func (b *Prequal) silentTurn(peers []*Peer, d *drawList, u int) bool {
	if st := prequalState(d.st[b.drawOne(d, len(peers))]); !st.silent.Load() || st.failedLast.Load() {
		return false
	}
	for range p2cEffort {
		if j := b.drawOne(d, len(peers)); j != u {
			return peers[u].inFlight() <= peers[j].inFlight()
		}
	}
	return false
}

// drawUnprobed draws, by weight, up to two distinct unprobed peers r may
// try and returns the one of the lower peak-EWMA cost, or -1. It gives up
// after a few draws: the unprobed are then too few to matter to this pick.
func (b *Prequal) drawUnprobed(peers []*Peer, d *drawList, r *Request, clk *lazyClock) int {
	a, c := -1, -1
	for range 2 * p2cEffort {
		i := b.drawOne(d, len(peers))
		if i == a || !prequalState(d.st[i]).unprobed.Load() || !eligibleAt(peers, i, r, clk) {
			continue
		}
		if a < 0 {
			a = i
			continue
		}
		c = i
		break
	}
	if c >= 0 && b.less(peers[c], peers[a], d.st[c], d.st[a], *clk) {
		return c
	}
	return a
}

// drawOne draws one index of a list of n > 0 peers by weight.
func (b *twoChoices) drawOne(d *drawList, n int) int {
	if d.uniform {
		return int(b.rng.int64N(int64(n)))
	}
	return d.alias.draw(b.rng.uint64())
}
