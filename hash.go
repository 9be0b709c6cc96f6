package balancer

import (
	"hash/crc32"
	"sync/atomic"
)

// Hash in detail. Each iteration hashes the key, prefixed from the second
// on by the iteration number, with CRC-32, adds bits 16-30 of it to a
// running sum and takes the sum modulo the total weight (down peers
// included) to a peer along the cumulative weights, so a peer of weight w
// gets w/W of the keys. A peer that is down, inside its fail window, at
// max_conns or already tried by the request makes it iterate again; the sum
// lives in the Request, so a retry continues the same sequence, as in nginx.
// After 20 fruitless iterations, and for an empty key, a nil Request, a
// single peer or a total weight of 0, the request goes to nginx's smooth
// round-robin over the same peers and current weights. A peer of weight 0
// is never hashed to.
//
// The round-robin fallback is SmoothWRR's engine (smoothRR; the fallback
// is in nginx_rr.go): a first attempt is served from the precomputed
// cycle, without the lock, while every peer that is not down is healthy
// at full weight with no max_conns and the weights sum to at most maxCycle
// (the conditions under which SmoothWRR serves its cycle); otherwise the
// scan runs under the lock, grouped by weight from 16 peers on. The cycle
// is built at a list's first fallback, so a picker whose requests all
// carry a key never builds one.

// Hash is nginx's `hash KEY` (nginx 1.22.1), the Cache::Memcached-compatible
// key hash: requests with the same key (Request.SetKey) go to the same peer
// while the peer list is unchanged and that peer is eligible; a retry
// continues the key's rehash sequence, and after 20 fruitless steps, or with
// no key, the request goes to smooth round-robin, as in nginx. Use it for
// affinity over a fixed list; where the list changes, ConsistentHash moves
// far fewer keys. Failures, max_fails, fail_timeout, down, max_conns and
// retries follow nginx; backup peers are refused with ErrInvalidConfig, as
// nginx refuses them.
//
// A pick is O(log n) a step and lock-free. The round-robin fallback is
// SmoothWRR's: O(1) and lock-free for a first attempt while the weights
// are static (every peer not down healthy at full weight, no max_conns, the
// weights summing to at most 65,536), otherwise a scan under the
// picker's lock, O(d + k + log n) from 16 peers as SmoothWRR's. A pick
// allocates nothing. The zero value is not usable; use NewHash. Hash is
// safe for concurrent use.
type Hash struct{ walkPicker }

// walkPicker is what Hash and IPHash share: the weight walk, rebuilt on
// every change of the peers, and the round-robin fallback.
type walkPicker struct {
	smoothRR
	walk atomic.Pointer[weightWalk]
}

// setup builds the picker over peers; the hash methods share the smooth
// fallback's current weights with their peers.
func (h *walkPicker) setup(peers []*Peer, cfg config) error {
	h.shared, h.currentWeight = true, h.impliedLocked
	return h.init(peers, cfg, func(l *peerList) {
		h.walk.Store(newWeightWalk(l))
		h.changedLocked(l)
	})
}

// weightWalk is nginx's walk from a weight offset to a peer: `while (w >=
// peer->weight) { w -= peer->weight; peer = peer->next; }` lands on the
// first peer i whose cumulative weight cum[i] (weights 0..i summed) passes
// w, which a binary search finds in O(log n). Peers of weight 0 add nothing
// to the sum and are never landed on.
// A walk is an immutable snapshot of one peer list, read by lock-free
// picks.
type weightWalk struct {
	list  *peerList
	cum   []int64
	total int64
}

// newWeightWalk returns the walk over l's primaries (the hash methods have
// no backups).
func newWeightWalk(l *peerList) *weightWalk {
	w := &weightWalk{list: l, cum: make([]int64, len(l.primary))}
	for i, p := range l.primary {
		w.total += p.weight.Load()
		w.cum[i] = w.total
	}
	return w
}

// find returns the peer index for an offset x < total.
func (w *weightWalk) find(x int64) int {
	lo, hi := 0, len(w.cum)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if w.cum[m] > x {
			hi = m
		} else {
			lo = m + 1
		}
	}
	return lo
}

// hashSpec is Hash's declaration (see pickerSpec).
var hashSpec = pickerSpec{name: "Hash", keyed: true, noBackups: true}

// NewHash returns a Hash over peers. opts: the shared options (see
// Option). A backup peer is rejected with ErrInvalidConfig naming it.
func NewHash(peers []*Peer, opts ...Option) (*Hash, error) {
	cfg, err := newConfig(hashSpec, opts)
	if err != nil {
		return nil, err
	}
	h := &Hash{}
	if err := h.setup(peers, cfg); err != nil {
		return nil, err
	}
	return h, nil
}

// Pick returns the peer r's key hashes to, or the next one in the key's
// sequence when that one is not eligible.
func (h *Hash) Pick(r *Request) (*Peer, error) {
	w := h.walk.Load()
	clk := lazyClock{now: h.now}
	p, err := pickFrame(w.list, r, func(peers []*Peer, _ bool) int {
		if r == nil || r.key == "" || w.total == 0 {
			return handOff
		}
		if hs, _ := r.hashState(nil); hs.tries > maxHashTries {
			return handOff
		}
		return hashWalk(w, peers, r, &clk)
	})
	if err == errHandOff {
		return h.roundRobin(r)
	}
	return p, err
}

// hashWalk is the loop of ngx_http_upstream_get_hash_peer:
//
//	h = crc32([REHASH] KEY)          // REHASH: decimal, omitted while 0
//	hash += (h >> 16) & 0x7fff; rehash++
//	w = hash % total_weight          // then the weight walk
//
// iterating while the peer is tried or not eligible, each such iteration a
// try; past 20 tries it returns handOff, for round robin. Lock-free: the
// walk is a snapshot, the state is the request's, and take claims the
// peer's slot and probe atomically, a peer a concurrent pick has just
// filled counting as a try, as a full peer does.
func hashWalk(w *weightWalk, peers []*Peer, r *Request, clk *lazyClock) int {
	for {
		var c uint32
		if r.hs.rehash > 0 {
			c = crc32Decimal(r.hs.rehash)
		}
		c = crc32String(c, r.key)
		r.hs.hash += uint64(c>>16) & 0x7fff
		r.hs.rehash++
		i := w.find(int64(r.hs.hash % uint64(w.total)))
		if p := peers[i]; !r.isTried(i) && p.eligible(clk) && p.take(clk) {
			return i
		}
		if r.hs.tries++; r.hs.tries > maxHashTries {
			return handOff
		}
	}
}

// crc32Decimal returns the CRC-32 of v's decimal text, nginx's "%ui"
// REHASH, byte by byte over the IEEE table: crc32.Update would take the
// digits' buffer to the heap.
func crc32Decimal(v uint64) uint32 {
	var digits [20]byte
	k := len(digits)
	for {
		k--
		digits[k] = byte('0' + v%10)
		if v /= 10; v == 0 {
			break
		}
	}
	crc := ^uint32(0)
	for _, b := range digits[k:] {
		crc = crc32.IEEETable[byte(crc)^b] ^ crc>>8
	}
	return ^crc
}

// Done implements Picker.Done.
func (h *Hash) Done(p *Peer, o Outcome) error { return h.report(p, o) }
