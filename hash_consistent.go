package balancer

import (
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"sync"
	"sync/atomic"
)

// ConsistentHash in detail. Each peer puts 160 points per unit of weight on
// a ring of 32-bit CRC-32 values, derived from its hash text (HashText, by
// default its address, split into host and port as nginx splits the server
// text). A key goes to the first point at or after CRC-32(key), wrapping
// around. If no eligible untried peer holds that point (down, inside its
// fail window, at max_conns or tried), the key walks on to the next point;
// the position lives in the Request, so a retry continues the walk, as in
// nginx. Peers sharing a hash text share their points and smooth round-robin
// chooses among them. After 20 fruitless points, and for an empty key, a
// nil Request, a single peer or a total weight of 0, the request goes to
// nginx's smooth round-robin over the same peers and current weights.
//
// Cost: a pick is a CRC-32 of the key, one read of an index on the hash's
// top bits and a short binary search among the p = 160·W points (W the
// total weight). A first attempt whose point's server text has one peer,
// up, with no failures on record and at full effective weight (then
// nginx's smooth step over that one peer changes nothing), takes no lock;
// retries, shared server texts, a peer recovering its effective weight and
// BoundedLoad take the picker's lock (with the bound, Done takes it
// too). A request with no key goes to the round-robin fallback as Hash's
// does, lock-free from the cycle while the weights are static (under the
// lock with the bound); the smooth step at a point shared by several
// peers moves their current weights, which the fallback shares, so such a
// step first closes the cycle and takes those peers out of the groups. The ring takes 8 bytes a
// point plus an index of at most 256 KB and is rebuilt, in O(p log p), on
// every change of the peers or their weights (not on SetDown).

// ConsistentHash is nginx's `hash KEY consistent` (nginx 1.22.1), ketama
// consistent hashing compatible with Cache::Memcached::Fast: requests with
// the same key (Request.SetKey) go to the same peer, and when a peer joins
// or leaves only about 1/n of the keys move; a retry walks on along the
// ring, and with no key a request goes round robin, as in nginx. Use it for
// cache or shard affinity on a peer list that changes. With a bound c
// ([ConsistentHashSettings].BoundedLoad), beyond nginx, no peer takes more
// than c times its share of the attempts in flight. Backup peers are refused with
// ErrInvalidConfig, as nginx refuses them; the total weight is limited to
// MaxRingWeight.
//
// A pick is O(log points) and allocates nothing; a first attempt to a
// healthy peer takes no lock, nor does one with no key while the weights
// are static (the round-robin fallback is Hash's). The zero value is not usable; use
// ConsistentHashSettings.New or NewConsistentHash. ConsistentHash is safe for concurrent use.
type ConsistentHash struct {
	smoothRR
	ring  *chashRing // guarded by mu
	bound float64    // BoundedLoad's factor; 0: off
	live  int64      // weight of the peers not down; guarded by mu

	// view is the ring with the list it was published for, read by the
	// lock-free first attempt (see Pick).
	view atomic.Pointer[chashView]

	// inflight is the load bound's T: the attempts in flight on the peers
	// held, kept equal to the sum of their in-flight counts. With the
	// bound every Pick and Done takes mu, so that a report and a list
	// change (which resums it, a removed peer's attempts no longer
	// counting) cannot interleave. Guarded by mu.
	inflight int64

	admin sync.Mutex // serializes Add and SetWeight, so the limit holds
}

// MaxRingWeight bounds the total weight of a ConsistentHash's peers: the
// ring holds 160 points, 8 bytes each, per unit of weight, about 84 MB at
// the bound. The caller sets the weights, so the bound is exported: a peer
// list past it is refused with ErrInvalidConfig.
const MaxRingWeight = 1 << 16

// chashPointsPerWeight is nginx's 160 points per unit of weight.
const chashPointsPerWeight = 160

// chashRing is the ring for one peer list: points sorted by hash, each
// hash<<32 | group, one per distinct hash, and the peers of each group
// (those sharing a hash text), in list order, in members[start[g]:start[g+1]].
// Immutable once built.
type chashRing struct {
	points  []uint64
	start   []int32
	members []int32

	// solo: every group has one member, so a point's group is its peer's
	// index in the list (groups are numbered in list order).
	solo bool

	// The search's shortcut: the points whose hash has top bits b (the
	// hash >> shift) are points[index[b]:index[b+1]], so a search reads
	// one entry of index and bisects a few points.
	index []uint32
	shift uint

	// What the ring was built from, so that a change that leaves the
	// peers and their weights alone (SetDown) keeps it.
	peers   []*Peer
	weights []int64
}

