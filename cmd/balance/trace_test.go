package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// exec runs the command line in-process and returns its exit status and
// outputs.
func exec(args []string, stdin string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

func lines(s ...string) string { return strings.Join(s, "\n") + "\n" }

const fiveOneOne = "upstream back {\n    server a weight=5;\n    server b;\n    server c;\n}\n"

// twoBlocks holds two upstream blocks inside http, with a server block
// between them that trace skips.
const twoBlocks = "http {\n  upstream u { server a weight=2; server b; }\n  upstream v { server 10.0.0.1:8080; server 10.0.0.2:8080; }\n  server { listen 80; location / { proxy_pass http://u; } }\n}\n"

// TestTrace traces blocks whose servers have no port: nginx logs them on
// port 80.
func TestTrace(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "up.conf")
	require.NoError(t, os.WriteFile(file, []byte(fiveOneOne), 0o644))
	keys, empty := filepath.Join(dir, "keys"), filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(keys, []byte("k1\n\nk3"), 0o644))
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	tests := []struct {
		name  string
		args  []string
		stdin string
		want  string
	}{
		// nginx's smooth sequence for {5,1,1}; the default -n is one cycle.
		{"file", []string{"trace", file}, "", lines("a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80")},
		{"stdin", []string{"trace"}, fiveOneOne, lines("a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80")},
		{"dash is stdin", []string{"trace", "-algo", "SmoothWRR", "-"}, fiveOneOne, lines("a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80")},
		// nginx 1.2.0's classic sequence for {5,1,1}.
		{"classic", []string{"trace", "-algo", "classicwrr", file}, "", lines("c:80", "b:80", "a:80", "a:80", "a:80", "a:80", "a:80")},
		{"-n", []string{"trace", "-n", "3", file}, "", lines("a:80", "a:80", "b:80")},
		{"flags after the file", []string{"trace", file, "-n", "2"}, "", lines("a:80", "a:80")},
		{"-n 0", []string{"trace", "-n", "0", file}, "", ""},
		{
			// a fails and, at max_fails 1, stays out on the frozen clock;
			// the cycle of b and c is 2 requests.
			"-fail", []string{"trace", "-fail", "a", file}, "",
			lines("a:80, b:80", "c:80", "b:80", "c:80", "b:80", "c:80", "b:80"),
		},
		{
			// One cycle counts primaries that are not down: 2 here.
			"default -n skips backup and down",
			[]string{"trace"}, "upstream u { server a weight=2; server b weight=5 down; server c weight=3 backup; }",
			lines("a:80", "a:80"),
		},
		{
			"every server failing",
			[]string{"trace", "-fail", " a,b ", "-n", "3"}, "upstream u { server a; server b backup; }",
			lines("a:80, b:80", "u", "u"),
		},
		{"every server down: one request", []string{"trace"}, "upstream u { server a down; }", lines("u")},
		// Smooth {2,1}: [2,1] a -> [-1,1]; [1,2] b -> [1,-1]; [3,0] a.
		{"-upstream u", []string{"trace", "-upstream", "u"}, twoBlocks, lines("a:80", "b:80", "a:80")},
		{"-upstream v", []string{"trace", "-upstream", "v", "-n", "3"}, twoBlocks, lines("10.0.0.1:8080", "10.0.0.2:8080", "10.0.0.1:8080")},
		{"-fail as logged", []string{"trace", "-fail", "a:80", "-n", "2", file}, "", lines("a:80, b:80", "c:80")},
		{
			// Three keys, the middle one empty: three requests. The smooth
			// picker takes no key, so the keys change nothing else.
			"-keys sets -n", []string{"trace", "-keys", keys, file}, "",
			lines("a:80", "a:80", "b:80"),
		},
		{"-n within -keys", []string{"trace", "-keys", keys, "-n", "2", file}, "", lines("a:80", "a:80")},
		{"empty -keys file", []string{"trace", "-keys", empty, file}, "", ""},
		{
			// Requests run one at a time, so every least_conn pick sees
			// all loads at 0, a tie among all peers, broken by nginx's
			// smooth step over all of them: the smooth sequence.
			"least_conn in the block", []string{"trace"},
			"upstream back { least_conn; server a weight=5; server b; server c; }",
			lines("a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80"),
		},
		{
			// -algo overrides a method balance trace has no picker for.
			"-algo over hash", []string{"trace", "-algo", "SmoothWRR"},
			"upstream back { hash $uri; server a weight=5; server b; server c; }",
			lines("a:80", "a:80", "b:80", "a:80", "c:80", "a:80", "a:80"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := exec(tt.args, tt.stdin)
			assert.Equal(t, 0, code, "stderr: %s", errOut)
			assert.Equal(t, tt.want, out)
			assert.Empty(t, errOut)
		})
	}
}

