package balancer_test

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// The files in testdata hold pick sequences recorded from real nginx (see
// testdata/README.md): one JSON case per line.
func TestConformanceSmooth(t *testing.T) {
	replayNginx(t, "testdata/nginx-1.22.1-smooth.jsonl", balancer.NewSmoothWRR)
}

// TestConformanceReportedWRR_noReports: with no report ReportedWRR is
// nginx's smooth round robin, failures and all.
func TestConformanceReportedWRR_noReports(t *testing.T) {
	replayNginx(t, "testdata/nginx-1.22.1-smooth.jsonl", balancer.NewReportedWRR)
}

func TestConformanceClassic(t *testing.T) {
	replayNginx(t, "testdata/nginx-1.2.0-classic.jsonl", balancer.NewClassicWRR)
}

// nginxCase is one recorded case. Servers are named a, b, c... in order, the
// upstream is named back, and a leading "dead" marks a server whose port
// refused every connection.
type nginxCase struct {
	Servers []string `json:"servers"`
	N       int      `json:"n"`
	Trace   []string `json:"trace"`
}

// block returns the case's upstream block, server i named by letter, and
// the set of dead servers.
func (c nginxCase) block() (string, map[string]bool) {
	return vectorBlock(c.Servers, func(i int) string { return string(rune('a' + i)) })
}

// vectorServer splits a vector's server parameters: a leading "dead" marks
// a server whose port refused every connection.
func vectorServer(spec string) (params string, dead bool) {
	params, dead = strings.CutPrefix(spec, "dead")
	return strings.TrimSpace(params), dead
}

// vectorBlock returns the upstream block "back" of a vector's servers,
// server i at addr(i), and the set of dead servers' addresses.
func vectorBlock(servers []string, addr func(i int) string) (string, map[string]bool) {
	var b strings.Builder
	dead := map[string]bool{}
	b.WriteString("upstream back {\n")
	for i, spec := range servers {
		params, isDead := vectorServer(spec)
		dead[addr(i)] = isDead
		fmt.Fprintf(&b, "    server %s %s;\n", addr(i), params)
	}
	b.WriteString("}\n")
	return b.String(), dead
}

// readVectors decodes every line of a vectors file, one JSON case per line,
// in order: case i is line i+1.
func readVectors[V any](t *testing.T, file string) []V {
	t.Helper()
	f, err := os.Open(file)
	require.NoError(t, err)
	defer f.Close()
	var vs []V
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var v V
		require.NoError(t, json.Unmarshal(sc.Bytes(), &v), "%s:%d", file, len(vs)+1)
		vs = append(vs, v)
	}
	require.NoError(t, sc.Err())
	require.NotEmpty(t, vs, "no cases in %s", file)
	return vs
}

// replayNginx replays every case of a vectors file through upstream.Parse,
// a picker from newPicker on a clock that never moves (nginx ran each case
// far inside every fail_timeout), and upstream.Trace.
func replayNginx[P balancer.Picker](t *testing.T, file string, newPicker func([]*balancer.Peer, ...balancer.Option) (P, error)) {
	clock := balancer.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) })
	for k, c := range readVectors[nginxCase](t, file) {
		t.Run(fmt.Sprintf("%d:%s", k+1, strings.Join(c.Servers, "|")), func(t *testing.T) {
			src, dead := c.block()
			b, err := upstream.Parse(file, []byte(src))
			require.NoError(t, err)
			p, err := newPicker(b.Peers(), clock)
			require.NoError(t, err)
			// nginx logs `server a;` as a:80.
			got, err := upstream.Trace(p, b.Name, c.N, func(addr string) bool { return dead[strings.TrimSuffix(addr, ":80")] })
			require.NoError(t, err)
			for i := range got {
				got[i] = strings.ReplaceAll(got[i], ":80", "") // the vectors name servers by letter
			}
			assert.Equal(t, c.Trace, got, "trace of\n%s", src)
		})
	}
}

