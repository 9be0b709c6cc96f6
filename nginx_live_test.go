//go:build unix

package balancer_test

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

var nginxSeed = flag.Uint64("nginx.seed", 0,
	"seed of TestNginxLive's random upstream configurations; 0 draws one")

// The live test's size: batches of configurations, each batch served by one
// nginx process.
const (
	liveBatches    = 5
	liveBatchSize  = 50
	liveTimeLimit  = 2 * time.Minute
	liveMismatches = 5 // mismatches reported in full; the rest are counted
)

// TestNginxLive runs random upstream configurations on a real nginx and
// checks that SmoothWRR, driven by upstream.Trace, tries the same servers in
// the same order for every request.
func TestNginxLive(t *testing.T) {
	l := liveNginx(t)
	l.drawSeed()
	start := time.Now()
	ran, repeated := 0, 0
	l.batches(liveBatches, liveBatchSize,
		func(rng *rand.Rand, _ int) liveCase { return randomCase(rng) },
		func(id int, r liveResult, c liveCase, got []string) {
			ran++
			if c.repeats() {
				repeated++
			}
			l.compare(id, r, c, got)
		})
	l.reportHidden()
	t.Logf("%d configurations (%d repeating an address) on live nginx in %v, %d mismatches",
		ran, repeated, time.Since(start).Round(time.Millisecond), l.mismatches)
}

// TestNginxLiveRecorded checks the harness itself: replayed on the live
// nginx, every recorded vector gives back its recorded trace.
func TestNginxLiveRecorded(t *testing.T) {
	l := liveNginx(t)
	var cases []liveCase
	var want [][]string
	for _, v := range readVectors[nginxCase](t, filepath.Join("testdata", "nginx-1.22.1-smooth.jsonl")) {
		cases = append(cases, liveCase{n: v.N, servers: liveServers(v.Servers)})
		want = append(want, v.Trace)
	}
	l.replay(cases, want)
}

// randomCase draws one upstream configuration: 1 to 6 servers (rarely 1,
// which nginx handles apart), weights 1..10, max_fails 0..3, fail_timeout
// of at least 10s so that no failure window can expire while nginx serves
// the case, and some backup, down and dead servers.
func randomCase(r *rand.Rand) liveCase {
	c := randomServers(r, 6, 10, []string{"10s", "10", "15s", "30s", "1m", "90s", "2m"}, true)
	// nginx rejects an upstream without a primary server.
	primary := false
	for _, s := range c.servers {
		primary = primary || !strings.Contains(s.params, "backup")
	}
	if !primary {
		i := r.IntN(len(c.servers))
		c.servers[i].params = strings.TrimSpace(strings.ReplaceAll(c.servers[i].params, "backup", ""))
	}
	c.n = 20 + r.IntN(21)
	return c
}

// randomServers draws 1 to most servers (2 or more but one time in
// sixteen), weights 1..maxWeight, max_fails 0..3, a fail_timeout from
// timeouts, max_conns 1..3, some down servers, some backup servers if
// backup, and some dead: one in four, or in a quarter of the cases one in
// two, to reach the backups and "no live upstreams" often. In a quarter of
// the cases each server after the first repeats an earlier server's
// address one time in three, as two nginx server lines may.
func randomServers(r *rand.Rand, most, maxWeight int, timeouts []string, backup bool) liveCase {
	n := 2 + r.IntN(most-1)
	if r.IntN(16) == 0 {
		n = 1
	}
	c := liveCase{servers: make([]liveServer, n)}
	deadOneIn := 4
	if r.IntN(4) == 0 {
		deadOneIn = 2
	}
	for i := range c.servers {
		var params []string
		if r.IntN(5) > 0 {
			params = append(params, "weight="+strconv.Itoa(1+r.IntN(maxWeight)))
		}
		if r.IntN(2) == 0 {
			params = append(params, "max_fails="+strconv.Itoa(r.IntN(4)))
		}
		if r.IntN(3) == 0 {
			params = append(params, "fail_timeout="+timeouts[r.IntN(len(timeouts))])
		}
		if r.IntN(10) == 0 {
			// Requests are sequential, so at most one is in flight.
			params = append(params, "max_conns="+strconv.Itoa(1+r.IntN(3)))
		}
		if backup && r.IntN(5) == 0 {
			params = append(params, "backup")
		}
		if r.IntN(10) == 0 {
			params = append(params, "down")
		}
		c.servers[i] = liveServer{params: strings.Join(params, " "), dead: r.IntN(deadOneIn) == 0}
	}
	if n > 1 && r.IntN(4) == 0 {
		for i := 1; i < n; i++ {
			if r.IntN(3) != 0 {
				continue
			}
			j := r.IntN(i)
			if c.servers[j].same > 0 {
				j = c.servers[j].same - 1
			}
			c.servers[i].same, c.servers[i].dead = j+1, c.servers[j].dead
		}
	}
	return c
}

// repeats reports whether two of c's servers share an address.
func (c liveCase) repeats() bool {
	return slices.ContainsFunc(c.servers, func(s liveServer) bool { return s.same > 0 })
}

// libraryTrace runs the block nginx ran through upstream.Parse, the
// library's picker for its method (SmoothWRR for round robin) on a clock
// that never moves, random ones seeded with seed, and upstream.TraceEach
// with each request's key or client address, the dead servers failing
// every attempt.
func libraryTrace(r liveResult, c liveCase, seed uint64) ([]string, error) {
	b, err := upstream.Parse(r.name+".conf", []byte(r.block))
	if err != nil {
		return nil, err
	}
	fixed := time.Unix(1_700_000_000, 0)
	clock := balancer.WithClock(func() time.Time { return fixed })
	src := balancer.WithRand(rand.NewPCG(seed, 0x6e67696e78))
	var p balancer.Picker
	switch c.method {
	case "":
		p, err = balancer.NewSmoothWRR(b.Peers(), clock)
	case "hash $arg_k":
		p, err = balancer.NewHash(b.Peers(), clock)
	case "hash $arg_k consistent":
		p, err = balancer.NewConsistentHash(b.Peers(), clock)
	case "ip_hash":
		p, err = balancer.NewIPHash(b.Peers(), clock)
	case "random":
		p, err = balancer.NewRandom(b.Peers(), clock, src)
	case "random two":
		p, err = balancer.NewRandomTwo(b.Peers(), clock, src)
	default:
		err = fmt.Errorf("no picker for method %q", c.method)
	}
	if err != nil {
		return nil, err
	}
	dead := make(map[string]bool)
	for i, s := range c.servers {
		if s.dead {
			dead[r.addrs[i]] = true
		}
	}
	prepare := func(i int, req *balancer.Request) {
		if c.keys != nil {
			req.SetKey(c.keys[i])
		}
		if c.clients != nil {
			req.SetClientAddr(c.clients[i])
		}
	}
	return upstream.TraceEach(p, b.Name, c.n, func(addr string) bool { return dead[addr] }, prepare)
}
