package balancer

import (
	"fmt"
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// RandomWeighted in detail. As RandomLoadBalance in apache/dubbo's
// dubbo-cluster, each pick chooses peer i with probability w_i/W, the
// weights over their sum. Equal weights give a uniform pick; a peer of
// weight 0 is never picked while the sum is positive, and if every weight
// is 0 the pick is uniform over all peers, as in Dubbo. Dubbo draws an
// offset below W and searches prefix sums, O(log n); RandomWeighted builds
// Vose's alias table instead (Vose, "A linear algorithm for generating
// random numbers with a given distribution", 1991), so a pick is O(1): one
// 64-bit draw, one multiplication, one comparison.
//
// Eligibility follows nginx: a peer that is down, inside its fail window, at
// its max_conns limit or already tried by the request is not picked, and
// the backup peers, with a table of their own, are used only when no primary
// is eligible. A draw that lands on an ineligible peer is redrawn, up to
// rwDraws (8) draws in all, and then a scan over the eligible peers draws
// among them by weight, O(n). Either way the pick is distributed as the
// weights restricted to the eligible peers: redrawing until an eligible peer
// comes up picks peer j with probability w_j/E, E the eligible peers' sum,
// and so does the scan, so stopping the redraws after 8 changes the cost,
// not the distribution. Failures do not lower a peer's weight (nginx's
// effective_weight plays no part here); they take it out through max_fails.
//
// With a Warmup d (RandomWeightedSettings), a peer added to the picker ramps up as in Dubbo: its
// weight is Dubbo's (int) (uptime / ((float) d / weight)), clamped to
// [1, weight], with uptime and d in whole milliseconds as Dubbo counts them
// and the uptime measured on the picker's clock from when the peer was
// added. Dubbo's edge cases carry over: a negative uptime (a clock behind
// the peer's start) gives 1, and an uptime of 0 gives the full weight, so a
// peer runs at full weight for the first millisecond after it is added.
// Warm-up changes nothing for a peer of weight 1; Dubbo's default weight is
// 100, which ramps in steps of 1%.
//
// Warmup stays Dubbo's, not an alias of WithSlowStart: it is there to
// pick as Dubbo picks, integer steps, clamps and edge cases included, which
// Envoy's formula does not reproduce (WithSlowStart(d, 1, 100/weight) comes
// near, but rounds otherwise, reaches no full weight at an uptime of 0 and
// also warms readmitted peers). Both ramp the same peers, so both at once
// are refused; WithSlowStart here thins the draws as it does for the other
// random pickers (guard_slowstart.go), and leaves the table alone.
//
// To keep picks O(1) while weights ramp, the table is not rebuilt on every
// change of a weight but at most every s = max(d/128, 1ms) (rwSteps), by the
// first Pick past that time (Pick reads the clock while any peer is
// warming), and once more when the last peer reaches d. A pick thus uses
// weights computed at most s ago: since the ramp only rises, a warming
// peer's weight lags Dubbo's by at most what it gains in s, ⌈weight·s/d⌉
// (⌈weight/128⌉ for d of 128 ms or more), and never runs ahead of it. Picks
// that race a rebuild keep the previous table. Once every peer is warm the
// table stays as it is and Pick no longer reads the clock, until a peer is
// added.
//
// Randomness comes from the runtime's per-thread wyrand generator
// (fastRand64), under half the cost of math/rand/v2's top-level ChaCha8
// and, like it, per thread: picks on different cores share no written
// memory. With
// WithRand(src) every draw comes from src under a small mutex, so that src
// need not be safe for concurrent use and a seeded source makes the picks
// of one goroutine reproducible; concurrent picks then serialize on that
// mutex.

// RandomWeighted is Dubbo's weighted random (RandomLoadBalance in
// apache/dubbo): each pick chooses among the eligible peers at random, in
// exact proportion to their weights, a peer of weight 0 only when its whole
// list has weight 0. [RandomWeightedSettings].Warmup ramps a new peer's weight up as Dubbo
// does; [WithSlowStart] as Envoy does (not both). Failures take a peer out through max_fails but never lower its
// weight. Choose it for many uncoordinated clients.
//
// A first attempt is O(1) and lock-free by Vose's alias table, with no
// write shared between goroutines but the peer's in-flight count; a draw
// on an ineligible peer is redrawn, at worst O(n). The zero value is not
// usable; use [NewRandomWeighted]. It is safe for concurrent use.
type RandomWeighted struct {
	peerSet
	state atomic.Pointer[rwState] // rebuilt under mu

	// Immutable after construction.
	warmup int64      // nanoseconds; 0: no warm-up
	rng    randSource // the draws: WithRand's source, or the runtime's
}

// rwDraws bounds the draws a pick makes from the alias table before it
// scans. With a fraction q of the weight eligible, a pick reaches the scan
// with probability (1-q)^8: 0.4% when half the weight is out.
const rwDraws = 8

// rwSteps is how many times, at most, the warm-up rebuilds the table over
// one warm-up period.
const rwSteps = 128

// rwState is an immutable snapshot of the alias tables, derived from one
// peer list at one time.
type rwState struct {
	list    *peerList
	primary rwTable
	backup  rwTable
	warming bool  // some peer is still ramping up
	next    int64 // when warming: the clock time of the next rebuild
}

// randomWeightedSpec is RandomWeighted's declaration (see pickerSpec).
var randomWeightedSpec = pickerSpec{name: "RandomWeighted", options: []string{"WithRand", "WithWarmup", "WithSlowStart"}, settings: "RandomWeightedSettings"}

// NewRandomWeighted returns a RandomWeighted over peers with the default
// settings (RandomWeightedSettings.New sets them). opts: the shared options
// (see Option).
func NewRandomWeighted(peers []*Peer, opts ...Option) (*RandomWeighted, error) {
	cfg, err := newConfig(randomWeightedSpec, opts)
	if err != nil {
		return nil, err
	}
	var warmup warmupSetting
	applyOwn(&cfg, &warmup)
	if warmup.v < 0 {
		return nil, fmt.Errorf("balancer: RandomWeighted: %s: negative: %w", warmup.by, ErrInvalidConfig)
	}
	var slow slowStartSetting
	if applyOwn(&cfg, &slow); slow.set && warmup.v != 0 {
		return nil, fmt.Errorf("balancer: RandomWeighted: %s and WithSlowStart both ramp a new peer up; give one: %w", warmup.by, ErrInvalidConfig)
	}
	b := &RandomWeighted{warmup: int64(warmup.v), rng: newRandSource(cfg)}
	b.fresh = newRWPeer
	if err := b.init(peers, cfg, b.changedLocked); err != nil {
		return nil, err
	}
	return b, nil
}

// changedLocked rebuilds the tables after a peer-list change.
func (b *RandomWeighted) changedLocked(l *peerList) {
	var now int64
	if b.warmup > 0 {
		now = b.now()
	}
	b.buildLocked(l, now)
}

// buildLocked builds and publishes the tables for l at time now. Requires
// b.mu (it reads when each peer was added).
func (b *RandomWeighted) buildLocked(l *peerList, now int64) {
	st := &rwState{list: l}
	next := int64(math.MaxInt64)
	st.primary = newRWTable(l.primary, b.weightsLocked(l.primary, now, &next))
	st.backup = newRWTable(l.backup, b.weightsLocked(l.backup, now, &next))
	if next != math.MaxInt64 {
		st.warming, st.next = true, next
	}
	b.state.Store(st)
}

// weightsLocked returns the weight of each peer at time now, lowering next
// to the time the table should be rebuilt if a peer is still warming.
func (b *RandomWeighted) weightsLocked(peers []*Peer, now int64, next *int64) []uint64 {
	w := make([]uint64, len(peers))
	const ms = int64(time.Millisecond)
	warmupMs := b.warmup / ms
	step := max(b.warmup/rwSteps, ms) // see the RandomWeighted doc
	for i, p := range peers {
		weight := p.weight.Load()
		w[i] = uint64(weight)
		if b.warmup <= 0 || weight <= 0 {
			continue
		}
		added := rwOf(p).added
		upMs := floorMs(now - added)
		w[i] = uint64(warmupWeight(weight, upMs, warmupMs))
		var at int64
		switch {
		case upMs <= 0:
			// Dubbo gives 1 below 0 and the full weight at 0 (its ramp
			// starts past 0): the ramp proper starts at 1 ms.
			at = added + ms
		case upMs < warmupMs:
			at = min(now+step, added+b.warmup)
		default:
			continue // warm
		}
		*next = min(*next, at)
	}
	return w
}

// floorMs converts nanoseconds to whole milliseconds, Dubbo's unit,
// rounding down, so that a clock even slightly behind a peer's start gives a
// negative uptime.
func floorMs(ns int64) int64 {
	const ms = int64(time.Millisecond)
	q := ns / ms
	if ns < 0 && ns%ms != 0 {
		q--
	}
	return q
}

// warmupWeight is Dubbo 3.3's AbstractLoadBalance.getWeight for a peer with
// a start time, uptime and warm-up in whole milliseconds:
//
//   - a weight of 0 or less gives 0, and no warm-up applies;
//   - a negative uptime (the clock behind the peer's start) gives 1;
//   - an uptime of 0, or of warmup or more, gives the full weight (the ramp
//     applies only for 0 < uptime < warmup);
//   - in between, calculateWarmupWeight: weight·uptime/warmup in float32,
//     clamped to [1, weight].
func warmupWeight(weight, uptimeMs, warmupMs int64) int64 {
	switch {
	case weight <= 0:
		return 0
	case uptimeMs < 0:
		return 1
	case uptimeMs > 0 && uptimeMs < warmupMs:
		return dubboWarmupWeight(uptimeMs, warmupMs, weight)
	}
	return weight
}

// dubboWarmupWeight is Dubbo's calculateWarmupWeight line for line:
//
//	int ww = (int) (uptime / ((float) warmup / weight));
//	return ww < 1 ? 1 : (Math.min(ww, weight));
//
// Java widens the ints to float, divides in float and truncates toward
// zero; the explicit float32 conversions keep Go from fusing or widening
// any step. Callers pass 0 < uptime < warmup, so the quotient is finite and
// below weight (up to float rounding, which the clamp absorbs).
func dubboWarmupWeight(uptime, warmup, weight int64) int64 {
	perUnit := float32(float32(warmup) / float32(weight))
	ww := int64(float32(float32(uptime) / perUnit))
	if ww < 1 {
		return 1
	}
	return min(ww, weight)
}

// Pick returns a peer chosen at random by weight among the eligible ones.
// It is O(1) and lock-free (apart from WithRand's mutex) when the first
// draw is eligible and r is fresh (nil, or on its first attempt); otherwise
// it redraws and at worst scans, O(n). While a peer warms up, Pick also
// reads the clock, and about every warmup/128 one Pick rebuilds the table,
// O(n), if no other goroutine holds the lock; that rebuild is the only time
// Pick allocates.
func (b *RandomWeighted) Pick(r *Request) (*Peer, error) {
	st := b.state.Load()
	clk := lazyClock{now: b.now}
	if st.warming {
		st = b.rewarm(st, &clk)
	}
	var ws *slowStart // non-nil while a peer may be warming (guard_slowstart.go)
	if b.slow.warming(&clk) {
		ws = &b.slow
	}
	if t := &st.primary; t.n != 0 && r.fresh() {
		// b.rng.uint64(), with its common case inlined by hand (the method
		// is too big for the compiler to inline).
		var x uint64
		if b.rng.rnd == nil {
			x = fastRand64()
		} else {
			x = b.rng.uint64()
		}
		i := t.draw(x)
		p := t.peers[i]
		// stands is a call the compiler does not inline: skipped while no
		// peer warms.
		if ws != nil && !ws.stands(p, &clk, &b.rng) {
			return b.pickSlow(st, r, &clk, -1, ws) // thinned: a new draw
		}
		// As in RoundRobin.Pick, ahead of pickFrame: a clean peer needs
		// neither the clock nor a compare-and-swap.
		if p.clean() {
			p.pick()
			return fastFirst(st.list, r, i, p)
		}
		// The same draw goes on to the full check: discarding it here
		// would favour the peers the fast check accepts.
		return b.pickSlow(st, r, &clk, i, ws)
	}
	return b.pickSlow(st, r, &clk, -1, ws)
}

// rewarm rebuilds the tables if the warm-up schedule says so and no other
// goroutine holds the lock (it, or the next Pick, will).
func (b *RandomWeighted) rewarm(st *rwState, clk *lazyClock) *rwState {
	now := clk.get()
	if now < st.next || !b.mu.TryLock() {
		return st
	}
	if b.state.Load() == st {
		b.buildLocked(b.load(), now)
	}
	st = b.state.Load()
	b.mu.Unlock()
	return st
}

// pickSlow runs the frame: the primaries' table (starting with draw first,
// if not negative), then the backups'. With ws set, a draw stands with the
// peer's slow-start factor (first has stood already).
func (b *RandomWeighted) pickSlow(st *rwState, r *Request, clk *lazyClock, first int, ws *slowStart) (*Peer, error) {
	return pickFrame(st.list, r, func(_ []*Peer, backup bool) int {
		if backup {
			return b.pickFrom(&st.backup, r, clk, -1, ws)
		}
		return b.pickFrom(&st.primary, r, clk, first, ws)
	})
}

// pickFrom draws from t until an eligible peer comes up, at most rwDraws
// times (the first draw is first, if not negative), then scans. It returns
// the index of the peer taken, or -1. With ws set, a draw also stands only
// with its peer's slow-start factor, and the scan weighs each peer by it:
// the pick is then in proportion to weight · factor.
func (b *RandomWeighted) pickFrom(t *rwTable, r *Request, clk *lazyClock, first int, ws *slowStart) int {
	if t.n == 0 {
		return -1
	}
	for k := range rwDraws {
		i := first
		if k > 0 || i < 0 {
			i = t.draw(b.rng.uint64())
			if !ws.stands(t.peers[i], clk, &b.rng) {
				continue
			}
		}
		if !r.isTried(i) && t.peers[i].take(clk) {
			return i
		}
	}
	return b.scan(t, r, clk, ws)
}

// scan draws by weight among the eligible peers of t: one pass sums their
// weights, a draw below the sum picks one in a second pass. If the peer it
// lands on stopped being eligible in between (a concurrent Pick took its
// probe or its last connection), the first eligible peer after it is taken.
func (b *RandomWeighted) scan(t *rwTable, r *Request, clk *lazyClock, ws *slowStart) int {
	ok := func(i int) bool {
		return t.w[i] != 0 && !r.isTried(i) && t.peers[i].eligible(clk)
	}
	weight := func(i int) uint64 {
		if ws != nil { // in slowScale units, scaled by the factor
			return uint64(ws.scaledWeight(t.peers[i], int64(t.w[i]), clk.get()))
		}
		return t.w[i]
	}
	var sum uint64
	for i := range t.peers {
		if ok(i) {
			sum += weight(i)
		}
	}
	if sum == 0 {
		return -1
	}
	x, _ := bits.Mul64(b.rng.uint64(), sum)
	start := 0
	for i := range t.peers {
		if !ok(i) {
			continue
		}
		if x < weight(i) {
			start = i
			break
		}
		x -= weight(i)
	}
	n := len(t.peers)
	for k := range n {
		i := start + k
		if i >= n {
			i -= n
		}
		if ok(i) && t.peers[i].take(clk) {
			return i
		}
	}
	return -1
}

// Done implements Picker.Done.
func (b *RandomWeighted) Done(p *Peer, o Outcome) error {
	return b.done(p, o)
}

// rwPeer is RandomWeighted's per-peer state (peerstate.go): when the
// picker claimed the peer, the start of its warm-up. Set when made, never
// written after.
type rwPeer struct {
	peerState
	added int64 // unix nanoseconds
}

func newRWPeer(now int64) *peerState {
	s := &rwPeer{added: now}
	s.own = s
	return &s.peerState
}

// rwOf returns RandomWeighted's state of p, a peer of the picker's list
// read under its lock, which always holds one (peerstate.go).
func rwOf(p *Peer) *rwPeer { return p.state.Load().own.(*rwPeer) }

// RandomWeightedSettings are RandomWeighted's own settings; New builds a
// RandomWeighted with them. The zero value is the default: no warm-up. A
// value out of range is ErrInvalidConfig naming the field and the value.
type RandomWeightedSettings struct {
	// Warmup ramps a new peer's weight up linearly over the duration, as
	// Dubbo does: weight·uptime/Warmup, clamped to [1, weight]. Not
	// negative; 0: no warm-up. It is Dubbo's exactly; WithSlowStart is
	// Envoy's, and the two are refused together. Prefer WithSlowStart, the
	// one ramp every weighted picker takes (it also warms readmitted
	// peers); Warmup stays, under its Dubbo name, for picks that must
	// match Dubbo's step for step, which no setting of WithSlowStart
	// reproduces (see RandomWeighted in detail).
	Warmup time.Duration
}

// New returns a RandomWeighted over peers with the settings s. opts: the
// shared options (see Option).
func (s RandomWeightedSettings) New(peers []*Peer, opts ...Option) (*RandomWeighted, error) {
	return NewRandomWeighted(peers, append([]Option{s.Option()}, opts...)...)
}

// Option returns s as an Option, for a RandomWeighted built by name
// (Algorithm.New), as balancerflag's flags and the gRPC configs build
// one: RandomWeighted's constructors apply it where it stands among opts,
// and every other picker refuses it. Name the picker statically with New.
func (s RandomWeightedSettings) Option() Option {
	return ownOption(randomWeightedSpec.settings, func(c *warmupSetting) {
		field(&c.own, "RandomWeightedSettings.Warmup", s.Warmup, false)
	})
}

// warmupSetting is RandomWeighted's own setting, as given.
type warmupSetting struct{ own[time.Duration] }

// WithWarmup sets RandomWeightedSettings.Warmup to d.
//
// Deprecated: use RandomWeightedSettings.Warmup.
func WithWarmup(d time.Duration) Option {
	return ownOption("WithWarmup", func(s *warmupSetting) { s.give("WithWarmup", d) })
}