// hashCase is one case of the hash vectors (see testdata/README.md): the
// method, the base port, the server parameters (a leading "dead" marks a
// server whose port refused every connection), one key per request and what
// nginx logged for it, the servers tried joined by ", " as letters, or
// "back" when it found no live server.
type hashCase struct {
	Method  string   `json:"method"`
	Base    int      `json:"base"`
	Servers []string `json:"servers"`
	Keys    []string `json:"keys"`
	Trace   []string `json:"trace"`
}

// block returns the case's upstream block, with server i at
// 127.0.0.1:(base+1+i), the text nginx hashed, and the dead addresses.
func (c hashCase) block() (string, map[string]bool) {
	return vectorBlock(c.Servers, func(i int) string { return fmt.Sprintf("127.0.0.1:%d", c.Base+1+i) })
}

// TestConformanceHash replays every recorded case of nginx 1.22.1's hash,
// hash consistent and ip_hash through the matching picker: each key is one
// request, a dead server's attempt is reported failed and the request
// retried with the same Request, as nginx's proxy_next_upstream does.
func TestConformanceHash(t *testing.T) {
	const file = "testdata/nginx-1.22.1-hash.jsonl"
	clock := balancer.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) })
	methods := map[string]int{}
	for k, c := range readVectors[hashCase](t, file) {
		line := k + 1
		require.Len(t, c.Trace, len(c.Keys), "%s:%d", file, line)
		methods[c.Method]++
		t.Run(fmt.Sprintf("%d:%s:%s", line, c.Method, strings.Join(c.Servers, "|")), func(t *testing.T) {
			src, dead := c.block()
			b, err := upstream.Parse(file, []byte(src))
			require.NoError(t, err)
			peers := b.Peers()
			var p balancer.Picker
			var setKey func(*balancer.Request, string)
			switch c.Method {
			case "hash $arg_k":
				p, err = balancer.NewHash(peers, clock)
				setKey = (*balancer.Request).SetKey
			case "hash $arg_k consistent":
				p, err = balancer.NewConsistentHash(peers, clock)
				setKey = (*balancer.Request).SetKey
			case "ip_hash":
				p, err = balancer.NewIPHash(peers, clock)
				setKey = func(r *balancer.Request, k string) { r.SetClientAddr(netip.MustParseAddr(k)) }
			default:
				t.Fatalf("unknown method %q", c.Method)
			}
			require.NoError(t, err)
			letter := map[string]string{}
			for i, s := range b.Servers {
				letter[s.Addr] = string(rune('a' + i))
			}
			var r balancer.Request
			got := make([]string, len(c.Keys))
			for k, key := range c.Keys {
				r.Reset()
				setKey(&r, key)
				got[k], err = traceKey(p, &r, letter, dead)
				require.NoError(t, err, "request %d, key %q", k, key)
			}
			assert.Equal(t, c.Trace, got, "trace of\n%s", src)
		})
	}
	assert.Equal(t, map[string]int{"hash $arg_k": 8, "hash $arg_k consistent": 5, "ip_hash": 5}, methods)
}

// traceKey runs one request's attempts, as nginx logs them.
func traceKey(p balancer.Picker, r *balancer.Request, letter map[string]string, dead map[string]bool) (string, error) {
	var tried []string
	for range 64 {
		peer, err := p.Pick(r)
		switch {
		case errors.Is(err, balancer.ErrNoLivePeer):
			return strings.Join(append(tried, "back"), ", "), nil
		case errors.Is(err, balancer.ErrTriesExhausted):
			return strings.Join(tried, ", "), nil
		case err != nil:
			return "", err
		}
		tried = append(tried, letter[peer.Addr()])
		failed := dead[peer.Addr()]
		if err := p.Done(peer, balancer.Outcome{Failed: failed}); err != nil {
			return "", err
		}
		if !failed {
			return strings.Join(tried, ", "), nil
		}
	}
	return "", errors.New("more than 64 attempts")
}
