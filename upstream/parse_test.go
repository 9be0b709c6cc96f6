package upstream

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// srv is a server with nginx's defaults, for expected values.
func srv(addr string, line int, mod ...func(*Server)) Server {
	s := Server{Addr: addr, Line: line, Weight: 1, MaxFails: 1, FailTimeout: 10 * time.Second}
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
			want: Block{Name: "back", Line: 2, Servers: []Server{
				srv("10.0.0.1:8080", 3, func(s *Server) { s.Weight, s.MaxFails, s.FailTimeout = 5, 3, 30*time.Second }),
				srv("10.0.0.2:8080", 4, func(s *Server) { s.MaxConns = 100 }),
				srv("10.0.0.3:8080", 5, func(s *Server) { s.Down = true }),
				srv("unix:/run/spare.sock", 6, func(s *Server) { s.Backup, s.MaxFails = true, 0 }),
			}},
		},
		{
			name: "tokens span lines",
			src:  "upstream\nback\n{\nserver\na\nweight=2\n;}",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a", 4, func(s *Server) { s.Weight = 2 })}},
		},
		{
			name: "one line, no spaces around punctuation",
			src:  "upstream back{server a;server b backup;}",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a", 1), srv("b", 1, func(s *Server) { s.Backup = true })}},
		},
		{
			name: "CRLF and tabs",
			src:  "upstream back {\r\n\tserver a;\r\n\tserver b;\r\n}\r\n",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a", 2), srv("b", 3)}},
		},
		{
			// nginx starts a comment only where a token could start.
			name: "hash inside a word",
			src:  "upstream back { server a#1; }",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a#1", 1)}},
		},
		{
			name: "quotes and escapes",
			src:  `upstream "my back" { server "a b" weight=2; server 'c\'d'; server e\"f; }`,
			want: Block{Name: "my back", Line: 1, Servers: []Server{
				srv("a b", 1, func(s *Server) { s.Weight = 2 }), srv("c'd", 1), srv(`e"f`, 1),
			}},
		},
		{
			name: "repeated parameter: the last wins, as in nginx",
			src:  "upstream back { server a weight=2 weight=3; }",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a", 1, func(s *Server) { s.Weight = 3 })}},
		},
		{
			name: "connection directives are skipped",
			src:  "upstream back {\n zone back 64k;\n server a;\n keepalive 32;\n keepalive_timeout 60s;\n server b;\n}",
			want: Block{Name: "back", Line: 1, Servers: []Server{srv("a", 3), srv("b", 6)}},
		},
		{
			name: "every primary down, with a backup",
			src:  "upstream back {\n server a down;\n server b backup;\n}",
			want: Block{Name: "back", Line: 1, Servers: []Server{
				srv("a", 2, func(s *Server) { s.Down = true }), srv("b", 3, func(s *Server) { s.Backup = true }),
			}},
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
		{"duplicate server", "upstream back {\n  server a;\n  server b;\n  server a backup;\n}\n", 4, `duplicate server "a", first on line 2`, balancer.ErrDuplicatePeer},
		{"backup only", "upstream back {\n  server a backup;\n  server b backup;\n}\n", 2, `backup server "a" but no primary server in upstream "back"`, ErrNoServers},
		{"empty block", "# nothing\nupstream back {\n  # server a;\n}\n", 2, `no servers in upstream "back"`, ErrNoServers},
		{"unknown directive", "upstream back {\n  server a;\n  weight 16;\n}\n", 3, `unknown directive "weight", only "server" is supported`, ErrSyntax},
		{"balancing method", "upstream back {\n  least_conn;\n  server a;\n}\n", 2, `"least_conn" selects another balancing method; remove it and choose one with -algo`, ErrSyntax},
		{"trailing directive", "upstream back { server a; }\nserver b;\n", 2, `unexpected "server" after the upstream block`, ErrSyntax},
		{"trailing }", "upstream back { server a; }\n}\n", 2, `unexpected "}" after the upstream block`, ErrSyntax},
		{"empty file", "", 1, `unexpected end of file, expecting "upstream"`, ErrSyntax},
		{"comments only", "# upstream back {}\n", 2, `unexpected end of file, expecting "upstream"`, ErrSyntax},
		{"not an upstream", "http {\n}\n", 1, `unknown directive "http", expecting "upstream"`, ErrSyntax},
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
	assert.Equal(t, "a", a.Addr())
	assert.Equal(t, 3, a.Weight())
	assert.Equal(t, 0, a.MaxFails())
	assert.Equal(t, time.Minute, a.FailTimeout())
	assert.Equal(t, 7, a.MaxConns())
	assert.False(t, a.IsBackup())
	assert.False(t, a.IsDown())
	assert.True(t, bb.IsDown())
	assert.Equal(t, balancer.DefaultMaxFails, bb.MaxFails())
	assert.Equal(t, balancer.DefaultFailTimeout, bb.FailTimeout())
	assert.True(t, c.IsBackup())

	// Each call gives fresh peers: a peer belongs to one picker.
	_, err = balancer.NewSmoothWRR(peers)
	require.NoError(t, err)
	_, err = balancer.NewSmoothWRR(b.Peers())
	assert.NoError(t, err)
}
