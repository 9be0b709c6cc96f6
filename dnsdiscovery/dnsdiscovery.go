// Package dnsdiscovery has the resolvers of package discovery over a DNS
// client that reads the records' TTLs (github.com/miekg/dns), so that a
// discovery.Watcher looks a name up again when its answer expires, as
// nginx's resolve does, rather than after a fixed interval. It is a module
// of its own so that the library's module does not depend on a DNS
// library.
//
//	w, err := discovery.Watch(ctx, lb, dnsdiscovery.Host{Name: "api.internal", Port: "8080"}, discovery.Config{})
//
// Every answer is checked before use: its ID (the client checks it) and
// its question are the query's, only the records of the name asked and of
// the names its CNAMEs lead to are read (a CNAME loop ends the chain), a
// TTL with its top bit set is 0 (RFC 2181), an error code is an error
// (NXDOMAIN wraps discovery.ErrNoAddresses, as does an answer without
// addresses), and a truncated answer over UDP is asked again over TCP.
package dnsdiscovery

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/lbgo/balancer/discovery"
)

// Host resolves Name's A and AAAA records, each address with Port, as
// discovery.Host does, with the least TTL of the records (CNAMEs
// included) as the answer's.
type Host struct {
	Name, Port string
	// Server is the DNS server, host:port; "": the first nameserver of
	// /etc/resolv.conf.
	Server string
	// Network is "ip" (A and AAAA, the default), "ip4" or "ip6".
	Network string
}

// Resolve implements discovery.Resolver.
func (h Host) Resolve(ctx context.Context) (discovery.Result, error) {
	if h.Name == "" || h.Port == "" {
		return discovery.Result{}, fmt.Errorf("dnsdiscovery: Host %q port %q: both required", h.Name, h.Port)
	}
	if _, err := strconv.ParseUint(h.Port, 10, 16); err != nil {
		return discovery.Result{}, fmt.Errorf("dnsdiscovery: Host %q port %q: not a port", h.Name, h.Port)
	}
	server, err := serverOf(h.Server)
	if err != nil {
		return discovery.Result{}, err
	}
	ips, ttl, err := addresses(ctx, server, h.Name, h.Network)
	if err != nil {
		return discovery.Result{}, err
	}
	ts := make([]discovery.Target, len(ips))
	for i, ip := range ips {
		ts[i] = discovery.Target{Addr: net.JoinHostPort(ip.String(), h.Port)}
	}
	return discovery.Result{Targets: ts, TTL: known(ttl)}, nil
}

// known returns a TTL for discovery.Result, where 0 means unknown: a
// record's TTL of 0 (do not cache) becomes 1ns, which the Watcher raises
// to its MinInterval.
func known(ttl time.Duration) time.Duration { return max(ttl, time.Nanosecond) }

// SRV resolves the SRV records of Service at Name, and each target's
// addresses, as discovery.SRV does (nginx's service=), with the least TTL
// of all the records as the answer's. A target whose name does not
// resolve is left out.
type SRV struct {
	Service, Name string
	Server        string // as Host's
	Network       string // as Host's
}

// Resolve implements discovery.Resolver.
func (s SRV) Resolve(ctx context.Context) (discovery.Result, error) {
	if s.Service == "" || s.Name == "" {
		return discovery.Result{}, fmt.Errorf("dnsdiscovery: SRV service %q name %q: both required", s.Service, s.Name)
	}
	server, err := serverOf(s.Server)
	if err != nil {
		return discovery.Result{}, err
	}
	qname := "_" + s.Service + "._tcp." + s.Name
	if strings.Contains(s.Service, ".") {
		qname = s.Service + "." + s.Name
	}
	in, err := exchange(ctx, server, qname, dns.TypeSRV)
	if err != nil {
		return discovery.Result{}, err
	}
	rrs, ttl := answer(in, qname, dns.TypeSRV)
	var recs []*dns.SRV
	for _, rr := range rrs {
		recs = append(recs, rr.(*dns.SRV))
	}
	if len(recs) == 0 {
		return discovery.Result{}, fmt.Errorf("dnsdiscovery: %s: no SRV records: %w", qname, discovery.ErrNoAddresses)
	}
	lowest := slices.MinFunc(recs, func(a, b *dns.SRV) int { return int(a.Priority) - int(b.Priority) }).Priority
	var ts []discovery.Target
	var lastErr error
	for _, r := range recs {
		ips, t, err := addresses(ctx, server, r.Target, s.Network)
		if err != nil {
			if ctx.Err() != nil {
				return discovery.Result{}, ctx.Err()
			}
			lastErr = err
			continue
		}
		ttl = min(ttl, t)
		for _, ip := range ips {
			ts = append(ts, discovery.Target{
				Addr:   net.JoinHostPort(ip.String(), strconv.Itoa(int(r.Port))),
				Weight: max(int(r.Weight), 1),
				Backup: r.Priority != lowest,
			})
		}
	}
	if len(ts) == 0 {
		return discovery.Result{}, fmt.Errorf("dnsdiscovery: %s: no target resolves (%v): %w", qname, lastErr, discovery.ErrNoAddresses)
	}
	return discovery.Result{Targets: discovery.SortTargets(ts), TTL: known(ttl)}, nil
}

