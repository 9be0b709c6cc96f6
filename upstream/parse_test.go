package upstream

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
)

// srv is a server with nginx's defaults, for expected values: name as
// written, addr as nginx logs it.
func srv(name, addr string, line int, mod ...func(*Server)) Server {
	s := Server{Name: name, Addr: addr, Line: line, Weight: 1, MaxFails: 1, FailTimeout: 10 * time.Second}
	for _, m := range mod {
		m(&s)
	}
	return s
}

func TestParse(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want Block
	}{
		{
			name: "every parameter",
			src: `# front servers
upstream back {
    server 10.0.0.1:8080 weight=5 max_fails=3 fail_timeout=30s;
    server 10.0.0.2:8080 max_conns=100;   # a comment after a directive
    server 10.0.0.3:8080 down;
    server unix:/run/spare.sock backup max_fails=0;
}
`,
			want: Block{File: "up.conf", Name: "back", Line: 2, Servers: []Server{
				srv("10.0.0.1:8080", "10.0.0.1:8080", 3, func(s *Server) { s.Weight, s.MaxFails, s.FailTimeout = 5, 3, 30*time.Second }),
				srv("10.0.0.2:8080", "10.0.0.2:8080", 4, func(s *Server) { s.MaxConns = 100 }),
				srv("10.0.0.3:8080", "10.0.0.3:8080", 5, func(s *Server) { s.Down = true }),
				srv("unix:/run/spare.sock", "unix:/run/spare.sock", 6, func(s *Server) { s.Backup, s.MaxFails = true, 0 }),
			}},
		},
		{
			name: "tokens span lines",
			src:  "upstream\nback\n{\nserver\na\nweight=2\n;}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{srv("a", "a:80", 4, func(s *Server) { s.Weight = 2 })}},
		},
		{
			name: "one line, no spaces around punctuation",
			src:  "upstream back{server a;server b backup;}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{srv("a", "a:80", 1), srv("b", "b:80", 1, func(s *Server) { s.Backup = true })}},
		},
		{
			name: "CRLF and tabs",
			src:  "upstream back {\r\n\tserver a;\r\n\tserver b;\r\n}\r\n",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{srv("a", "a:80", 2), srv("b", "b:80", 3)}},
		},
		{
			// nginx starts a comment only where a token could start.
			name: "hash inside a word",
			src:  "upstream back { server a#1; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{srv("a#1", "a#1:80", 1)}},
		},
		{
			name: "quotes and escapes",
			src:  `upstream "my back" { server "a b" weight=2; server 'c\'d'; server e\"f; }`,
			want: Block{File: "up.conf", Name: "my back", Line: 1, Servers: []Server{
				srv("a b", "a b:80", 1, func(s *Server) { s.Weight = 2 }), srv("c'd", "c'd:80", 1), srv(`e"f`, `e"f:80`, 1),
			}},
		},
		{
			name: "repeated parameter: the last wins, as in nginx",
			src:  "upstream back { server a weight=2 weight=3; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{srv("a", "a:80", 1, func(s *Server) { s.Weight = 3 })}},
		},
		{
			name: "connection directives are skipped, the zone kept",
			src:  "upstream back {\n zone back 64k;\n server a;\n keepalive 32;\n keepalive_timeout 60s;\n server b;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Zone: "back", Servers: []Server{srv("a", "a:80", 3), srv("b", "b:80", 6)}},
		},
		{
			name: "every primary down, with a backup",
			src:  "upstream back {\n server a down;\n server b backup;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{
				srv("a", "a:80", 2, func(s *Server) { s.Down = true }), srv("b", "b:80", 3, func(s *Server) { s.Backup = true }),
			}},
		},
		{
			// nginx logs a server without a port on port 80, and an IPv4
			// address as it prints it; it hashes the text as written.
			name: "addresses: default port, IPv4 as nginx prints it, IPv6, unix",
			src: `upstream back {
    server 10.0.0.1;
    server 010.0.0.2:080;
    server 1..2.3;
    server [::1];
    server [0:0::2]:8080;
    server UNIX:/run/a.sock;
    server 10.0.0.3:65535;
}`,
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{
				srv("10.0.0.1", "10.0.0.1:80", 2),
				srv("010.0.0.2:080", "10.0.0.2:080", 3),
				srv("1..2.3", "1.0.2.3:80", 4), // ngx_inet_addr reads an empty octet as 0
				srv("[::1]", "[::1]:80", 5),
				srv("[0:0::2]:8080", "[::2]:8080", 6),
				srv("UNIX:/run/a.sock", "UNIX:/run/a.sock", 7),
				srv("10.0.0.3:65535", "10.0.0.3:65535", 8),
			}},
		},
		{
			// nginx accepts a repeated server: two peers (see Block.Peers).
			name: "duplicate servers",
			src:  "upstream back {\n server a;\n server a:80 backup;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Servers: []Server{
				srv("a", "a:80", 2), srv("a:80", "a:80", 3, func(s *Server) { s.Backup = true }),
			}},
		},
		{
			name: "hash consistent",
			src:  "upstream back {\n hash $request_uri consistent;\n server a weight=2 down;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1,
				Method:  Method{Name: "hash", Key: "$request_uri", Consistent: true, Line: 2},
				Servers: []Server{srv("a", "a:80", 3, func(s *Server) { s.Weight, s.Down = 2, true })},
			},
		},
		{
			name: "hash with an empty key",
			src:  "upstream back { hash \"\"; server a; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "hash", Line: 1}, Servers: []Server{srv("a", "a:80", 1)}},
		},
		{
			// ip_hash allows weight (since nginx 1.3.1) and down.
			name: "ip_hash",
			src:  "upstream back { ip_hash; server a weight=3; server b down; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "ip_hash", Line: 1},
				Servers: []Server{srv("a", "a:80", 1, func(s *Server) { s.Weight = 3 }), srv("b", "b:80", 1, func(s *Server) { s.Down = true })}},
		},
		{
			name: "least_conn allows backup",
			src:  "upstream back { least_conn; server a; server b backup; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "least_conn", Line: 1},
				Servers: []Server{srv("a", "a:80", 1), srv("b", "b:80", 1, func(s *Server) { s.Backup = true })}},
		},
		{
			name: "random",
			src:  "upstream back { random; server a; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "random", Line: 1}, Servers: []Server{srv("a", "a:80", 1)}},
		},
		{
			name: "random two least_conn is random two",
			src:  "upstream back { random two least_conn; server a; }",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "random", Two: true, Line: 1}, Servers: []Server{srv("a", "a:80", 1)}},
		},
		{
			// nginx warns "load balancing method redefined"; the last wins.
			name: "a second method replaces the first",
			src:  "upstream back {\n hash $x;\n server a;\n least_conn;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "least_conn", Line: 4}, Servers: []Server{srv("a", "a:80", 3)}},
		},
		{
			// nginx checks backup against the method in force at the
			// server line: a backup before hash is accepted.
			name: "backup before hash",
			src:  "upstream back {\n server a;\n server b backup;\n hash $x;\n}",
			want: Block{File: "up.conf", Name: "back", Line: 1, Method: Method{Name: "hash", Key: "$x", Line: 4},
				Servers: []Server{srv("a", "a:80", 2), srv("b", "b:80", 3, func(s *Server) { s.Backup = true })}},
		},
		{
			name: "inside http, other directives and blocks skipped",
			src: `worker_processes 1;
events { worker_connections 64; }
http {
    include mime.types;
    map $uri $x { default 1; }
    upstream back { server a; }
    server {
        listen 8080;
        location / { proxy_pass http://back; }
    }
}
`,
			want: Block{File: "up.conf", Name: "back", Line: 6, Servers: []Server{srv("a", "a:80", 6)}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Parse("up.conf", []byte(tt.src))
			require.NoError(t, err)
			assert.Equal(t, tt.want, *b)
		})
	}
}

