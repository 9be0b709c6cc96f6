// Package upstream reads nginx `upstream NAME { ... }` blocks into
// balancer peers, as nginx 1.22 reads them, and traces the order in which
// a picker sends requests to them, the way nginx logs $upstream_addr.
//
// It reads bare upstream blocks or a configuration that holds them inside
// `http { ... }`; `server ADDR` lines with the parameters weight=N,
// max_fails=N, fail_timeout=TIME, max_conns=N, backup and down, with
// nginx's defaults; the balancing methods hash, ip_hash, least_conn and
// random; comments, quoting and free whitespace. It rejects what nginx
// rejects, with an error that names the file and line. Connection
// directives (keepalive, ...) are skipped. Host names are not resolved,
// but for servers with nginx 1.27.3's resolve parameter (and service=),
// which Block.Watch follows: the parser reads the zone, resolver and
// resolver_timeout directives that resolve needs, and refuses a block
// without them with nginx's message.
package upstream

import (
	"time"

	"github.com/lbgo/balancer"
)

// Block is one parsed upstream block.
//
// The zero value is an unnamed round-robin block with no servers; Peers
// returns none. A Block is plain data, safe for concurrent reads.
type Block struct {
	File    string   // the filename given to the parser, for messages
	Name    string   // the NAME of `upstream NAME`
	Line    int      // line of the `upstream` keyword
	Method  Method   // the balancing method; the zero Method is round robin
	Servers []Server // in file order, backups included

	// Run-time resolution (nginx 1.27.3's resolve): the zone's name (""
	// without a zone directive), and the name servers to ask (the block's
	// resolver directive or, for a block with a resolve server, the http
	// context's), the valid= that overrides the records' TTLs (0: none)
	// and resolver_timeout (30s by default for a block with a resolve
	// server).
	Zone            string
	Resolvers       []string
	ResolverValid   time.Duration
	ResolverTimeout time.Duration
	// ResolverNetwork is the addresses the resolver asks for: "" for A
	// and AAAA, "ip4" with ipv6=off, "ip6" with ipv4=off.
	ResolverNetwork string
}

// Server is one `server` line with nginx's defaults filled in: the parser
// sets Weight 1, MaxFails 1 and FailTimeout 10s unless the line says
// otherwise.
//
// Name is the address as written, which nginx's hash methods hash
// (`server 10.0.0.1;` hashes "10.0.0.1"); Addr is the address nginx logs
// in $upstream_addr, with the port, 80 by default ("10.0.0.1:80"), and
// the address of the server's peer. See ParseAll for how Addr is derived.
//
// The zero value is a server with no address and weight 0, which every
// picker rejects; build servers with the parser or set every field. A
// Server is plain data, safe for concurrent reads.
type Server struct {
	Name        string // the address as written, e.g. "10.0.0.1"
	Addr        string // the address as logged, e.g. "10.0.0.1:80"
	Line        int    // line of the `server` keyword
	Weight      int    // weight=N, at least 1
	MaxFails    int    // max_fails=N; 0 disables failure accounting
	MaxConns    int    // max_conns=N; 0 means unlimited
	FailTimeout time.Duration
	Backup      bool
	Down        bool
	// Resolve is the resolve parameter: Name's addresses are looked up
	// at run time and followed (Block.Watch); Service its service=, the
	// SRV records to follow instead ("" for the A/AAAA records).
	Resolve bool
	Service string
}

// Peer returns a new balancer peer configured as s, whose address is
// s.Addr and whose hash text (balancer.HashText) is s.Name, the text nginx's
// `hash KEY consistent` hashes: so ConsistentHash over a block's peers puts
// each server where nginx does. A Server with no Name keeps the default
// hash text, its address.
func (s Server) Peer() *balancer.Peer {
	opts := []balancer.PeerOption{
		balancer.Weight(s.Weight),
		balancer.MaxFails(s.MaxFails),
		balancer.FailTimeout(s.FailTimeout),
		balancer.MaxConns(s.MaxConns),
	}
	if s.Name != "" {
		opts = append(opts, balancer.HashText(s.Name))
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
//
// Servers that share an address (nginx accepts them, and logs the same
// address for both) are peers of their own, as they are servers of their
// own in nginx: each has its parameters, failures and smooth weights, and
// ConsistentHash hashes each line's text, so two lines with one text share
// their ring points as in nginx.
func (b *Block) Peers() []*balancer.Peer {
	peers := make([]*balancer.Peer, len(b.Servers))
	for i, s := range b.Servers {
		peers[i] = s.Peer()
	}
	return peers
}

// CheckPeers returns nil: every picker holds a block's peers, servers that
// share an address included.
//
// Deprecated: it returned balancer.ErrDuplicatePeer for servers that share
// an address, which pickers now accept; there is nothing left to check.
func (b *Block) CheckPeers() error { return nil }
