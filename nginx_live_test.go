//go:build unix

package balancer_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

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

// skipUnlessNginx returns the nginx binary, or skips the test.
func skipUnlessNginx(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("live nginx test skipped in -short mode")
	}
	bin, ok := findNginx()
	if !ok {
		t.Skip("nginx not found on PATH or at /usr/sbin/nginx: install nginx (Debian package nginx-core) to run the live differential test")
	}
	return bin
}

// TestNginxLive runs random upstream configurations on a real nginx and
// checks that SmoothWRR, driven by upstream.Trace, tries the same servers in
// the same order for every request.
func TestNginxLive(t *testing.T) {
	bin := skipUnlessNginx(t)
	ctx, cancel := context.WithTimeout(t.Context(), liveTimeLimit)
	defer cancel()

	seed := *nginxSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("%s, seed %d (rerun: go test -run 'TestNginxLive$' . -nginx.seed=%d)", bin, seed, seed)

	start := time.Now()
	ran, mismatches := 0, 0
	for batch := range liveBatches {
		cases := make([]liveCase, liveBatchSize)
		for k := range cases {
			// One stream per configuration, so each can be regenerated
			// from the seed and its number alone.
			cases[k] = randomCase(rand.New(rand.NewPCG(seed, uint64(batch*liveBatchSize+k))))
		}
		results, err := runNginx(ctx, t, bin, cases)
		require.NoError(t, err, "seed %d, batch %d", seed, batch)
		for k, r := range results {
			ran++
			got, err := libraryTrace(r, cases[k])
			require.NoError(t, err, "seed %d, configuration %d:\n%s", seed, batch*liveBatchSize+k, r.block)
			if slices.Equal(r.trace, got) {
				continue
			}
			mismatches++
			if mismatches <= liveMismatches {
				// One line per trace, requests separated by "|": the
				// expected one is nginx's.
				assert.Equal(t, strings.Join(r.letterTrace(r.trace), " | "), strings.Join(r.letterTrace(got), " | "),
					"seed %d, configuration %d: library differs from nginx\n%s",
					seed, batch*liveBatchSize+k, describeMismatch(r, cases[k], got))
			}
		}
	}
	if mismatches > liveMismatches {
		t.Errorf("%d more mismatching configurations not shown", mismatches-liveMismatches)
	}
	t.Logf("%d configurations on live nginx in %v, %d mismatches", ran, time.Since(start).Round(time.Millisecond), mismatches)
}

// TestNginxLiveRecorded checks the harness itself: replayed on the live
// nginx, every recorded vector gives back its recorded trace.
func TestNginxLiveRecorded(t *testing.T) {
	bin := skipUnlessNginx(t)
	ctx, cancel := context.WithTimeout(t.Context(), liveTimeLimit)
	defer cancel()

	f, err := os.Open(filepath.Join("testdata", "nginx-1.22.1-smooth.jsonl"))
	if errors.Is(err, os.ErrNotExist) {
		t.Skip("no recorded vectors in testdata")
	}
	require.NoError(t, err)
	defer f.Close()
	var cases []liveCase
	var want [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var v struct {
			Servers []string `json:"servers"`
			N       int      `json:"n"`
			Trace   []string `json:"trace"`
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v))
		c := liveCase{n: v.N}
		for _, s := range v.Servers {
			params, dead := strings.CutPrefix(s, "dead")
			c.servers = append(c.servers, liveServer{params: strings.TrimSpace(params), dead: dead})
		}
		cases = append(cases, c)
		want = append(want, v.Trace)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, cases)

	results, err := runNginx(ctx, t, bin, cases)
	require.NoError(t, err)
	for k, r := range results {
		assert.Equal(t, want[k], r.letterTrace(r.trace), "vector %d: %s", k+1, specs(cases[k]))
	}
}

// randomCase draws one upstream configuration: 1 to 6 servers (rarely 1,
// which nginx handles apart), weights 1..10, max_fails 0..3, fail_timeout
// of at least 10s so that no failure window can expire while nginx serves
// the case, and some backup, down and dead servers.
func randomCase(r *rand.Rand) liveCase {
	n := 2 + r.IntN(5)
	if r.IntN(16) == 0 {
		n = 1
	}
	c := liveCase{n: 20 + r.IntN(21), servers: make([]liveServer, n)}
	timeouts := []string{"10s", "10", "15s", "30s", "1m", "90s", "2m"}
	// A quarter of the cases lose half their servers, to reach the
	// backups and "no live upstreams" often.
	deadOneIn := 4
	if r.IntN(4) == 0 {
		deadOneIn = 2
	}
	for i := range c.servers {
		var params []string
		if r.IntN(5) > 0 {
			params = append(params, "weight="+strconv.Itoa(1+r.IntN(10)))
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
		if r.IntN(5) == 0 {
			params = append(params, "backup")
		}
		if r.IntN(10) == 0 {
			params = append(params, "down")
		}
		c.servers[i] = liveServer{params: strings.Join(params, " "), dead: r.IntN(deadOneIn) == 0}
	}
	// nginx rejects an upstream without a primary server.
	primary := false
	for _, s := range c.servers {
		primary = primary || !strings.Contains(s.params, "backup")
	}
	if !primary {
		i := r.IntN(n)
		c.servers[i].params = strings.TrimSpace(strings.ReplaceAll(c.servers[i].params, "backup", ""))
	}
	return c
}

// libraryTrace runs the block nginx ran through upstream.Parse, a SmoothWRR
// on a clock that never moves, and upstream.Trace, with the dead servers
// failing every attempt.
func libraryTrace(r liveResult, c liveCase) ([]string, error) {
	b, err := upstream.Parse(r.name+".conf", []byte(r.block))
	if err != nil {
		return nil, err
	}
	fixed := time.Unix(1_700_000_000, 0)
	p, err := balancer.NewSmoothWRR(b.Peers(), balancer.WithClock(func() time.Time { return fixed }))
	if err != nil {
		return nil, err
	}
	dead := make(map[string]bool)
	for i, s := range c.servers {
		if s.dead {
			dead[r.addrs[i]] = true
		}
	}
	return upstream.Trace(p, b.Name, c.n, func(addr string) bool { return dead[addr] })
}

// specs writes a case in the notation of the recorded vectors, the servers
// named a, b, ... in order.
func specs(c liveCase) string {
	parts := make([]string, len(c.servers))
	for i, s := range c.servers {
		spec := s.params
		if s.dead {
			spec = strings.TrimSpace("dead " + spec)
		}
		parts[i] = fmt.Sprintf("%c: %q", 'a'+i, spec)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// describeMismatch shows a failing case in both notations and where its
// traces part.
func describeMismatch(r liveResult, c liveCase, got []string) string {
	first := len(r.trace)
	for i := range r.trace {
		if i >= len(got) || r.trace[i] != got[i] {
			first = i
			break
		}
	}
	return fmt.Sprintf("servers %s, %d requests, first difference at request %d\n%s",
		specs(c), c.n, first+1, r.block)
}