func TestParseErrors(t *testing.T) {
	const big = "1073741824" // balancer.MaxWeightSum
	tests := []struct {
		name string
		src  string
		line int
		msg  string
		err  error
	}{
		{"unknown parameter", "upstream back {\n  server a wieght=5;\n}\n", 2, `unknown parameter "wieght=5"`, ErrInvalidParam},
		{"flag with a value", "upstream back {\n  server a backup=1;\n}\n", 2, `unknown parameter "backup=1"`, ErrInvalidParam},
		{"bad number", "upstream back {\n  server a weight=x;\n}\n", 2, `bad number in "weight=x": want a whole number up to ` + big, ErrInvalidParam},
		{"negative number", "upstream back {\n  server a max_fails=-1;\n}\n", 2, `bad number in "max_fails=-1": want a whole number up to 2147483647`, ErrInvalidParam},
		{"empty number", "upstream back {\n  server a max_conns=;\n}\n", 2, `bad number in "max_conns=": want a whole number up to 2147483647`, ErrInvalidParam},
		{"weight too big", "upstream back { server a weight=1073741825; }", 1, `bad number in "weight=1073741825": want a whole number up to ` + big, ErrInvalidParam},
		{"weight 0", "upstream back {\n  server a;\n  server b weight=0;\n}\n", 3, `"weight=0": weight must be at least 1`, ErrInvalidParam},
		{"bad time", "upstream back {\n  server a fail_timeout=5q;\n}\n", 2, `bad time in "fail_timeout=5q": want e.g. 10s, 1m30s, 500ms`, ErrInvalidParam},
		{"missing ; before }", "upstream back {\n  server a\n}\n", 2, `missing ";" after "a"`, ErrSyntax},
		{"missing ; between servers", "upstream back {\n  server a weight=2\n  server b;\n}\n", 2, `missing ";" after "weight=2"`, ErrSyntax},
		{"missing ; at end of file", "upstream back {\n  server a\n", 2, `missing ";" after "a"`, ErrSyntax},
		{"missing }", "upstream back {\n  server a;\n", 3, `unexpected end of file, missing "}"`, ErrSyntax},
		{"missing } without final newline", "upstream back {\n  server a;", 2, `unexpected end of file, missing "}"`, ErrSyntax},
		{"backup only", "upstream back {\n  server a backup;\n  server b backup;\n}\n", 2, `backup server "a" but no primary server in upstream "back"`, ErrNoServers},
		{"empty block", "# nothing\nupstream back {\n  # server a;\n}\n", 2, `no servers in upstream "back"`, ErrNoServers},
		{"unknown directive", "upstream back {\n  server a;\n  weight 16;\n}\n", 3, `unknown directive "weight" in upstream "back"`, ErrSyntax},
		{"nginx plus directive", "upstream back {\n  sticky cookie x;\n  server a;\n}\n", 2, `unknown directive "sticky" in upstream "back"`, ErrSyntax},
		{"server out of its block", "upstream back { server a; }\nserver b;\n", 2, `"server" directive is not allowed here`, ErrSyntax},
		{"trailing }", "upstream back { server a; }\n}\n", 2, `unexpected "}"`, ErrSyntax},
		{"empty file", "", 1, `no "upstream" block`, ErrNoUpstream},
		{"comments only", "# upstream back {}\n", 2, `no "upstream" block`, ErrNoUpstream},
		{"http without upstream", "http {\n}\n", 3, `no "upstream" block`, ErrNoUpstream},
		{"http not closed", "http {\n upstream back { server a; }\n", 3, `unexpected end of file, missing "}"`, ErrSyntax},
		{"skipped block not closed", "http {\n server {\n location / {\n}\n", 5, `unexpected end of file, missing "}"`, ErrSyntax},
		{"http with an argument", "http x {\n}\n", 1, `"http" takes no arguments, only a block`, ErrSyntax},
		{"nested http", "http {\n http {\n }\n}\n", 2, `"http" directive is not allowed here`, ErrSyntax},
		{"duplicate upstream", "http {\n upstream u { server a; }\n upstream u { server b; }\n}\n", 3, `duplicate upstream "u", first on line 2`, ErrSyntax},
		{"two blocks", "upstream u { server a; }\n\nupstream v { server b; }\n", 3, `2 upstream blocks ("u" on line 1, "v" on line 3): choose one by name`, ErrManyUpstreams},
		{"port 0", "upstream back {\n  server 10.0.0.1:0;\n}\n", 2, `invalid port in upstream "10.0.0.1:0"`, ErrInvalidAddr},
		{"port 65536", "upstream back { server 10.0.0.1:65536; }", 1, `invalid port in upstream "10.0.0.1:65536"`, ErrInvalidAddr},
		{"empty port", "upstream back { server a:; }", 1, `invalid port in upstream "a:"`, ErrInvalidAddr},
		{"signed port", "upstream back { server a:+80; }", 1, `invalid port in upstream "a:+80"`, ErrInvalidAddr},
		{"two ports", "upstream back { server a:80:81; }", 1, `invalid port in upstream "a:80:81"`, ErrInvalidAddr},
		{"huge port", "upstream back { server a:99999999999999999999999; }", 1, `invalid port in upstream "a:99999999999999999999999"`, ErrInvalidAddr},
		{"scheme", "upstream back {\n  server http://10.0.0.1;\n}\n", 2, `invalid host in upstream "http://10.0.0.1"`, ErrInvalidAddr},
		{"uri", "upstream back { server 10.0.0.1:80/x; }", 1, `invalid host in upstream "10.0.0.1:80/x"`, ErrInvalidAddr},
		{"query", "upstream back { server a?x; }", 1, `invalid host in upstream "a?x"`, ErrInvalidAddr},
		{"no host", "upstream back { server :80; }", 1, `no host in upstream ":80"`, ErrInvalidAddr},
		{"IPv6 unclosed", "upstream back { server [::1; }", 1, `invalid host in upstream "[::1"`, ErrInvalidAddr},
		{"IPv6 text after ]", "upstream back { server [::1]x; }", 1, `invalid host in upstream "[::1]x"`, ErrInvalidAddr},
		{"IPv6 port 0", "upstream back { server [::1]:0; }", 1, `invalid port in upstream "[::1]:0"`, ErrInvalidAddr},
		{"IPv6 empty", "upstream back { server []; }", 1, `no host in upstream "[]"`, ErrInvalidAddr},
		{"IPv6 bad", "upstream back { server [::g]; }", 1, `invalid IPv6 address in upstream "[::g]"`, ErrInvalidAddr},
		{"IPv6 zone", "upstream back { server [fe80::1%lo]; }", 1, `invalid IPv6 address in upstream "[fe80::1%lo]"`, ErrInvalidAddr},
		{"IPv6 without brackets", "upstream back { server ::1; }", 1, `invalid port in upstream "::1"`, ErrInvalidAddr},
		{"unix without path", "upstream back { server unix:; }", 1, `no path in the unix domain socket in upstream "unix:"`, ErrInvalidAddr},
		{"unix path too long", "upstream back { server unix:/" + strings.Repeat("x", 107) + "; }", 1, `too long path in the unix domain socket in upstream "unix:/` + strings.Repeat("x", 107) + `"`, ErrInvalidAddr},
		{"hash with backup", "upstream back {\n  hash $x;\n  server a;\n  server b backup;\n}\n", 4, `balancing method "hash" (line 2) does not support parameter "backup"`, ErrInvalidParam},
		{"ip_hash with backup", "upstream back { ip_hash; server a; server b backup; }", 1, `balancing method "ip_hash" (line 1) does not support parameter "backup"`, ErrInvalidParam},
		{"random with backup", "upstream back { random two; server a; server b backup; }", 1, `balancing method "random" (line 1) does not support parameter "backup"`, ErrInvalidParam},
		{"hash without key", "upstream back {\n  hash;\n  server a;\n}\n", 2, `invalid number of arguments in "hash" directive`, ErrSyntax},
		{"hash with 3 arguments", "upstream back { hash $x consistent y; server a; }", 1, `invalid number of arguments in "hash" directive`, ErrSyntax},
		{"hash with a bad flag", "upstream back { hash $x CONSISTENT; server a; }", 1, `invalid parameter "CONSISTENT" in "hash" directive`, ErrInvalidParam},
		{"ip_hash with an argument", "upstream back { ip_hash x; server a; }", 1, `invalid number of arguments in "ip_hash" directive`, ErrSyntax},
		{"least_conn with an argument", "upstream back { least_conn x; server a; }", 1, `invalid number of arguments in "least_conn" directive`, ErrSyntax},
		{"random least_conn", "upstream back { random least_conn; server a; }", 1, `invalid parameter "least_conn" in "random" directive`, ErrInvalidParam},
		{"random two x", "upstream back { random two x; server a; }", 1, `invalid parameter "x" in "random" directive`, ErrInvalidParam},
		{"random with 3 arguments", "upstream back { random two least_conn x; server a; }", 1, `invalid number of arguments in "random" directive`, ErrSyntax},
		{"method without ;", "upstream back {\n  least_conn\n  server a;\n}\n", 2, `missing ";" after "least_conn"`, ErrSyntax},
		{"method with a block", "upstream back {\n  least_conn {\n}\n", 2, `unexpected "{" after "least_conn"`, ErrSyntax},
		{"no name", "upstream {\n  server a;\n}\n", 1, `missing upstream name before "{"`, ErrSyntax},
		{"two names", "upstream a b {\n  server a;\n}\n", 1, `unexpected "b" after the upstream name`, ErrSyntax},
		{"no block", "upstream back;\n", 1, `missing "{" after "back"`, ErrSyntax},
		{"empty name", `upstream "" { server a; }`, 1, `empty upstream name`, ErrSyntax},
		{"stray ;", "upstream back {\n  ;\n}\n", 2, `unexpected ";"`, ErrSyntax},
		{"nested block", "upstream back {\n  server a {\n}\n", 2, `unexpected "{" after "a"`, ErrSyntax},
		{"server without address", "upstream back {\n  server;\n}\n", 2, `missing address after "server"`, ErrSyntax},
		{"empty address", "upstream back {\n  server \"\";\n}\n", 2, `empty server address`, ErrSyntax},
		{"unterminated quote", "upstream back {\n  server \"a;\n}\n", 2, `unterminated quoted string`, ErrSyntax},
		{"text after a quote", "upstream back {\n  server \"a\"b;\n}\n", 2, `unexpected "b" after quoted string`, ErrSyntax},
		{"weights overflow", "upstream back {\n  server a weight=" + big + ";\n  server b;\n}\n", 3, `weights sum past ` + big + ` at server "b"`, balancer.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Parse("up.conf", []byte(tt.src))
			require.Error(t, err)
			assert.Nil(t, b)
			var pe *ParseError
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, ParseError{File: "up.conf", Line: tt.line, Msg: tt.msg, Err: tt.err}, *pe)
			assert.Equal(t, fmt.Sprintf("up.conf:%d: %s", tt.line, tt.msg), err.Error())
			assert.ErrorIs(t, err, tt.err)
		})
	}
}