// TestExample checks the README's main command on the shipped example
// (go run ./cmd/balance trace examples/upstream.conf).
// Current weights of the three live primaries (5, 3, 1; total 9), after
// adding the weights and then taking 9 from the winner:
// [5,3,1] a -> [-4,3,1]; [1,6,2] b -> [1,-3,2]; [6,0,3] a -> [-3,0,3];
// [2,3,4] c -> [2,3,-5]; [7,6,-4] a -> [-2,6,-4]; [3,9,-3] b -> [3,0,-3];
// [8,3,-2] a -> [-1,3,-2]; [4,6,-1] b -> [4,-3,-1]; [9,0,0] a -> [0,0,0].
func TestExample(t *testing.T) {
	const a, b, c = "10.0.0.11:8080", "10.0.0.12:8080", "10.0.0.13:8080"
	code, out, errOut := exec([]string{"trace", "../../examples/upstream.conf"}, "")
	require.Equal(t, 0, code, "stderr: %s", errOut)
	assert.Equal(t, lines(a, b, a, c, a, b, a, b, a), out)
}

// TestTraceNginx replays the recorded nginx cases end to end: the block on
// standard input, dead servers in -fail.
func TestTraceNginx(t *testing.T) {
	for _, tt := range []struct{ file, algo string }{
		{"nginx-1.22.1-smooth.jsonl", "SmoothWRR"},
		{"nginx-1.2.0-classic.jsonl", "ClassicWRR"},
	} {
		t.Run(tt.algo, func(t *testing.T) {
			f, err := os.Open(filepath.Join("..", "..", "testdata", tt.file))
			require.NoError(t, err)
			defer f.Close()
			sc := bufio.NewScanner(f)
			for line := 1; sc.Scan(); line++ {
				block, dead, n, want := nginxCase(t, sc.Bytes())
				args := []string{"trace", "-algo", tt.algo, "-n", fmt.Sprint(n), "-fail", strings.Join(dead, ","), "-"}
				code, out, errOut := exec(args, block)
				assert.Equal(t, 0, code, "case %d: %s", line, errOut)
				assert.Equal(t, lines(onPort80(want)...), out, "case %d:\n%s", line, block)
			}
			require.NoError(t, sc.Err())
		})
	}
}

// onPort80 turns a recorded trace, servers named by letter, into what
// nginx logs for `server a;`: each letter on port 80; the upstream's name,
// back, stays.
func onPort80(trace []string) []string {
	out := make([]string, len(trace))
	for i, line := range trace {
		tried := strings.Split(line, ", ")
		for j, s := range tried {
			if s != "back" {
				tried[j] = s + ":80"
			}
		}
		out[i] = strings.Join(tried, ", ")
	}
	return out
}

// nginxCase decodes one recorded case (see testdata/README.md): servers
// named a, b, c..., the upstream named back, a leading "dead" for a server
// that refused every connection.
func nginxCase(t *testing.T, data []byte) (block string, dead []string, n int, trace []string) {
	var c struct {
		Servers []string
		N       int
		Trace   []string
	}
	require.NoError(t, json.Unmarshal(data, &c))
	var b strings.Builder
	b.WriteString("upstream back {\n")
	for i, params := range c.Servers {
		addr := string(rune('a' + i))
		if rest, ok := strings.CutPrefix(params, "dead"); ok {
			dead, params = append(dead, addr), rest
		}
		fmt.Fprintf(&b, "server %s %s;\n", addr, params)
	}
	b.WriteString("}\n")
	return b.String(), dead, c.N, c.Trace
}

