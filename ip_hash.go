package balancer

import (
	"net/netip"
)

// IPHash in detail. The hash starts at 89; each iteration folds the
// address bytes in, hash = (hash·113 + byte) mod 6271, and takes hash mod
// the total weight (down peers included) along the cumulative weights to a
// peer. A peer that is down, inside its fail window, at max_conns or already
// tried makes it iterate again, the hash going on from where it was; the
// hash lives in the Request, so a retry continues the sequence, as in
// nginx. After 20 fruitless iterations, for a single peer or a total weight
// of 0, the request goes to nginx's smooth round-robin over the same peers
// and current weights.

// IPHash is nginx's ip_hash (nginx 1.22.1): requests from one client
// address (Request.SetClientAddr) go to the same peer while the peer list is
// unchanged and that peer is eligible. Only the first three bytes of an
// IPv4 address count, so a /24 shares a peer; an IPv6 address counts whole.
// A request with no address, or a nil one, hashes as nginx hashes a client
// that is not IP (a unix socket), so all such requests share a peer: there
// is no round-robin fallback for a missing address. Use it for session
// affinity without a key of your own. Failures, down, max_conns and retries
// follow nginx; backup peers are refused with ErrInvalidConfig.
//
// A pick is O(log n) a step and lock-free; the round-robin fallback is
// Hash's, O(1) and lock-free while the weights are static. A pick
// allocates nothing. The zero value is not usable; use NewIPHash. IPHash
// is safe for concurrent use.
type IPHash struct{ walkPicker }

// ipHashStart is nginx's initial iphp->hash.
const ipHashStart = 89

// ipHashSpec is IPHash's declaration (see pickerSpec).
var ipHashSpec = pickerSpec{name: "IPHash", keyed: true, noBackups: true}

// NewIPHash returns an IPHash over peers. opts: the shared options (see
// Option). A backup peer is rejected with ErrInvalidConfig naming it.
func NewIPHash(peers []*Peer, opts ...Option) (*IPHash, error) {
	cfg, err := newConfig(ipHashSpec, opts)
	if err != nil {
		return nil, err
	}
	h := &IPHash{}
	if err := h.setup(peers, cfg); err != nil {
		return nil, err
	}
	return h, nil
}

// Pick returns the peer r's client address hashes to, or the next one in
// the address's sequence when that one is not eligible.
func (h *IPHash) Pick(r *Request) (*Peer, error) {
	w := h.walk.Load()
	clk := lazyClock{now: h.now}
	var spare hashState
	p, err := pickFrame(w.list, r, func(peers []*Peer, _ bool) int {
		hs, fresh := r.hashState(&spare)
		if fresh {
			hs.hash = ipHashStart
		}
		if w.total == 0 || hs.tries > maxHashTries {
			return handOff
		}
		return ipHashWalk(w, peers, r, hs, &clk)
	})
	if err == errHandOff {
		return h.roundRobin(r)
	}
	return p, err
}

// ipKey returns the bytes ip_hash folds in for r's address: three of an
// IPv4 address, sixteen of an IPv6 one (IPv4-mapped included), three zero
// bytes for none.
func ipKey(r *Request) (b [16]byte, n int) {
	var a netip.Addr
	if r != nil {
		a = r.addr
	}
	switch {
	case a.Is4():
		v4 := a.As4()
		copy(b[:], v4[:3])
		return b, 3
	case a.Is6():
		return a.As16(), 16
	}
	return b, 3
}

// ipHashWalk is the loop of ngx_http_upstream_get_ip_hash_peer, lock-free
// as hashWalk is; past 20 tries it returns handOff, for round robin.
func ipHashWalk(w *weightWalk, peers []*Peer, r *Request, hs *hashState, clk *lazyClock) int {
	key, n := ipKey(r)
	hash := hs.hash
	for {
		for _, b := range key[:n] {
			hash = (hash*113 + uint64(b)) % 6271
		}
		hs.hash = hash
		i := w.find(int64(hash % uint64(w.total)))
		if p := peers[i]; !r.isTried(i) && p.eligible(clk) && p.take(clk) {
			return i
		}
		if hs.tries++; hs.tries > maxHashTries {
			return handOff
		}
	}
}

// Done implements Picker.Done.
func (h *IPHash) Done(p *Peer, o Outcome) error { return h.report(p, o) }
