package balancer

import (
	"fmt"
	"hash/crc32"
	"net/netip"
	"strings"
	"unsafe"
)

// SetKey sets the key the hash pickers (Hash, ConsistentHash) hash for r:
// nginx's `hash KEY` value, such as a user id or a URL. Requests with the
// same key go to the same peer while it is eligible. An empty key (the
// default) makes those pickers fall back to smooth round-robin, as nginx
// does. SetKey keeps s itself, so it allocates nothing; Reset clears it. The
// other pickers ignore the key.
func (r *Request) SetKey(s string) { r.key = s }

// Key returns the key set by SetKey.
func (r *Request) Key() string { return r.key }

// SetAddr sets the client address IPHash hashes for r, nginx's
// $remote_addr: the first three bytes of an IPv4 address, all sixteen of an
// IPv6 one (an IPv4-mapped IPv6 address counts as IPv6, as nginx's socket
// family decides). The zero netip.Addr (the default) stands for a client
// that is neither, such as a unix socket, which nginx hashes as three zero
// bytes. SetAddr allocates nothing; Reset clears it. The other pickers
// ignore the address.
func (r *Request) SetAddr(a netip.Addr) { r.addr = a }

// Addr returns the client address set by SetAddr.
func (r *Request) Addr() netip.Addr { return r.addr }

// hashState is the per-request state of the hash and random pickers, what
// nginx keeps in its per-request peer data (ngx_http_upstream_hash_peer_data_t
// and its ip_hash and random counterparts), so that a retry continues the
// sequence the first attempt started. It is reset at a request's first
// attempt (Request.attempts == 0).
type hashState struct {
	// Hash: the running sum of the 15-bit hashes (hp->hash). IPHash: the
	// running ip hash (iphp->hash). ConsistentHash: the ring position
	// (hp->hash), a point index that grows without wrapping.
	hash uint64
	// Hash: the iterations so far, the REHASH prefix (hp->rehash).
	rehash uint64
	// Iterations or draws that found no eligible peer (hp->tries, distinct
	// from the retry bound); past maxHashTries the picker hands the
	// request to round robin.
	tries int32
	begun bool // hash and rehash hold the request's state
}

// maxHashTries is nginx's bound on a hash, ip_hash or random pick's
// iterations: when tries passes it, the request goes to round robin.
const maxHashTries = 20

// hashState returns r's hash state, reset at its first attempt, or spare,
// reset, for a nil r, a request that is never retried. It reports whether
// the state is fresh, for a picker to seed it.
func (r *Request) hashState(spare *hashState) (hs *hashState, fresh bool) {
	if r == nil {
		*spare = hashState{begun: true}
		return spare, true
	}
	if r.attempts == 0 || !r.hs.begun {
		r.hs = hashState{begun: true}
		return &r.hs, true
	}
	return &r.hs, false
}

// crc32String is crc32.Update over the bytes of s, without copying them.
func crc32String(crc uint32, s string) uint32 {
	return crc32.Update(crc, crc32.IEEETable, unsafe.Slice(unsafe.StringData(s), len(s)))
}

// HashKey sets the text ConsistentHash hashes for the peer: the server as
// written in nginx's configuration, which may differ from the address the
// peer is dialed at (`server 10.0.0.1;` hashes "10.0.0.1", while the peer
// is at 10.0.0.1:80). Peers that share a hash key share their ring points,
// as the addresses one nginx server name resolves to do, and smooth
// round-robin chooses among them. Default: the peer's address. An empty
// text is rejected with ErrInvalidConfig when the peer is added.
func HashKey(text string) PeerOption {
	return func(p *Peer) {
		if text == "" {
			p.invalid(fmt.Errorf("balancer: peer %q: empty hash key: %w", p.addr, ErrInvalidConfig))
			return
		}
		p.hashKey = text
	}
}

// HashKey returns the text ConsistentHash hashes for p: the one given with
// the HashKey option, or the peer's address.
func (p *Peer) HashKey() string {
	if p.hashKey != "" {
		return p.hashKey
	}
	return p.addr
}

// splitServer splits a server text as nginx's ketama does
// (ngx_http_upstream_init_chash of nginx 1.22.1): "unix:PATH" (any case) is
// host PATH and no port; otherwise a run of digits at the end preceded by
// ':' is the port and what comes before is the host; anything else is all
// host. So "10.0.0.1:80" is ("10.0.0.1", "80"), "10.0.0.1" and "[::1]" are
// all host, and "[::1]:80" is ("[::1]", "80").
func splitServer(s string) (host, port string) {
	if len(s) >= 5 && strings.EqualFold(s[:5], "unix:") {
		return s[5:], ""
	}
	for j := len(s) - 1; j >= 0; j-- {
		c := s[j]
		if c == ':' {
			return s[:j], s[j+1:]
		}
		if c < '0' || c > '9' {
			break
		}
	}
	return s, ""
}

