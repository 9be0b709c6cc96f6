package balancer

import (
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
// other pickers ignore the key. In this package a key is always a
// request's; what a peer is hashed by is its HashText.
func (r *Request) SetKey(s string) { r.key = s }

// Key returns the key set by SetKey.
func (r *Request) Key() string { return r.key }

// SetClientAddr sets the client address IPHash hashes for r, nginx's
// $remote_addr: the first three bytes of an IPv4 address, all sixteen of an
// IPv6 one (an IPv4-mapped IPv6 address counts as IPv6, as nginx's socket
// family decides). The zero netip.Addr (the default) stands for a client
// that is neither, such as a unix socket, which nginx hashes as three zero
// bytes. SetClientAddr allocates nothing; Reset clears it. The other
// pickers ignore the address. (Peer.Addr is the other end: the server's.)
func (r *Request) SetClientAddr(a netip.Addr) { r.addr = a }

// ClientAddr returns the client address set by SetClientAddr.
func (r *Request) ClientAddr() netip.Addr { return r.addr }

// SetAddr sets the client address IPHash hashes for r.
//
// Deprecated: use SetClientAddr; Addr named the client on a Request and
// the server on a Peer.
func (r *Request) SetAddr(a netip.Addr) { r.SetClientAddr(a) }

// Addr returns the client address set by SetClientAddr.
//
// Deprecated: use ClientAddr; Addr named the client on a Request and the
// server on a Peer.
func (r *Request) Addr() netip.Addr { return r.ClientAddr() }

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