func TestParseTime(t *testing.T) {
	const day = 24 * time.Hour
	tests := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"10", 10 * time.Second, true}, // a bare number is seconds
		{"10s", 10 * time.Second, true},
		{"0", 0, true},
		{"1m", time.Minute, true},
		{"1m30s", 90 * time.Second, true},
		{"1m30", 90 * time.Second, true}, // trailing bare number: seconds
		{"500ms", 500 * time.Millisecond, true},
		{"1s500ms", 1500 * time.Millisecond, true},
		{"2h", 2 * time.Hour, true},
		{"1d12h", 36 * time.Hour, true},
		{"1w", 7 * day, true},
		{"1M", 30 * day, true},
		{"1y", 365 * day, true},
		{"1y1M1w1d1h1m1s1ms", 365*day + 30*day + 7*day + day + time.Hour + time.Minute + time.Second + time.Millisecond, true},
		{"", 0, false},
		{"s", 0, false},
		{"10x", 0, false},
		{"1s1m", 0, false}, // units must decrease
		{"1m1m", 0, false}, // each unit once
		{"1s30", 0, false}, // the bare seconds come after s
		{"1ms1s", 0, false},
		{"-1s", 0, false},
		{"1.5s", 0, false},
		{"292y", 292 * 365 * day, true},
		{"293y", 0, false}, // past time.Duration
		{"99999999999999999999", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseTime(tt.in)
			assert.Equal(t, tt.ok, ok, "parseTime(%q) ok", tt.in)
			if tt.ok {
				assert.Equal(t, tt.want, got, "parseTime(%q)", tt.in)
			}
		})
	}
}