// consistentHashSpec is ConsistentHash's declaration (see pickerSpec).
var consistentHashSpec = pickerSpec{
	name:      "ConsistentHash",
	options:   []string{"WithBoundedLoad"},
	keyed:     true,
	noBackups: true,
	settings:  "ConsistentHashSettings",
}

// NewConsistentHash returns a ConsistentHash over peers with the default
// settings (ConsistentHashSettings.New sets them). opts: the shared
// options (see Option). A backup peer, a total weight past MaxRingWeight
// or a bound factor below 1, infinite or NaN is rejected with
// ErrInvalidConfig naming the value.
func NewConsistentHash(peers []*Peer, opts ...Option) (*ConsistentHash, error) {
	cfg, err := newConfig(consistentHashSpec, opts)
	if err != nil {
		return nil, err
	}
	var bound boundSetting // by "": no bound
	applyOwn(&cfg, &bound)
	if bound.by != "" && !(bound.v >= 1 && !math.IsInf(bound.v, 1)) {
		return nil, fmt.Errorf("balancer: ConsistentHash: %s: the factor must be finite and at least 1: %w", bound.by, ErrInvalidConfig)
	}
	if err := checkRing(peers, nil, 0); err != nil {
		return nil, err
	}
	c := &ConsistentHash{bound: bound.v}
	c.shared, c.currentWeight = true, c.impliedLocked
	if err := c.init(peers, cfg, c.changedLocked); err != nil {
		return nil, err
	}
	return c, nil
}

// checkRing returns ErrInvalidConfig for a total weight of add and have
// past MaxRingWeight, w added to it (SetWeight's new weight).
func checkRing(add []*Peer, have []*Peer, w int) error {
	var sum int64
	for _, list := range [][]*Peer{have, add} {
		for _, q := range list {
			if q != nil && q.configErr == nil {
				sum += q.weight.Load()
			}
		}
	}
	if sum+int64(w) > MaxRingWeight {
		return fmt.Errorf("balancer: ConsistentHash: total weight %d past MaxRingWeight %d: %w", sum+int64(w), MaxRingWeight, ErrInvalidConfig)
	}
	return nil
}

// Add also refuses a total weight past MaxRingWeight, with
// ErrInvalidConfig. The ring is rebuilt.
func (c *ConsistentHash) Add(peers ...*Peer) error {
	c.admin.Lock()
	defer c.admin.Unlock()
	if err := checkRing(peers, c.Peers(), 0); err != nil {
		return err
	}
	return c.peerSet.Add(peers...)
}

// SetWeight also refuses a total weight past MaxRingWeight, with
// ErrInvalidConfig. The ring is rebuilt.
func (c *ConsistentHash) SetWeight(p *Peer, w int) error {
	c.admin.Lock()
	defer c.admin.Unlock()
	others := make([]*Peer, 0, len(c.load().primary))
	for _, q := range c.load().primary {
		if q != p {
			others = append(others, q)
		}
	}
	if w >= 0 && p != nil && p.owner.Load() == &c.peerSet { // else peerSet reports the peer
		if err := checkRing(nil, others, w); err != nil {
			return err
		}
	}
	return c.peerSet.SetWeight(p, w)
}

// Update also refuses a total weight past MaxRingWeight, with
// ErrInvalidConfig. The ring is rebuilt.
func (c *ConsistentHash) Update(snapshot []*Peer) error {
	c.admin.Lock()
	defer c.admin.Unlock()
	if err := checkRing(snapshot, nil, 0); err != nil {
		return err
	}
	return c.peerSet.Update(snapshot)
}

