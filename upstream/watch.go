package upstream

import (
	"context"
	"net"
	"strings"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/discovery"
	"github.com/lbgo/balancer/internal/defaults"
)

// Watch keeps bal's peers those of the block, following its resolve
// servers as nginx 1.27.3 does (see package discovery): a server without
// resolve is one peer, as Peers gives it; a resolve server's peers are the
// addresses its name has now, A/AAAA records with its port or, with
// service=, SRV records (the lowest priority primary, the others backups
// unless the server is one; a record's weight where the server's is
// nginx's default 1), each with the server's max_fails, fail_timeout,
// max_conns and down. The names are asked of the block's first resolver
// (port 53 unless given; A records only with its ipv6=off, AAAA only with
// ipv4=off), each lookup bounded by ResolverTimeout, again
// every ResolverValid where it is set, else every c.Interval (net.Resolver
// does not tell the records' TTLs). c's Interval and Timeout, where set,
// win over the block's; its Peer is the block's.
//
// As discovery.Watch, the first lookup is made before Watch returns, and
// its failure is Watch's error; afterwards a failed lookup, or a name with
// no address, keeps the list in force (nginx drains a name that has none).
// A block without resolve servers is one lookup of its static servers; as
// in nginx, resolve on an IP address or a unix socket leaves a static
// server.
func (b *Block) Watch(ctx context.Context, bal balancer.Updater, c discovery.Config) (*discovery.Watcher, error) {
	r := b.dnsResolver()
	sources := make([]discovery.Resolver, len(b.Servers))
	for i, s := range b.Servers {
		switch {
		case !s.resolvesName():
			sources[i] = discovery.Static{{Addr: s.Addr}}
		case s.Service != "":
			sources[i] = discovery.SRV{Service: s.Service, Name: s.Name, Resolver: r, Network: b.ResolverNetwork}
		default:
			host, port, _ := net.SplitHostPort(s.Addr) // the parser wrote it HOST:PORT
			sources[i] = discovery.Host{Name: host, Port: port, Resolver: r, Network: b.ResolverNetwork}
		}
	}
	if c.Interval == 0 {
		c.Interval = b.ResolverValid
	}
	if c.Timeout == 0 {
		c.Timeout = b.ResolverTimeout
	}
	c.Peer = func(t discovery.Target) *balancer.Peer {
		s := b.Servers[t.Source]
		if !s.resolvesName() {
			return s.Peer()
		}
		weight := s.Weight
		if t.Weight > 0 && s.Weight == defaults.Weight {
			weight = t.Weight // nginx: an SRV weight counts unless weight= says otherwise
		}
		opts := []balancer.PeerOption{
			balancer.Weight(weight),
			balancer.MaxFails(s.MaxFails),
			balancer.FailTimeout(s.FailTimeout),
			balancer.MaxConns(s.MaxConns),
		}
		if s.Backup || t.Backup {
			opts = append(opts, balancer.Backup())
		}
		if s.Down {
			opts = append(opts, balancer.Down())
		}
		return balancer.NewPeer(t.Addr, opts...)
	}
	return discovery.Watch(ctx, bal, discovery.Merge(sources...), c)
}

// dnsResolver returns a net.Resolver that asks the block's first resolver,
// or nil (the system's) for a block without one.
func (b *Block) dnsResolver() *net.Resolver {
	if len(b.Resolvers) == 0 {
		return nil
	}
	server := b.Resolvers[0]
	if _, _, err := net.SplitHostPort(server); err != nil {
		server = net.JoinHostPort(strings.Trim(server, "[]"), "53")
	}
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server)
	}}
}