func TestPeers(t *testing.T) {
	b, err := Parse("up.conf", []byte("upstream back {\n server a weight=3 max_fails=0 fail_timeout=1m max_conns=7;\n server b down;\n server c backup;\n}"))
	require.NoError(t, err)
	peers := b.Peers()
	require.Len(t, peers, 3)
	a, bb, c := peers[0], peers[1], peers[2]
	assert.Equal(t, "a:80", a.Addr(), "the logged address, with nginx's default port")
	assert.Equal(t, 3, a.Weight())
	assert.Equal(t, 0, a.MaxFails())
	assert.Equal(t, time.Minute, a.FailTimeout())
	assert.Equal(t, 7, a.MaxConns())
	assert.False(t, a.IsBackup())
	assert.False(t, a.IsDown())
	assert.True(t, bb.IsDown())
	assert.Equal(t, defaults.MaxFails, bb.MaxFails())
	assert.Equal(t, defaults.FailTimeout, bb.FailTimeout())
	assert.True(t, c.IsBackup())
	// The hash text is the server as written, which nginx's hash KEY
	// consistent hashes ("a", not "a:80").
	for i, want := range []string{"a", "b", "c"} {
		assert.Equal(t, want, peers[i].HashText(), "server %d", i)
	}
	assert.Equal(t, "d:80", Server{Addr: "d:80", Weight: 1}.Peer().HashText(), "no Name: the address")

	// Each call gives fresh peers: a peer belongs to one picker.
	_, err = balancer.NewSmoothWRR(peers)
	require.NoError(t, err)
	_, err = balancer.NewSmoothWRR(b.Peers())
	assert.NoError(t, err)
}