// changedLocked rebuilds the ring unless the peers and their weights are
// those it was built from.
func (c *ConsistentHash) changedLocked(l *peerList) {
	c.live = 0
	for _, p := range l.primary {
		if !p.down.Load() {
			c.live += p.weight.Load()
		}
	}
	if g := c.ring; g != nil && slices.Equal(g.peers, l.primary) &&
		slices.EqualFunc(g.weights, l.primary, func(w int64, p *Peer) bool { return w == p.weight.Load() }) {
	} else {
		c.ring = buildRing(l.primary)
	}
	if c.bound != 0 {
		// The bound's total over the peers now held: a removed peer's
		// attempts leave it (their reports no longer count, see Done),
		// an added peer's join it.
		c.inflight = 0
		for _, p := range l.primary {
			c.inflight += p.inFlight()
		}
	}
	c.view.Store(&chashView{list: l, ring: c.ring, fast: c.bound == 0 && !l.single && len(c.ring.points) > 0})
	c.smoothRR.changedLocked(l)
}

// buildRing is ngx_http_upstream_init_chash (nginx 1.22.1) over peers,
// down ones included: for each peer, host and port from splitServer,
//
//	base = crc32_update(host ‖ "\0" ‖ port), prev = 0
//	repeat weight·160 times: h = crc32_final(crc32_update(base, le32(prev)))
//	                         add point (h, server); prev = h
//
// then the points sorted by hash, a point dropped when its hash equals the
// previous one's. Go's crc32.Update finalizes and resumes, so Update(base,
// le32(prev)) is nginx's update-then-final of the unfinalized base. Points
// are sorted as hash<<32 | group and groups are numbered in order of first
// appearance, so of the points sharing a hash the one kept is the first
// peer's in list order (nginx sorts with an unstable qsort, so for two
// servers whose points collide its choice is unspecified).
func buildRing(peers []*Peer) *chashRing {
	g := &chashRing{peers: peers, weights: make([]int64, len(peers))}
	groupOf := make(map[string]int32, len(peers))
	gid := make([]int32, len(peers))
	var total int64
	for i, p := range peers {
		k := p.HashText()
		id, ok := groupOf[k]
		if !ok {
			id = int32(len(groupOf))
			groupOf[k] = id
		}
		gid[i] = id
		g.weights[i] = p.weight.Load()
		total += g.weights[i]
	}
	g.start = make([]int32, len(groupOf)+1)
	for _, id := range gid {
		g.start[id+1]++
	}
	for k := 1; k < len(g.start); k++ {
		g.start[k] += g.start[k-1]
	}
	g.members = make([]int32, len(peers))
	next := slices.Clone(g.start[:len(groupOf)])
	for i, id := range gid {
		g.members[next[id]] = int32(i)
		next[id]++
	}

	g.points = make([]uint64, 0, total*chashPointsPerWeight)
	for i, p := range peers {
		host, port := splitServer(p.HashText())
		base := crc32String(0, host)
		base = crc32.Update(base, crc32.IEEETable, []byte{0})
		base = crc32String(base, port)
		var prev uint32
		for range g.weights[i] * chashPointsPerWeight {
			// crc32.Update(base, le32(prev)), byte by byte over the
			// table: four bytes do not pay for its dispatch.
			crc := ^base
			for k := range 4 {
				crc = crc32.IEEETable[byte(crc)^byte(prev>>(8*k))] ^ crc>>8
			}
			h := ^crc
			g.points = append(g.points, uint64(h)<<32|uint64(gid[i]))
			prev = h
		}
	}
	slices.Sort(g.points)
	g.points = slices.CompactFunc(g.points, func(a, b uint64) bool { return a>>32 == b>>32 })
	g.points = slices.Clip(g.points)
	g.solo = len(g.start) == len(peers)+1
	g.buildIndex()
	return g
}

// chashIndexMaxBits bounds the search index at 2^16 entries of 4 bytes,
// 256 KB, next to the ring's 8 bytes a point (12.8 MB at 1.6 million).
const chashIndexMaxBits = 16

// buildIndex fills the search index: about one entry per 4 points, at most
// 2^chashIndexMaxBits, each the first point whose hash's top bits are at
// least the entry's number.
func (g *chashRing) buildIndex() {
	b := min(max(bits.Len(uint(len(g.points)))-2, 0), chashIndexMaxBits)
	g.shift = uint(32 - b)
	g.index = make([]uint32, 1<<b+1)
	k := 0
	for e := range g.index {
		for k < len(g.points) && g.points[k]>>32>>g.shift < uint64(e) {
			k++
		}
		g.index[e] = uint32(k)
	}
}

