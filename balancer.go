package balancer

import (
	"errors"
	"time"
)

// Picker chooses an upstream peer for each attempt of a request and learns
// from the outcome of every attempt.
//
// The caller brackets each attempt: Pick returns a peer, the caller talks to
// it, then reports what happened with Done. Pick counts the attempt as in
// flight until Done.
type Picker interface {
	// Pick chooses the peer for the next attempt of r. A nil r is a request
	// that will not be retried. Pick never returns a nil peer with a nil
	// error.
	Pick(r *Request) (*Peer, error)

	// Done reports the outcome of one attempt on p, a peer Pick returned.
	// It returns ErrUnknownPeer for a peer this picker does not hold (a
	// peer it removed while in flight is still taken, if no picker holds
	// it since), ErrNotInFlight when p has no attempt waiting for a report, and
	// ErrInvalidLatency or ErrInvalidOutcome for an outcome out of range;
	// each leaves the picker unchanged. In every picker of the package a
	// success on a peer with no failures on record takes no lock, and
	// anything else runs nginx's failure accounting under the picker's
	// lock in O(1), but where the picker's Done says otherwise.
	Done(p *Peer, o Outcome) error
}

// Updater changes a picker's peers while other goroutines pick. Every picker
// of the package implements it with the same semantics, stated here once.
//
// Every change is an nginx reload: it applies whole or not at all (an
// invalid argument changes nothing), and every peer's current weight goes
// back to 0, so a round-robin sequence starts over. A peer keeps its
// failures and in-flight attempts through any change that keeps it. A peer
// that joins starts with nothing the picker learned of it before (latency
// estimates, a warm-up start), even if it left a moment ago; Update keeps
// what the picker learned of every peer it keeps.
type Updater interface {
	// Add adds peers; Remove takes one out; SetWeight and SetDown change
	// one, as editing nginx's configuration and reloading would.
	Add(peers ...*Peer) error
	Remove(p *Peer) error
	SetWeight(p *Peer, w int) error
	SetDown(p *Peer, down bool) error

	// Update makes the picker's peers those of a discovery snapshot in one
	// change, keeping the held peers it matches by address (the k-th of an
	// address to the k-th).
	Update(snapshot []*Peer) error

	// Peers returns the picker's peers in a new slice.
	Peers() []*Peer

	// NextEligible returns when the next peer now inside its fail window
	// becomes eligible again, and false if none is.
	NextEligible() (time.Time, bool)
}

// Balancer is a Picker whose peers can change: what an integration (a gRPC
// balancer, an HTTP transport, a service-discovery watcher) holds. Every
// picker of the package is a Balancer, safe for concurrent use: a Pick
// that starts after a change has returned sees it, and an attempt picked
// before a change is reported to the same picker after it.
type Balancer interface {
	Picker
	Updater
}

// Outcome is what the caller observed on one attempt.
type Outcome struct {
	// Failed reports whether the attempt counts as a failure of the peer,
	// as nginx counts a connection error, a timeout or a listed 5xx
	// (proxy_next_upstream). A 404 is usually not a failure.
	Failed bool

	// Abandoned reports that the caller gave up on the attempt (its
	// context ended) or never sent it. nginx does not count a client's
	// abort against the peer, so neither does any picker: the attempt ends
	// as a success would end it for nginx's failure accounting. Its Latency
	// is a lower bound: the latency-aware pickers take it as "at least this
	// slow", never as a fast reply, and attempts abandoned in a row with no
	// reply between add up, so a peer that stalls past the caller's
	// deadline soon loses to those that answer (FastestFirst puts it at its
	// floor weight after three). Failed and Abandoned together are rejected
	// with ErrInvalidOutcome.
	Abandoned bool

	// Superseded, with Abandoned, reports that the caller cancelled the
	// attempt because another attempt of the same request ended it first:
	// a hedged request's loser (the cause of its context is ErrSuperseded).
	// Every picker treats it as Abandoned, its Latency a lower bound, but
	// for one thing: being cut short by another peer's answer says nothing
	// of whether this peer answers, so it neither counts toward nor ends
	// the run of attempts abandoned with no reply between. A peer that
	// stalls for good still shows: each such attempt raises its estimate
	// to the attempt's own wait, and once the hedge budget refuses, its
	// attempts run to the caller's deadline, abandoned as before.
	// Superseded without Abandoned is rejected with ErrInvalidOutcome.
	Superseded bool

	// Latency is how long the attempt took. Only the latency-aware pickers
	// use it, but every picker rejects a negative value with
	// ErrInvalidLatency, so that a caller's bug shows whichever picker it
	// runs.
	Latency time.Duration

	// Load is the load report the server sent with its reply, nil if it
	// sent none (or one the caller could not trust). ReportedWRR weighs
	// it, no other picker does; every one rejects a value that is NaN,
	// infinite or negative with ErrInvalidOutcome, naming it, and
	// changes nothing. A picker reads *Load during Done only and keeps
	// no pointer to it, so the caller may reuse it once Done returns.
	Load *ServerLoad
}

// Errors returned by pickers. Each is wrapped with details that name the
// offending value; test for them with errors.Is.
var (
	// ErrNoPeers is returned by Pick when the picker holds no peers.
	ErrNoPeers = errors.New("balancer: no peers configured")

	// ErrNoLivePeer is returned by Pick when every peer is down, inside its
	// fail window, at its max_conns limit or already tried by the request:
	// nginx's "no live upstreams".
	ErrNoLivePeer = errors.New("balancer: no live peer")

	// ErrTriesExhausted is returned by Pick when a request has already made
	// as many attempts as the picker has peers that are not down, the bound
	// nginx puts on proxy_next_upstream retries.
	ErrTriesExhausted = errors.New("balancer: tries exhausted")

	// ErrInvalidConfig is returned for a peer or option whose value is out
	// of range: an empty address, a negative weight, max_fails or
	// fail_timeout, weights whose sum overflows.
	ErrInvalidConfig = errors.New("balancer: invalid configuration")

	// ErrDuplicatePeer is returned when one *Peer is given twice in one
	// call (a constructor, Add, Update). Peers that share an address are
	// not duplicates: each is a peer of its own, as in nginx.
	ErrDuplicatePeer = errors.New("balancer: duplicate peer")

	// ErrPeerInUse is returned when a peer that belongs to a picker is
	// given to another one: balancing state is per picker.
	ErrPeerInUse = errors.New("balancer: peer belongs to another picker")

	// ErrUnknownPeer is returned for a peer the picker does not hold
	// (removed, never added, or belonging to another picker).
	ErrUnknownPeer = errors.New("balancer: unknown peer")

	// ErrNotInFlight is returned by Done when the peer has no attempt
	// waiting for a report, as for an outcome reported twice.
	ErrNotInFlight = errors.New("balancer: no attempt in flight")

	// ErrInvalidLatency is returned by Done for a negative latency.
	ErrInvalidLatency = errors.New("balancer: invalid latency")

	// ErrInvalidOutcome is returned by Done for an outcome both Failed and
	// Abandoned, Superseded but not Abandoned, or whose Load holds a NaN,
	// infinite or negative value.
	ErrInvalidOutcome = errors.New("balancer: invalid outcome")
)

// MaxWeightSum bounds the sum of the weights of one picker's peers. Smooth
// round-robin keeps current weights within a few multiples of the sum, and
// least-connections multiplies weights by connection counts, so the bound
// keeps all of that arithmetic far from overflow. The caller sets the
// weights, so the bound is exported: a weight or a sum past it is refused
// with ErrInvalidConfig.
const MaxWeightSum = 1 << 30