// TestTraceRoundRobin checks what holds whatever the seed: equal shares in
// list order from wherever the rotation starts, weights ignored, and the
// same output for the same seed.
func TestTraceRoundRobin(t *testing.T) {
	next := map[string]string{"a:80": "b:80", "b:80": "c:80", "c:80": "a:80"}
	for _, seed := range []string{"1", "2", "3", "42"} {
		t.Run("seed="+seed, func(t *testing.T) {
			args := []string{"trace", "-algo", "RoundRobin", "-seed", seed, "-n", "9"}
			code, out, errOut := exec(args, fiveOneOne)
			require.Equal(t, 0, code, "stderr: %s", errOut)
			got := strings.Fields(out)
			require.Len(t, got, 9)
			for i := 1; i < len(got); i++ {
				assert.Equal(t, next[got[i-1]], got[i], "request %d after %s", i+1, got[i-1])
			}
			_, again, _ := exec(args, fiveOneOne)
			assert.Equal(t, out, again)
		})
	}
}

// TestTraceRandom checks that a seed fixes the sequence and that the shares
// follow the weights: with {5,1,1} over 7000 requests a gets 5000 on
// average, with a standard deviation of sqrt(7000·5/7·2/7) ≈ 38, so ±300 is
// about 8 standard deviations; a failing server never ends a request.
func TestTraceRandom(t *testing.T) {
	for _, seed := range []string{"1", "7"} {
		t.Run("seed="+seed, func(t *testing.T) {
			args := []string{"trace", "-algo", "RandomWeighted", "-seed", seed, "-n", "7000"}
			code, out, errOut := exec(args, fiveOneOne)
			require.Equal(t, 0, code, "stderr: %s", errOut)
			_, again, _ := exec(args, fiveOneOne)
			assert.Equal(t, out, again, "same seed, same trace")
			got := map[string]int{}
			for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				got[l]++
			}
			assert.Len(t, got, 3)
			assert.InDelta(t, 5000, got["a:80"], 300, "a")
			assert.InDelta(t, 1000, got["b:80"], 300, "b")
			assert.InDelta(t, 1000, got["c:80"], 300, "c")

			// With a failing, every request that picks it goes on to b or c.
			_, out, _ = exec(append(args, "-fail", "a"), fiveOneOne)
			for i, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
				assert.Contains(t, []string{"a:80, b:80", "a:80, c:80", "b:80", "c:80"}, l, "request %d", i+1)
			}
		})
	}
}

