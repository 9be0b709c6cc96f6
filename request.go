package balancer

import "net/netip"

// Request carries one request's retry state across its attempts, as nginx's
// per-request peer data does: the peers it has already tried (each is tried
// at most once), whether it has moved on to the backup peers, and how many
// attempts it has made.
//
// Pass the same Request to every Pick of one request and call Reset before
// reusing it for another. The zero value is a fresh request. A Request is not
// safe for concurrent use; one request's attempts are sequential.
//
// Up to 64 peers (per list, primary or backup) the tried set lives inside
// the Request and Pick allocates nothing; beyond that it grows once.
//
// If the picker's peers change between two attempts, the request forgets
// which peers it tried (the bound on attempts still holds), and a request
// on the backups of a list that has none left goes back to the primaries.
type Request struct {
	tried    [1]uint64 // bit i: peer i of the current list was tried
	more     []uint64  // bits for peers 64 and up
	gen      uint64    // peer-list generation the bits refer to
	attempts int
	limit    int
	backup   bool

	key  string     // the hash pickers' key; see SetKey (key.go)
	addr netip.Addr // IPHash's client address; see SetClientAddr (key.go)
	hs   hashState  // the hash and random pickers' per-request state
}

// Reset makes r a fresh request, keeping its storage.
func (r *Request) Reset() {
	r.clearTried()
	r.gen, r.attempts, r.limit, r.backup = 0, 0, 0, false
	r.key, r.addr, r.hs = "", netip.Addr{}, hashState{}
}

// Attempts returns how many peers Pick has returned for r.
func (r *Request) Attempts() int { return r.attempts }

// begin prepares r for a pick over list l and reports whether another attempt
// is allowed. The first attempt is always allowed, as nginx always asks for a
// first peer, and fixes the bound on retries: the number of peers that are
// not down, primaries and backups together (nginx's pc->tries). If
// the peer list changed since the previous attempt, the tried bits no longer
// name the same peers, so they are forgotten: a peer tried before the change
// may be tried again (nginx has no such case: its lists change only on a
// reload, which starts new requests). The bound on attempts still holds.
func (r *Request) begin(l *peerList) bool {
	if r.attempts == 0 {
		// A request that has not made an attempt starts afresh, even if
		// an earlier Pick moved it to the backups and found none live.
		r.clearTried()
		r.backup = false
		r.limit = l.tries
		r.gen = l.gen
	} else if r.gen != l.gen {
		r.clearTried()
		r.gen = l.gen
		if len(l.backup) == 0 {
			r.backup = false // no backups left to be on
		}
	}
	return r.attempts == 0 || r.attempts < r.limit
}

// fresh reports whether r has not made an attempt yet (a nil r is fresh).
func (r *Request) fresh() bool { return r == nil || r.attempts == 0 }

// isTried reports whether r has tried peer i of the current list; a nil r
// has tried nothing.
func (r *Request) isTried(i int) bool {
	if r == nil {
		return false
	}
	if i < 64 {
		return r.tried[0]&(1<<uint(i)) != 0
	}
	w := i/64 - 1
	return w < len(r.more) && r.more[w]&(1<<uint(i%64)) != 0
}

func (r *Request) markTried(i int) {
	if i < 64 {
		r.tried[0] |= 1 << uint(i)
		return
	}
	w := i/64 - 1
	for len(r.more) <= w {
		r.more = append(r.more, 0)
	}
	r.more[w] |= 1 << uint(i%64)
}

func (r *Request) clearTried() {
	r.tried[0] = 0
	clear(r.more)
}

// switchToBackup moves r to the backup list; nginx clears the tried bitmap
// when it does so, since bit i now names backup peer i.
func (r *Request) switchToBackup() {
	r.backup = true
	r.clearTried()
}

// record notes that peer i of the current list was returned.
func (r *Request) record(i int) {
	r.markTried(i)
	r.attempts++
}
