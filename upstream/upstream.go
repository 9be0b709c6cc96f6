// Package upstream reads one nginx `upstream NAME { ... }` block into
// balancer peers, and traces the order in which a picker sends requests to
// them, the way nginx logs $upstream_addr.
//
// It understands the round-robin subset of the syntax: `server ADDR` lines
// with the parameters weight=N, max_fails=N, fail_timeout=TIME,
// max_conns=N, backup and down, with nginx's defaults, comments, quoting and
// free whitespace. Anything else is an error that names the file and line.
package upstream

import (
	"errors"
	"fmt"
	"time"

	"github.com/lbgo/balancer"
)

// Block is one parsed upstream block.
//
// The zero value is an unnamed block with no servers; Peers returns none.
// A Block is plain data, safe for concurrent reads.
type Block struct {
	Name    string   // the NAME of `upstream NAME`
	Line    int      // line of the `upstream` keyword
	Servers []Server // in file order, backups included
}

// Server is one `server` line with nginx's defaults filled in: Parse sets
// Weight 1, MaxFails 1 and FailTimeout 10s unless the line says otherwise.
//
// The zero value is a server with no address and weight 0, which every
// picker rejects; build servers with Parse or set every field. A Server is
// plain data, safe for concurrent reads.
type Server struct {
	Addr        string
	Line        int // line of the `server` keyword
	Weight      int // weight=N, at least 1
	MaxFails    int // max_fails=N; 0 disables failure accounting
	MaxConns    int // max_conns=N; 0 means unlimited
	FailTimeout time.Duration
	Backup      bool
	Down        bool
}

// Peer returns a new balancer peer configured as s.
func (s Server) Peer() *balancer.Peer {
	opts := []balancer.PeerOption{
		balancer.Weight(s.Weight),
		balancer.MaxFails(s.MaxFails),
		balancer.FailTimeout(s.FailTimeout),
		balancer.MaxConns(s.MaxConns),
	}
	if s.Backup {
		opts = append(opts, balancer.Backup())
	}
	if s.Down {
		opts = append(opts, balancer.Down())
	}
	return balancer.NewPeer(s.Addr, opts...)
}

// Peers returns a new peer for each server, in file order. Each call returns
// fresh peers, since a peer's balancing state belongs to one picker.
func (b *Block) Peers() []*balancer.Peer {
	peers := make([]*balancer.Peer, len(b.Servers))
	for i, s := range b.Servers {
		peers[i] = s.Peer()
	}
	return peers
}

// Errors wrapped by a ParseError; test for them with errors.Is. A duplicate
// server wraps balancer.ErrDuplicatePeer, and weights whose sum passes
// balancer.MaxWeightSum wrap balancer.ErrInvalidConfig.
var (
	// ErrSyntax is wrapped for text that is not one well-formed upstream
	// block: a missing ";" or "}", a token out of place, an unterminated
	// quote, a directive other than server, text after the block.
	ErrSyntax = errors.New("upstream: syntax error")

	// ErrInvalidParam is wrapped for a bad server parameter: an unknown
	// name, a bad number or time, a weight of 0.
	ErrInvalidParam = errors.New("upstream: invalid server parameter")

	// ErrNoServers is wrapped for a block with no primary server: empty,
	// or with backup servers only (nginx rejects both).
	ErrNoServers = errors.New("upstream: no servers")
)

// ParseError reports where and why a block could not be parsed.
//
// The zero value reports ":0: " and wraps nothing. A ParseError is not
// modified after Parse returns it, so it is safe for concurrent reads.
type ParseError struct {
	File string
	Line int // 1-based; one past the last line for an unexpected end of file
	Msg  string
	Err  error // the sentinel this error wraps
}

// Error returns "FILE:LINE: message".
func (e *ParseError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg) }

// Unwrap returns the sentinel error e wraps.
func (e *ParseError) Unwrap() error { return e.Err }