// TestTraceRepeatedServers traces a block with two servers at one address,
// which nginx accepts as two servers. The expected lines are nginx's smooth
// round robin over weights a=3, b=1, a'=1 (total 5), worked by hand: each
// round adds the effective weights of the eligible peers to their current
// weights, takes the largest (the first on a tie) and subtracts the total
// from it. Current weights after each pick (a, b, a'):
//
//	(3,1,1) → a, (-2,1,1);  (1,2,2) → b, (1,-3,2);  (4,-2,3) → a, (-1,-2,3);
//	(2,-1,4) → a', (2,-1,-1);  (5,0,0) → a, (0,0,0)
//
// so "a b a a a", where one peer of weight 4 would give "a a b a a". With
// -fail a both peers at a:80 fail (max_fails 1, so each is out after its
// failure, its effective weight 0): request 1 tries a, then b over a' (cw
// 2 and 2, b first); request 2 tries a' (cw 3 over b's 1), then b; then
// only b is left.
func TestTraceRepeatedServers(t *testing.T) {
	const block = "upstream back {\n    server a weight=3;\n    server b;\n    server a;\n}\n"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"smooth", []string{"trace"}, lines("a:80", "b:80", "a:80", "a:80", "a:80")},
		{"-fail a", []string{"trace", "-fail", "a"}, lines("a:80, b:80", "a:80, b:80", "b:80", "b:80", "b:80")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := exec(tt.args, block)
			require.Equal(t, 0, code, errOut)
			assert.Equal(t, tt.want, out)
		})
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.conf")
	require.NoError(t, os.WriteFile(bad, []byte("upstream back {\n    server a;\n    server a:80 weight=0;\n}\n"), 0o644))
	keys := filepath.Join(dir, "k")
	require.NoError(t, os.WriteFile(keys, []byte("x\n\ny\n"), 0o644))
	badAddrs := filepath.Join(dir, "addrs")
	require.NoError(t, os.WriteFile(badAddrs, []byte("10.0.0.1\n::1\n10.0.0.256\n"), 0o644))
	emptyAddr := filepath.Join(dir, "empty-addr")
	require.NoError(t, os.WriteFile(emptyAddr, []byte("10.0.0.1\n\n"), 0o644))
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		stderr string // exact, or a prefix when it ends in "..."
	}{
		{"parse error in a file", []string{"trace", bad}, "", 1, bad + `:3: "weight=0": weight must be at least 1` + "\n"},
		{"unknown parameter", []string{"trace"}, "upstream back {\n  server a wieght=5;\n}\n", 1, `<stdin>:2: unknown parameter "wieght=5"` + "\n"},
		{"bad number", []string{"trace", "-"}, "upstream back {\n  server a weight=0;\n}\n", 1, `<stdin>:2: "weight=0": weight must be at least 1` + "\n"},
		{"missing ;", []string{"trace"}, "upstream back {\n  server a\n  server b;\n}\n", 1, `<stdin>:2: missing ";" after "a"` + "\n"},
		{"missing }", []string{"trace"}, "upstream back {\n  server a;\n", 1, `<stdin>:3: unexpected end of file, missing "}"` + "\n"},
		{"backup only", []string{"trace"}, "upstream back {\n  server a backup;\n}\n", 1, `<stdin>:2: backup server "a" but no primary server in upstream "back"` + "\n"},
		{"binary garbage", []string{"trace"}, "\x00\xff{", 1, `<stdin>:1: unexpected end of file, missing "}"` + "\n"},
		{"port 0", []string{"trace"}, "upstream back {\n  server a:0;\n}\n", 1, `<stdin>:2: invalid port in upstream "a:0"` + "\n"},
		{"scheme", []string{"trace"}, "upstream back {\n  server http://a;\n}\n", 1, `<stdin>:2: invalid host in upstream "http://a"` + "\n"},
		{"backup with hash", []string{"trace"}, "upstream back {\n  hash $uri;\n  server a;\n  server b backup;\n}\n", 1, `<stdin>:4: balancing method "hash" (line 2) does not support parameter "backup"` + "\n"},
		// nginx accepts a backup server before the method directive;
		// the hash and random pickers refuse backups.
		{"backup before hash", []string{"trace"}, "upstream back {\n  server a;\n  server b backup;\n  hash $uri consistent;\n}\n", 1, `<stdin>:3: backup server "b": ConsistentHash takes no backup servers, as nginx's hash, ip_hash and random methods do not` + "\n"},
		{"-algo Random over a backup", []string{"trace", "-algo", "random"}, "upstream back {\n  server a;\n  server b backup;\n}\n", 1, `<stdin>:3: backup server "b": Random takes no backup servers, as nginx's hash, ip_hash and random methods do not` + "\n"},
		{"bad client address", []string{"trace", "-keys", keys}, "upstream back {\n  ip_hash;\n  server a;\n}\n", 1, keys + `:1: client address "x": want an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1` + "\n"},
		{"bad client address, -algo", []string{"trace", "-algo", "IPHash", "-keys", badAddrs}, fiveOneOne, 1, badAddrs + `:3: client address "10.0.0.256": want an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1` + "\n"},
		{"empty client address", []string{"trace", "-keys", emptyAddr}, "upstream back {\n  ip_hash;\n  server a;\n}\n", 1, emptyAddr + `:2: client address "": want an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1` + "\n"},
		{
			// 160 points per unit of weight: the ring holds up to 2^16.
			"ring past its bound", []string{"trace"}, "upstream back {\n  hash $uri consistent;\n  server a weight=65536;\n  server b;\n}\n", 1,
			"<stdin>:1: balancer: ConsistentHash: total weight 65537 past MaxRingWeight 65536: balancer: invalid configuration\n",
		},
		{"several upstreams", []string{"trace"}, twoBlocks, 1, `<stdin>:3: 2 upstream blocks ("u" on line 2, "v" on line 3): choose one by name with -upstream NAME` + "\n"},
		{"unknown -upstream", []string{"trace", "-upstream", "w"}, twoBlocks, 2, `balance trace: -upstream w: no such block in <stdin>; there is "u" on line 2, "v" on line 3` + "\n" + `Run "balance trace -h" for usage.` + "\n"},
		{"missing -keys file", []string{"trace", "-keys", filepath.Join(dir, "nope.keys")}, fiveOneOne, 1, "balance trace: -keys: open " + filepath.Join(dir, "nope.keys") + ": no such file or directory\n"},
		{"-n past the keys", []string{"trace", "-keys", keys, "-n", "4"}, fiveOneOne, 2, "balance trace: -n 4 but 3 keys in " + keys + "\n..."},
		{"-seed with the block's round robin", []string{"trace", "-seed", "7"}, fiveOneOne, 2, "balance trace: -seed does not apply to round robin\n..."},
		{"-seed with the block's least_conn", []string{"trace", "-seed", "7"}, "upstream u { least_conn; server a; }", 2, "balance trace: -seed does not apply to least_conn\n..."},
		{"missing file", []string{"trace", filepath.Join(dir, "nope.conf")}, "", 1, "balance trace: open " + filepath.Join(dir, "nope.conf") + ": no such file or directory\n"},
		{"unknown -fail server", []string{"trace", "-fail", "z", "-"}, fiveOneOne, 2, `balance trace: -fail: no server "z" in upstream "back"` + "\n..."},
		{"bad -n", []string{"trace", "-n", "x"}, "", 2, `invalid value "x" for flag -n: parse error` + "\n..."},
		{"negative -n", []string{"trace", "-n", "-1"}, "", 2, "balance trace: -n -1: negative\n" + `Run "balance trace -h" for usage.` + "\n"},
		{"unknown -algo", []string{"trace", "-algo", "fastest"}, "", 2, `balance trace: -algo: balancer: "fastest" (want one of RoundRobin, SmoothWRR, ClassicWRR, RandomWeighted, LeastConn, P2CPeakEWMA, FastestFirst, Hash, ConsistentHash, IPHash, Random, RandomTwo, ReportedWRR, Prequal): balancer: unknown algorithm` + "\n..."},
		{"-seed with smooth", []string{"trace", "-algo", "SmoothWRR", "-seed", "7"}, "", 2, "balance trace: -seed does not apply to -algo SmoothWRR\n..."},
		{"two files", []string{"trace", bad, bad}, "", 2, "balance trace: at most one FILE, got 2\n..."},
		{"unknown flag", []string{"trace", "-x"}, "", 2, "flag provided but not defined: -x\n" + `Run "balance trace -h" for usage.` + "\n"},
		{"no command", nil, "", 2, "usage: balance COMMAND ..."},
		{"unknown command", []string{"sim2"}, "", 2, "balance: unknown command \"sim2\"\n\nusage: balance COMMAND ..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := exec(tt.args, tt.stdin)
			assert.Equal(t, tt.code, code)
			assert.Empty(t, out)
			if prefix, ok := strings.CutSuffix(tt.stderr, "..."); ok {
				assert.True(t, strings.HasPrefix(errOut, prefix), "stderr = %q, want prefix %q", errOut, prefix)
			} else {
				assert.Equal(t, tt.stderr, errOut)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	tests := []struct {
		name         string
		args         []string
		stdout, errs string // prefixes
	}{
		{"balance help", []string{"help"}, "usage: balance COMMAND", ""},
		{"balance -h", []string{"-h"}, "usage: balance COMMAND", ""},
		{"trace -h", []string{"trace", "-h"}, "", "usage: balance trace [-algo "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := exec(tt.args, "")
			assert.Equal(t, 0, code)
			assert.True(t, strings.HasPrefix(out, tt.stdout), "stdout = %q", out)
			assert.True(t, strings.HasPrefix(errOut, tt.errs), "stderr = %q", errOut)
		})
	}
}

func TestReadKeys(t *testing.T) {
	tests := []struct {
		name, data string
		want       []string
	}{
		{"final newline", "a\nb\n", []string{"a", "b"}},
		{"no final newline", "a\nb", []string{"a", "b"}},
		{"empty lines are empty keys", "\na\n\n", []string{"", "a", ""}},
		{"one empty key", "\n", []string{""}},
		{"empty file", "", []string{}},
		{"spaces and CR kept", " a \r\n", []string{" a \r"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "keys")
			require.NoError(t, os.WriteFile(file, []byte(tt.data), 0o644))
			got, err := readKeys(file)
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
	got, err := readKeys("")
	assert.NoError(t, err)
	assert.Nil(t, got, "no -keys")
}

// TestMethods checks which picker traces each balancing method when no
// -algo is given.
func TestMethods(t *testing.T) {
	tests := []struct {
		method string
		want   any // the picker type
	}{
		{"upstream u { server a; server b; }", &balancer.SmoothWRR{}},
		{"upstream u { least_conn; server a; server b; }", &balancer.LeastConn{}},
		{"upstream u { hash $uri; server a; server b; }", &balancer.Hash{}},
		{"upstream u { hash $uri consistent; server a; server b; }", &balancer.ConsistentHash{}},
		{"upstream u { ip_hash; server a; server b; }", &balancer.IPHash{}},
		{"upstream u { random; server a; server b; }", &balancer.Random{}},
		{"upstream u { random two; server a; server b; }", &balancer.RandomTwo{}},
		{"upstream u { random two least_conn; server a; server b; }", &balancer.RandomTwo{}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			b, err := upstream.Parse("up.conf", []byte(tt.method))
			require.NoError(t, err)
			name, ok := methods[methodKey(b.Method)]
			require.True(t, ok)
			spec, err := specOf(name)
			require.NoError(t, err)
			p, err := spec.new(b)
			require.NoError(t, err)
			assert.IsType(t, tt.want, p)
		})
	}
}

// TestTraceNginxHash replays every recorded case of nginx 1.22.1's hash,
// hash consistent and ip_hash end to end: the block with the case's method
// and its servers at 127.0.0.1:(base+1+i), the text nginx hashed, on
// standard input; the keys (or client addresses) in -keys, one request
// each; dead servers in -fail. No -algo: the block's method chooses the
// picker.
func TestTraceNginxHash(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "testdata", "nginx-1.22.1-hash.jsonl"))
	require.NoError(t, err)
	defer f.Close()
	dir := t.TempDir()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	methods := map[string]int{}
	for line := 1; sc.Scan(); line++ {
		var c struct {
			Method  string
			Base    int
			Servers []string
			Keys    []string
			Trace   []string
		}
		require.NoError(t, json.Unmarshal(sc.Bytes(), &c))
		require.Len(t, c.Trace, len(c.Keys), "case %d", line)
		methods[c.Method]++
		var block strings.Builder
		var dead []string
		letter := map[string]string{}
		fmt.Fprintf(&block, "upstream back {\n    %s;\n", c.Method)
		for i, params := range c.Servers {
			addr := fmt.Sprintf("127.0.0.1:%d", c.Base+1+i)
			letter[addr] = string(rune('a' + i))
			if rest, ok := strings.CutPrefix(params, "dead"); ok {
				dead, params = append(dead, addr), rest
			}
			fmt.Fprintf(&block, "    server %s %s;\n", addr, params)
		}
		block.WriteString("}\n")
		keys := filepath.Join(dir, fmt.Sprintf("case%d.keys", line))
		require.NoError(t, os.WriteFile(keys, []byte(lines(c.Keys...)), 0o644))

		args := []string{"trace", "-keys", keys, "-fail", strings.Join(dead, ","), "-"}
		code, out, errOut := exec(args, block.String())
		require.Equal(t, 0, code, "case %d: %s", line, errOut)
		got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for i, entry := range got {
			tried := strings.Split(entry, ", ")
			for j, a := range tried {
				if l, ok := letter[a]; ok {
					tried[j] = l
				}
			}
			got[i] = strings.Join(tried, ", ")
		}
		assert.Equal(t, c.Trace, got, "case %d:\n%s", line, block.String())
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, map[string]int{"hash $arg_k": 8, "hash $arg_k consistent": 5, "ip_hash": 5}, methods)
}