// find is ngx_http_upstream_find_chash_point: the index of the first point
// whose hash is at least h, len(points) if none (a position the walk takes
// modulo len(points), so it wraps to the first). The index narrows the
// search to the points sharing h's top bits (any point before them has a
// smaller hash, any after a larger one), which it bisects without branches.
func (g *chashRing) find(h uint32) int {
	x := uint64(h) << 32
	b := h >> g.shift
	base, n := int(g.index[b]), int(g.index[b+1]-g.index[b])
	// Invariant: the answer is in [base, base+n].
	for n > 1 {
		half := n >> 1
		if g.points[base+half-1] < x {
			base += half
		}
		n -= half
	}
	if n == 1 && g.points[base] < x {
		base++
	}
	return base
}

// chashView is a ring with the list it serves, published for the lock-free
// first attempt; fast reports that the attempt may use it.
type chashView struct {
	list *peerList
	ring *chashRing
	fast bool // keyed picks of the list may skip the lock: see Pick
}

// Pick returns the peer of the first point at or after r's key on the ring
// that is eligible (and, with BoundedLoad, has room).
//
// A first attempt whose point belongs to a server text with one peer, that
// peer up with no failures on record, takes no lock while no peer's
// effective weight is below its weight: nginx's smooth step over that one
// eligible peer adds its effective weight to its current weight and gives
// the same total back, and its effective weight, at its weight, does not
// move, so the step changes nothing and the pick is the point's peer. Any
// other case (a retry, a peer to skip, a shared server text, the load
// bound, the single-server rule) runs the walk under the lock.
func (c *ConsistentHash) Pick(r *Request) (*Peer, error) {
	if (r == nil || r.key == "") && c.bound == 0 {
		return c.roundRobin(r)
	}
	if r != nil && r.attempts == 0 && r.key != "" {
		if v := c.view.Load(); v.fast {
			g := v.ring
			pos := g.find(crc32String(0, r.key))
			at := pos
			if at == len(g.points) {
				at = 0 // the walk wraps
			}
			grp := uint32(g.points[at])
			i := int(grp)
			if !g.solo {
				i = -1
				if g.start[grp+1]-g.start[grp] == 1 {
					i = int(g.members[g.start[grp]])
				}
			}
			if i >= 0 {
				p := v.list.primary[i]
				if p.fails.Load() == 0 && !p.recovering.Load() && !p.down.Load() && p.acquire() {
					r.hs = hashState{hash: uint64(pos), begun: true}
					return fastFirst(v.list, r, i, p)
				}
			}
		}
	}
	return c.pickLocked(r)
}

// pickLocked is Pick under the lock.
func (c *ConsistentHash) pickLocked(r *Request) (*Peer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	g := c.ring
	clk := lazyClock{now: c.now}
	l := c.load()
	p, err := pickFrame(l, r, func(_ []*Peer, _ bool) int {
		if r == nil || r.key == "" || len(g.points) == 0 {
			return c.fallbackLocked(l, r, &clk)
		}
		hs, fresh := r.hashState(nil)
		if fresh {
			hs.hash = uint64(g.find(crc32String(0, r.key)))
		}
		if hs.tries > maxHashTries {
			return c.fallbackLocked(l, r, &clk)
		}
		return c.walkLocked(l, r, g, &clk)
	})
	if err == nil && c.bound != 0 {
		c.inflight++
	}
	return p, err
}

// walkLocked is the loop of ngx_http_upstream_get_chash_peer: at the point
// r.hs.hash (mod the number of points), nginx's smooth step among the
// eligible untried peers of the point's group; if there is none, the next
// point, a try; past 20 tries, round robin. With a load bound, a point
// whose eligible peers are all full is passed without a try, for at most
// one turn of the ring. Requires c.mu.
//
// The step over a point's one peer moves no weight while that peer is at
// full effective weight (it adds its effective weight and gives the same
// total back), so it leaves the round-robin fallback's cycle and groups
// alone; a point shared by several peers moves theirs, which are then
// given back their own current weights first (ownLocked).
func (c *ConsistentHash) walkLocked(l *peerList, r *Request, g *chashRing, clk *lazyClock) int {
	peers := l.primary
	n := uint64(len(g.points))
	var spare uint64 // points passed for the bound alone
	for {
		grp := uint32(g.points[r.hs.hash%n])
		var best *Peer
		var total int64
		full := false
		members := g.members[g.start[grp]:g.start[grp+1]]
		if len(members) > 1 {
			for _, i := range members {
				c.ownLocked(l, i)
			}
		}
		for _, i := range members {
			p := peers[i]
			if r.isTried(int(i)) || !p.eligible(clk) {
				continue
			}
			if c.bound != 0 && c.overLocked(p) {
				full = true
				continue
			}
			total += smoothStep(p)
			if best == nil || p.currentWeight > best.currentWeight {
				best = p
			}
		}
		if best != nil {
			best.currentWeight -= total
			if i := takeLocked(best, clk); i >= 0 {
				return i
			}
			// A lock-free first attempt filled it since the check: the
			// point is passed as for a full peer.
		}
		r.hs.hash++
		if full && spare < n {
			spare++
			continue
		}
		if r.hs.tries++; r.hs.tries > maxHashTries {
			return c.fallbackLocked(l, r, clk)
		}
	}
}

