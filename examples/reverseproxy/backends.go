package main

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/lbgo/balancer"
)

// parseBackends reads -backends, host:port[=weight],..., into peers, each
// with opts and, where given, its weight. An empty list is an error naming
// the flag; an address that is not host:port, or a weight that is not a
// number, names the item. Out-of-range values are left to the picker,
// which refuses them naming the value.
func parseBackends(s string, opts ...balancer.PeerOption) ([]*balancer.Peer, error) {
	if strings.TrimSpace(s) == "" {
		return nil, errors.New("-backends is required")
	}
	var peers []*balancer.Peer
	for _, item := range strings.Split(s, ",") {
		addr, w, hasWeight := strings.Cut(strings.TrimSpace(item), "=")
		if addr != "" {
			// The proxy dials addr as it is: without a port, or as a
			// URL, every request would fail.
			host, port, err := net.SplitHostPort(addr)
			if err != nil || port == "" || strings.Contains(host, "/") {
				return nil, fmt.Errorf("-backends: %q: want host:port", item)
			}
		}
		o := slices.Clone(opts)
		if hasWeight {
			n, err := strconv.Atoi(w)
			if err != nil {
				return nil, fmt.Errorf("-backends: %q: weight %q is not a number", item, w)
			}
			o = append(o, balancer.Weight(n))
		}
		peers = append(peers, balancer.NewPeer(addr, o...))
	}
	return peers, nil
}