// TestTraceKeys checks what -keys gives each keyed method, with expected
// picks derived by hand from nginx's hash functions.
func TestTraceKeys(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		file := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(file, []byte(data), 0o644))
		return file
	}
	// Two servers of weight 1. ip_hash hashes the first three bytes of an
	// IPv4 address, hash = (hash·113 + byte) mod 6271 from 89, and
	// hash mod 2 (the total weight) picks the server. For 10.0.0.x:
	// 89·113 + 10 = 10067 → 10067 − 6271 = 3796; 3796·113 = 428948 →
	// 428948 − 6271·68 = 2520; 2520·113 = 284760 → 284760 − 6271·45 = 2565:
	// odd, the second server. For 10.0.1.x the last step adds 1: 2566,
	// even, the first.
	two := "upstream back {\n  ip_hash;\n  server a;\n  server b;\n}\n"
	addrs := write("addrs", "10.0.0.7\n10.0.1.7\n10.0.0.200\n10.0.1.1\n")
	code, out, errOut := exec([]string{"trace", "-keys", addrs, "-"}, two)
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, lines("b:80", "a:80", "b:80", "a:80"), out)

	// Hash and ConsistentHash send equal keys to one server, whatever
	// it is; an empty key goes round robin. IPHash sends a /24 to one
	// server.
	four := "upstream back {\n  %s;\n  server 10.0.0.1;\n  server 10.0.0.2 weight=2;\n  server 10.0.0.3:8080;\n  server 10.0.0.4;\n}\n"
	tests := []struct {
		method, keys string
		same         [][]int // requests that must go to one server
	}{
		{"hash $uri", "k1\nk2\nk1\nk3\nk2\nk1\n", [][]int{{0, 2, 5}, {1, 4}}},
		{"hash $uri consistent", "k1\nk2\nk1\nk3\nk2\nk1\n", [][]int{{0, 2, 5}, {1, 4}}},
		{"ip_hash", "192.0.2.1\n192.0.2.77\n198.51.100.3\n192.0.2.250\n2001:db8::1\n2001:db8::1\n", [][]int{{0, 1, 3}, {4, 5}}},
	}
	for _, tt := range tests {
		t.Run(tt.method, func(t *testing.T) {
			keys := write(strings.ReplaceAll(tt.method, " ", "_"), tt.keys)
			code, out, errOut := exec([]string{"trace", "-keys", keys}, fmt.Sprintf(four, tt.method))
			require.Equal(t, 0, code, errOut)
			got := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			require.Len(t, got, strings.Count(tt.keys, "\n"))
			for _, group := range tt.same {
				for _, i := range group[1:] {
					assert.Equal(t, got[group[0]], got[i], "requests %d and %d", group[0]+1, i+1)
				}
			}
		})
	}

	// An empty key sends hash to round robin: the smooth order {1,2,1,1}
	// starts b, a, c, d for empty keys only ([1,2,1,1] → b → [1,-3,1,1];
	// [2,-1,2,2] → a → [-3,-1,2,2]; [-2,1,3,3] → c; then d).
	empties := write("empties", "\n\n\n\n")
	code, out, errOut = exec([]string{"trace", "-keys", empties}, fmt.Sprintf(four, "hash $uri"))
	require.Equal(t, 0, code, errOut)
	assert.Equal(t, lines("10.0.0.2:80", "10.0.0.1:80", "10.0.0.3:8080", "10.0.0.4:80"), out)

	// ConsistentHash hashes the server as written: `server a;` and
	// `server a:80;` log alike but sit at other points of the ring, so
	// some keys of the first block's trace go elsewhere in the second.
	var many strings.Builder
	for i := range 200 {
		fmt.Fprintf(&many, "key%d\n", i)
	}
	manyKeys := write("many", many.String())
	bare := "upstream back { hash $uri consistent; server a; server b; server c; }"
	ported := "upstream back { hash $uri consistent; server a:80; server b:80; server c:80; }"
	_, outBare, _ := exec([]string{"trace", "-keys", manyKeys}, bare)
	_, outPorted, _ := exec([]string{"trace", "-keys", manyKeys}, ported)
	require.Equal(t, strings.Count(outBare, "\n"), 200)
	assert.NotEqual(t, outBare, outPorted, "the hash key is the text as written")

	// Random and RandomTwo take -seed; the same seed gives the same trace.
	for _, m := range []string{"random", "random two"} {
		block := "upstream back { " + m + "; server a weight=3; server b; }"
		_, first, _ := exec([]string{"trace", "-seed", "5", "-n", "50"}, block)
		_, again, _ := exec([]string{"trace", "-seed", "5", "-n", "50"}, block)
		assert.Equal(t, first, again, m)
		assert.Equal(t, 50, strings.Count(first, "\n"), m)
	}
}