// addresses returns name's A and/or AAAA addresses, sorted, once each,
// and their least TTL.
func addresses(ctx context.Context, server, name, network string) ([]netip.Addr, time.Duration, error) {
	var types []uint16
	switch network {
	case "", "ip":
		types = []uint16{dns.TypeA, dns.TypeAAAA}
	case "ip4":
		types = []uint16{dns.TypeA}
	case "ip6":
		types = []uint16{dns.TypeAAAA}
	default:
		return nil, 0, fmt.Errorf("dnsdiscovery: network %q: want ip, ip4 or ip6", network)
	}
	var ips []netip.Addr
	ttl := time.Duration(math.MaxInt64)
	notFound := 0
	for _, qtype := range types {
		in, err := exchange(ctx, server, name, qtype)
		if errors.Is(err, discovery.ErrNoAddresses) {
			notFound++
			continue
		}
		if err != nil {
			return nil, 0, err
		}
		rrs, t := answer(in, name, qtype)
		ttl = min(ttl, t)
		for _, rr := range rrs {
			var ip net.IP
			switch r := rr.(type) {
			case *dns.A:
				ip = r.A
			case *dns.AAAA:
				ip = r.AAAA
			}
			if a, ok := netip.AddrFromSlice(ip); ok && a.IsValid() && !a.Unmap().IsUnspecified() {
				ips = append(ips, a.Unmap())
			}
		}
	}
	if len(ips) == 0 {
		return nil, 0, fmt.Errorf("dnsdiscovery: %s: no address (%d of %d lookups NXDOMAIN): %w", name, notFound, len(types), discovery.ErrNoAddresses)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	return slices.Compact(ips), ttl, nil
}

// exchange asks server one question, over TCP if the UDP answer is
// truncated. An error code is an error, NXDOMAIN wrapping
// discovery.ErrNoAddresses.
func exchange(ctx context.Context, server, name string, qtype uint16) (*dns.Msg, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(4096, false)
	in, err := exchangeOver(ctx, "udp", server, m)
	if err == nil && in.Truncated {
		in, err = exchangeOver(ctx, "tcp", server, m)
	}
	if err != nil {
		return nil, fmt.Errorf("dnsdiscovery: %s %s: %w", name, dns.TypeToString[qtype], err)
	}
	// The client checks the reply's ID, not its question.
	if q := in.Question; len(q) != 1 || !strings.EqualFold(q[0].Name, m.Question[0].Name) || q[0].Qtype != qtype || q[0].Qclass != dns.ClassINET {
		return nil, fmt.Errorf("dnsdiscovery: %s %s: the reply is to another question (%v)", name, dns.TypeToString[qtype], q)
	}
	switch in.Rcode {
	case dns.RcodeSuccess:
		return in, nil
	case dns.RcodeNameError:
		return nil, fmt.Errorf("dnsdiscovery: %s %s: NXDOMAIN: %w", name, dns.TypeToString[qtype], discovery.ErrNoAddresses)
	}
	return nil, fmt.Errorf("dnsdiscovery: %s %s: %s", name, dns.TypeToString[qtype], dns.RcodeToString[in.Rcode])
}

// exchangeOver asks m over network. The DNS client heeds ctx's deadline
// but not its cancellation: the connection is closed when ctx ends, so
// that a lookup of a server that does not answer ends then (a Watcher's
// Close waits for it).
func exchangeOver(ctx context.Context, network, server string, m *dns.Msg) (*dns.Msg, error) {
	c := &dns.Client{Net: network}
	co, err := c.DialContext(ctx, server)
	if err != nil {
		return nil, err
	}
	defer co.Close()
	stop := context.AfterFunc(ctx, func() { co.Close() })
	defer stop()
	in, _, err := c.ExchangeWithConnContext(ctx, m, co)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return in, err
}

// answer returns the records of type qtype that answer name in in, and
// their least TTL and that of the CNAMEs that lead to them (math.MaxInt64
// for none). As net's resolver, it takes only the records of name and of
// the names its CNAMEs lead to: a server may add others (of names nobody
// asked about), which must not become peers nor set the TTL. A CNAME loop
// ends the chain.
func answer(in *dns.Msg, name string, qtype uint16) ([]dns.RR, time.Duration) {
	owner := func(rr dns.RR) string { return strings.ToLower(dns.Fqdn(rr.Header().Name)) }
	chain := map[string]bool{}
	ttl := time.Duration(math.MaxInt64)
	for cur := strings.ToLower(dns.Fqdn(name)); !chain[cur]; {
		chain[cur] = true
		for _, rr := range in.Answer {
			if c, ok := rr.(*dns.CNAME); ok && qtype != dns.TypeCNAME && owner(rr) == cur {
				ttl = min(ttl, ttlOf(rr))
				cur = strings.ToLower(dns.Fqdn(c.Target))
				break
			}
		}
	}
	var rrs []dns.RR
	for _, rr := range in.Answer {
		if h := rr.Header(); h.Rrtype == qtype && h.Class == dns.ClassINET && chain[owner(rr)] {
			rrs = append(rrs, rr)
			ttl = min(ttl, ttlOf(rr))
		}
	}
	return rrs, ttl
}

// ttlOf is a record's TTL; one with its top bit set is 0, as RFC 2181
// (section 8) asks.
func ttlOf(rr dns.RR) time.Duration {
	t := rr.Header().Ttl
	if t >= 1<<31 {
		t = 0
	}
	return time.Duration(t) * time.Second
}

// serverOf returns the server to ask: server, or the first of
// /etc/resolv.conf's.
func serverOf(server string) (string, error) {
	if server != "" {
		return server, nil
	}
	conf, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil || len(conf.Servers) == 0 {
		return "", fmt.Errorf("dnsdiscovery: no Server given and none in /etc/resolv.conf (%v)", err)
	}
	return net.JoinHostPort(conf.Servers[0], conf.Port), nil
}
