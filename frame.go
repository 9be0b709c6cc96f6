package balancer

import "errors"

// handOff is what choose returns when it hands the request to another
// frame (the hash and random methods falling back to round robin) instead
// of finding no live peer: pickFrame then returns errHandOff, which the
// caller answers with the other frame (peerSet.roundRobin), and counts
// nothing in PickerStats.NoLivePeer.
const handOff = -2

// errHandOff is pickFrame's answer to handOff; it never leaves a picker.
var errHandOff = errors.New("balancer: handed off to round robin")

// fastFirst ends a lock-free fast path: p, primary i of l, has its attempt
// counted in flight for the fresh request r (nil, or on its first
// attempt), which it records as pickFrame would: begin fixes r's bound on
// retries, which p counts in, and record marks p tried. A fresh request
// needs none of the frame's other steps on a list where p was chosen.
//
// It inlines (go build -gcflags=-m), so a nil r costs one test; a Request
// costs one call, to startFirst.
func fastFirst(l *peerList, r *Request, i int, p *Peer) (*Peer, error) {
	if r != nil {
		r.startFirst(l, i)
	}
	return p, nil
}

// startFirst records the first attempt of r, on primary i of l.
func (r *Request) startFirst(l *peerList, i int) {
	r.begin(l)
	r.record(i)
}

// pickFrame is the frame of nginx's ngx_http_upstream_get_round_robin_peer
// (RR.c 430-518), which every picker runs around its own choice of peer:
//
//  1. no peers: ErrNoPeers;
//  2. a request past its bound on attempts: ErrTriesExhausted (the first
//     attempt always proceeds, and fixes the bound; see Request.begin);
//  3. one primary and no backup: nginx's single-server rule, which reads
//     only down and max_conns and ignores failures and weights;
//  4. the primaries, unless the request has moved to the backups;
//  5. the backups, once no primary is eligible: the request moves to them
//     for the rest of its attempts;
//  6. nothing eligible: ErrNoLivePeer.
//
// choose picks among one list, primaries or backups, skipping the peers r
// has tried (r.isTried is false for a nil r): it returns the index in peers
// of the peer chosen, with its attempt already counted in flight, or -1.
// The index comes from the list the frame was given, not from Peer.index,
// which a concurrent change may already have renumbered. pickFrame records
// the attempt in r; a nil r is a request that is never retried, so it has
// nothing to record.
//
// Lock-free pickers call it with no lock; locked pickers with theirs held.
// A picker's fast path (a precomputed cycle, a first draw) may run ahead of
// the frame where a benchmark shows the frame's cost; each says so.
func pickFrame(l *peerList, r *Request, choose func(peers []*Peer, backup bool) int) (*Peer, error) {
	if l.empty() {
		return nil, ErrNoPeers
	}
	if r != nil && !r.begin(l) {
		return nil, ErrTriesExhausted
	}
	peers, i := l.primary, -1
	switch {
	case l.single:
		if p := l.primary[0]; !p.down.Load() && p.acquire() {
			i = 0
		}
	case r == nil || !r.backup:
		if i = choose(peers, false); i >= 0 || len(l.backup) == 0 {
			break
		}
		if r != nil {
			r.switchToBackup()
		}
		fallthrough
	default:
		peers = l.backup
		i = choose(peers, true)
	}
	switch {
	case i == handOff:
		return nil, errHandOff
	case i < 0:
		l.noLive.Add(1)
		return nil, ErrNoLivePeer
	}
	if r != nil {
		r.record(i)
	}
	return peers[i], nil
}