// refuseBackups returns ErrInvalidConfig naming the first backup peer:
// nginx refuses `backup` with hash, ip_hash and random ("balancing method
// does not support parameter backup").
func refuseBackups(picker string, peers []*Peer) error {
	for _, p := range peers {
		if p != nil && p.backup.Load() {
			return fmt.Errorf("balancer: %s: peer %q: backup is not supported by this balancing method: %w", picker, p.addr, ErrInvalidConfig)
		}
	}
	return nil
}

// roundRobin hands r to nginx's smooth round-robin, as the hash and random
// methods do (get_rr_peer) for an empty key, a total weight of 0 or past 20
// fruitless tries; their lock-free picks return handOff to their frame and
// then call it. A first attempt is served from the precomputed cycle
// without the lock while it is open, as SmoothWRR serves it; otherwise the
// frame runs again, under the lock, on the list current there, around
// fallbackLocked.
func (s *smoothRR) roundRobin(r *Request) (*Peer, error) {
	if r.fresh() {
		if c := s.cycle.Load(); c != nil {
			// The cycle's next slot, or -1 for a closed cycle. While it
			// is open no peer has max_conns, so none can be full.
			if i := c.slot(c.ctr.Add(1)); i >= 0 {
				p := c.list.primary[i]
				p.pick()
				if r != nil {
					r.begin(c.list)
					r.record(int(i))
				}
				return p, nil
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	clk := lazyClock{now: s.now}
	l := s.load()
	return pickFrame(l, r, func(_ []*Peer, _ bool) int {
		return s.fallbackLocked(l, r, &clk)
	})
}

// fallbackLocked is nginx's ngx_http_upstream_get_round_robin_peer as the
// hash and random methods call it, on the same per-request state, past the
// single-server rule pickFrame applies: the smooth scan over l's primaries
// (there are no backups), sharing every peer's current and effective
// weights, as SmoothWRR runs it: from the cycle for a first attempt while
// it is open, else grouped by weight or plain. l is the current list. It
// returns the index of the peer taken, or -1. Requires s.mu.
//
// The cycle is tried for the first time at a list's first fallback, not at
// every change, so that a picker whose requests all hash never builds one.
func (s *smoothRR) fallbackLocked(l *peerList, r *Request, clk *lazyClock) int {
	if s.openedFor != l {
		s.openedFor = l
		s.maybeOpenLocked(l)
	}
	fresh := r.fresh()
	if c := s.cycle.Load(); c != nil && fresh {
		if i := c.slot(c.ctr.Add(1)); i >= 0 {
			c.list.primary[i].pick()
			return int(i)
		}
	}
	s.closeLocked()
	for {
		p := s.scanPrimaryLocked(l, r, clk)
		if p == nil {
			s.recFor = nil // the scan moved weights: not a step of the period
			return -1
		}
		// A lock-free pick of the owner may have filled p's max_conns
		// since the scan read it: scan again, p now full.
		if p.acquire() {
			s.scannedLocked(l, p, fresh)
			return p.index
		}
	}
}

// ownLocked gives primary i of l its current weight back in its own field,
// before code other than the scan moves it (ConsistentHash's smooth step
// among the peers of one hash key): the cycle closes, the recorder stops,
// and a peer the groups hold leaves them until a scan finds it regular
// again. Requires s.mu.
func (s *smoothRR) ownLocked(l *peerList, i int32) {
	s.closeLocked()
	s.recFor = nil
	if g := s.groups; g != nil && g.list == l && g.of[i] >= 0 {
		g.demote(i)
	}
}

// takeLocked counts p, found eligible by a hash picker under the owner's
// lock, in flight by acquire (a lock-free first attempt may have filled it
// since), starts its probe window if its fail window has passed (nginx's
// `checked = now`, skipped for a peer with no failures on record, whose
// check time nothing reads; see scanSmooth), and returns its index, or -1
// if it was full.
func takeLocked(p *Peer, clk *lazyClock) int {
	if !p.acquire() {
		return -1
	}
	if p.fails.Load() != 0 {
		p.probeLocked(clk.get())
	}
	return p.index
}
