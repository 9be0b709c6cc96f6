// Package discovery keeps a balancer's peers in step with DNS, as nginx's
// "server NAME resolve" does: a Watcher looks a name up, hands the answer
// to the balancer's Update (so the addresses it keeps keep their peer, its
// failures, attempts in flight and statistics), and looks again when the
// answer's TTL runs out, or after Config.Interval where the Resolver
// cannot tell the TTL (net.Resolver cannot).
//
//	lb, _ := balancer.NewLeastConn(nil)
//	w, err := discovery.Watch(ctx, lb, discovery.Host{Name: "api.internal", Port: "8080"}, discovery.Config{})
//	if err != nil {
//		return err // the first lookup failed: there is nothing to balance over
//	}
//	defer w.Close()
//	client := &http.Client{Transport: &balancerhttp.Transport{Picker: lb}}
//
// Host follows a name's A and AAAA records; SRV follows a service's SRV
// records as nginx's service= does: the targets at the lowest priority are
// the primaries, the others backups, and an SRV weight is the peer's
// weight. Both ask a net.Resolver (the system's by default). The nested
// module dnsdiscovery has the same resolvers over a DNS client that reads
// the records' TTLs.
//
// Where it departs from nginx, and why. A lookup that fails (a timeout,
// SERVFAIL, no answer) keeps the last good list, as nginx does, and so does
// an answer with no address at all (NXDOMAIN, or a name with no records),
// which nginx takes as an empty list and drains every peer: one bad answer
// from a DNS server would then be an outage, and an empty pool serves no
// one. Either is reported to Config.OnError and counted in Stats, and the
// Watcher tries again after Config.RetryInterval, doubling up to
// Config.MaxInterval while the lookups keep failing. To take a name's peers
// away, remove its records and point it elsewhere, or stop the Watcher and
// update the balancer yourself.
package discovery