// overLocked reports whether p holds its bounded share already: at least
// ⌈c·(T+1)·w/L⌉ attempts in flight (see BoundedLoad). Requires c.mu.
func (c *ConsistentHash) overLocked(p *Peer) bool {
	t := c.inflight
	limit := math.Ceil(c.bound * float64(t+1) * float64(p.weight.Load()) / float64(max(c.live, 1)))
	return float64(p.inFlight()) >= limit
}

// Done takes the picker's lock for every report while the load bound is
// on (BoundedLoad), which counts the attempts in flight on the picker.
func (c *ConsistentHash) Done(p *Peer, o Outcome) error {
	if c.bound == 0 {
		return c.report(p, o)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	held := p != nil && p.owner.Load() == &c.peerSet
	if err := c.finish(p, o); err != nil {
		return err
	}
	if held {
		c.inflight-- // a removed peer's attempts left the total with it
	}
	if o.Failed || p.needsLockOnSuccess() {
		c.reportLocked(p, o)
	}
	return nil
}

// ConsistentHashSettings are ConsistentHash's own settings; New builds a
// ConsistentHash with them. The zero value is the default: no bound,
// nginx's behavior. A value out of range is ErrInvalidConfig naming the
// field and the value.
type ConsistentHashSettings struct {
	// BoundedLoad bounds each peer's load, as in "Consistent Hashing with
	// Bounded Loads" (Mirrokni, Thorup and Zadimoghaddam, 2016; HAProxy's
	// hash-balance-factor, Envoy's hash_balance_factor): a peer of weight
	// w takes an attempt only while it has fewer than ⌈c·(T+1)·w/L⌉ in
	// flight, c the factor, T the attempts in flight on the picker and L
	// the weight of the peers not down (⌈c·(T+1)/n⌉ for equal weights),
	// and a key whose point lands on a full peer walks on along the ring
	// to the next point with room, without counting a try. So no peer
	// holds more than c times its share (plus the rounding up), a hot key
	// spills over to the next peers on its ring walk, and keys still move
	// little when peers change. The bound does not apply to the
	// round-robin fallback. At least 1 and finite; 0: no bound.
	BoundedLoad float64
}

// New returns a ConsistentHash over peers with the settings s. opts: the
// shared options (see Option).
func (s ConsistentHashSettings) New(peers []*Peer, opts ...Option) (*ConsistentHash, error) {
	return NewConsistentHash(peers, append([]Option{s.Option()}, opts...)...)
}

// Option returns s as an Option, for a ConsistentHash built by name
// (Algorithm.New), as balancerflag's flags and the gRPC configs build
// one: ConsistentHash's constructors apply it where it stands among opts,
// and every other picker refuses it. Name the picker statically with New.
func (s ConsistentHashSettings) Option() Option {
	return ownOption(consistentHashSpec.settings, func(c *boundSetting) {
		field(&c.own, "ConsistentHashSettings.BoundedLoad", s.BoundedLoad, false)
	})
}

// boundSetting is ConsistentHash's own setting, the bound's factor, as
// given.
type boundSetting struct{ own[float64] }

// WithBoundedLoad sets ConsistentHashSettings.BoundedLoad to c.
//
// Deprecated: use ConsistentHashSettings.BoundedLoad.
func WithBoundedLoad(c float64) Option {
	return ownOption("WithBoundedLoad", func(s *boundSetting) { s.give("WithBoundedLoad", c) })
}
