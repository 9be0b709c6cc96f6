package discovery

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Host resolves Name's A and AAAA records, each address with Port: nginx's
// "server NAME:PORT resolve". The answer is sorted by address, so that the
// balancer's order does not follow the DNS server's rotation, an address
// given twice counts once, and 0.0.0.0 and :: are left out. Its Result has no TTL, since
// net.Resolver does not tell it.
type Host struct {
	Name, Port string
	// Resolver asks the DNS; nil: net.DefaultResolver.
	Resolver *net.Resolver
	// Network is "ip" (A and AAAA, the default), "ip4" or "ip6", as
	// nginx's resolver ipv6=off and ipv4=off.
	Network string
}

// Resolve implements Resolver.
func (h Host) Resolve(ctx context.Context) (Result, error) {
	if h.Name == "" || h.Port == "" {
		return Result{}, fmt.Errorf("discovery: Host %q port %q: both required", h.Name, h.Port)
	}
	network, err := networkOf(h.Network)
	if err != nil {
		return Result{}, err
	}
	ips, err := resolver(h.Resolver).LookupNetIP(ctx, network, h.Name)
	if err != nil {
		return Result{}, lookupError(h.Name, err)
	}
	return Result{Targets: hostTargets(ips, h.Port, 0, false)}, nil
}

// SRV resolves the SRV records of Service at Name, and each target's A and
// AAAA records, as nginx's "server NAME service=SERVICE resolve" does: the
// records are those of _SERVICE._tcp.NAME, or of SERVICE.NAME where
// SERVICE has a dot (as "_http._tcp"); the targets at the lowest priority
// are primaries and the others backups; a record's weight is its targets'
// (0 read as 1), and its port theirs. A target whose name does not resolve
// is left out, as is a record whose target is not a valid name (the rest
// of the answer stands, as dnsdiscovery reads it); an answer with no
// address left is ErrNoAddresses.
type SRV struct {
	Service, Name string
	// Resolver asks the DNS; nil: net.DefaultResolver.
	Resolver *net.Resolver
	// Network is the targets' addresses to ask, as Host's.
	Network string
}

// Resolve implements Resolver.
func (s SRV) Resolve(ctx context.Context) (Result, error) {
	if s.Service == "" || s.Name == "" {
		return Result{}, fmt.Errorf("discovery: SRV service %q name %q: both required", s.Service, s.Name)
	}
	network, err := networkOf(s.Network)
	if err != nil {
		return Result{}, err
	}
	r := resolver(s.Resolver)
	service, proto, name := s.Service, "tcp", s.Name
	if strings.Contains(s.Service, ".") {
		service, proto, name = "", "", s.Service+"."+s.Name
	}
	_, recs, err := r.LookupSRV(ctx, service, proto, name)
	if err != nil && len(recs) == 0 {
		return Result{}, lookupError(s.Service+"."+s.Name, err)
	}
	if len(recs) == 0 {
		return Result{}, fmt.Errorf("discovery: %s.%s: %w", s.Service, s.Name, ErrNoAddresses)
	}
	lowest := slices.MinFunc(recs, func(a, b *net.SRV) int { return cmp.Compare(a.Priority, b.Priority) }).Priority
	var ts []Target
	var lastErr error
	for _, rec := range recs {
		ips, err := r.LookupNetIP(ctx, network, rec.Target)
		if err != nil {
			if ctx.Err() != nil {
				return Result{}, ctx.Err()
			}
			lastErr = err
			continue
		}
		ts = append(ts, hostTargets(ips, fmt.Sprint(rec.Port), max(int(rec.Weight), 1), rec.Priority != lowest)...)
	}
	if len(ts) == 0 {
		return Result{}, fmt.Errorf("discovery: %s.%s: no target resolves (%v): %w", s.Service, s.Name, lastErr, ErrNoAddresses)
	}
	return Result{Targets: SortTargets(ts)}, nil
}

// networkOf checks a Network: "ip" for "".
func networkOf(network string) (string, error) {
	switch network {
	case "", "ip":
		return "ip", nil
	case "ip4", "ip6":
		return network, nil
	}
	return "", fmt.Errorf("discovery: network %q: want ip, ip4 or ip6", network)
}

func resolver(r *net.Resolver) *net.Resolver {
	if r == nil {
		return net.DefaultResolver
	}
	return r
}

// lookupError says what a failed lookup of name was, wrapping
// ErrNoAddresses where the name has no records.
func lookupError(name string, err error) error {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
		return fmt.Errorf("discovery: %s: %v: %w", name, err, ErrNoAddresses)
	}
	return fmt.Errorf("discovery: %s: %w", name, err)
}

// hostTargets makes the targets of a name's addresses, IPv4-mapped ones
// as IPv4; 0.0.0.0 and :: are left out (a connection to them reaches this
// host, not a peer), as dnsdiscovery leaves them out.
func hostTargets(ips []netip.Addr, port string, weight int, backup bool) []Target {
	ts := make([]Target, 0, len(ips))
	for _, ip := range ips {
		if ip.Unmap().IsUnspecified() {
			continue
		}
		ts = append(ts, Target{Addr: net.JoinHostPort(ip.Unmap().String(), port), Weight: weight, Backup: backup})
	}
	return SortTargets(ts)
}

// SortTargets sorts ts in place, primaries first, then by address (IP,
// then port), and returns it with each address given twice in one list
// kept once: the order Host and SRV answer in, so that a balancer's order
// does not follow a DNS server's rotation. A Resolver of your own may
// call it for the same order.
func SortTargets(ts []Target) []Target {
	slices.SortFunc(ts, func(a, b Target) int {
		if a.Backup != b.Backup {
			if a.Backup {
				return 1
			}
			return -1
		}
		return cmp.Or(compareAddr(a.Addr, b.Addr), cmp.Compare(a.Weight, b.Weight))
	})
	return slices.CompactFunc(ts, func(a, b Target) bool { return a.Addr == b.Addr && a.Backup == b.Backup })
}

// compareAddr orders host:port addresses by IP, then port.
func compareAddr(a, b string) int {
	pa, errA := netip.ParseAddrPort(a)
	pb, errB := netip.ParseAddrPort(b)
	if errA != nil || errB != nil {
		return strings.Compare(a, b)
	}
	return pa.Compare(pb)
}