func TestParseNamed(t *testing.T) {
	const two = "http {\n  upstream u { server a; }\n  upstream v { server b; }\n}\n"
	tests := []struct {
		name, src, upstream string
		want                string // the block's name, or the error
		err                 error
	}{
		{"by name", two, "v", "v", nil},
		{"the first by name", two, "u", "u", nil},
		{"the only block", "upstream u { server a; }", "", "u", nil},
		{"the only block by name", "upstream u { server a; }", "u", "u", nil},
		{"several, no name", two, "", `up.conf:3: 2 upstream blocks ("u" on line 2, "v" on line 3): choose one by name`, ErrManyUpstreams},
		{"unknown name", two, "w", `up.conf:2: no upstream "w"; there is "u" on line 2, "v" on line 3`, ErrNoUpstream},
		{"none", "http {\n}\n", "u", `up.conf:3: no "upstream" block`, ErrNoUpstream},
		{"parse error first", "upstream u { server a:0; }\nupstream v { server b; }", "v", `up.conf:1: invalid port in upstream "a:0"`, ErrInvalidAddr},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := ParseNamed("up.conf", []byte(tt.src), tt.upstream)
			if tt.err != nil {
				assert.Nil(t, b)
				require.ErrorIs(t, err, tt.err)
				assert.Equal(t, tt.want, err.Error())
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, b.Name)
		})
	}
	blocks, err := ParseAll("up.conf", []byte(two))
	require.NoError(t, err)
	require.Len(t, blocks, 2)
	assert.Equal(t, []string{"u", "v"}, []string{blocks[0].Name, blocks[1].Name})
}

// TestPeers_repeatedAddress: servers that share an address, as nginx
// accepts them, are peers of their own for every picker, with their own
// parameters and each line's text as its hash text.
func TestPeers_repeatedAddress(t *testing.T) {
	tests := []struct {
		name, src string
		addrs     []string
		keys      []string
	}{
		{"same text", "upstream u {\n server a weight=2;\n server b;\n server a max_fails=3;\n}", []string{"a:80", "b:80", "a:80"}, []string{"a", "b", "a"}},
		{"default port written out", "upstream u {\n server 10.0.0.1;\n server 10.0.0.1:80 weight=2;\n}", []string{"10.0.0.1:80", "10.0.0.1:80"}, []string{"10.0.0.1", "10.0.0.1:80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Parse("up.conf", []byte(tt.src))
			require.NoError(t, err, "nginx accepts repeated servers")
			assert.NoError(t, b.CheckPeers())
			for _, a := range balancer.Algorithms() {
				peers := b.Peers()
				p, err := a.New(peers)
				require.NoError(t, err, a.Name)
				got := p.Peers()
				require.Len(t, got, len(tt.addrs), a.Name)
				for i, q := range got {
					assert.Same(t, peers[i], q, "%s: server %d is its own peer", a.Name, i)
					assert.Equal(t, tt.addrs[i], q.Addr())
					assert.Equal(t, tt.keys[i], q.HashText())
					assert.Equal(t, b.Servers[i].Weight, q.Weight())
					assert.Equal(t, b.Servers[i].MaxFails, q.MaxFails())
				}
			}
		})
	}
}

func TestMethodString(t *testing.T) {
	tests := []struct {
		m    Method
		want string
	}{
		{Method{}, "round robin"},
		{Method{Name: "hash", Key: "$uri"}, "hash $uri"},
		{Method{Name: "hash", Key: "$uri", Consistent: true}, "hash $uri consistent"},
		{Method{Name: "ip_hash"}, "ip_hash"},
		{Method{Name: "least_conn"}, "least_conn"},
		{Method{Name: "random"}, "random"},
		{Method{Name: "random", Two: true}, "random two"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, tt.m.String())
	}
}
