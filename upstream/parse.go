package upstream

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lbgo/balancer"
)

// Parse reads the single upstream block in src; filename is used only in
// error messages. On failure it returns a *ParseError naming the line.
// Parse never panics, whatever src holds.
func Parse(filename string, src []byte) (*Block, error) {
	p := &parser{lexer: lexer{file: filename, src: src, line: 1}}
	b, err := p.block()
	if err != nil {
		return nil, err
	}
	return b, nil
}

type parser struct {
	lexer
	seen map[string]int // server address -> line
	sum  int64          // weights so far, checked against MaxWeightSum
}

// directive reads the words of one directive and the token that ends it.
func (p *parser) directive() ([]token, token, *ParseError) {
	var words []token
	for {
		t, err := p.next()
		if err != nil || t.kind != tokWord {
			return words, t, err
		}
		words = append(words, t)
	}
}

// block parses `upstream NAME { server ...; ... }` and nothing after it.
func (p *parser) block() (*Block, *ParseError) {
	words, end, err := p.directive()
	switch {
	case err != nil:
		return nil, err
	case len(words) == 0:
		return nil, p.errorf(end.line, ErrSyntax, "unexpected %v, expecting \"upstream\"", end)
	case words[0].text != "upstream":
		return nil, p.errorf(words[0].line, ErrSyntax, "unknown directive %v, expecting \"upstream\"", words[0])
	case end.kind != tokOpen:
		last := words[len(words)-1]
		return nil, p.errorf(last.line, ErrSyntax, "missing \"{\" after %v", last)
	case len(words) == 1:
		return nil, p.errorf(end.line, ErrSyntax, "missing upstream name before \"{\"")
	case len(words) > 2:
		return nil, p.errorf(words[2].line, ErrSyntax, "unexpected %v after the upstream name", words[2])
	case words[1].text == "":
		return nil, p.errorf(words[1].line, ErrSyntax, "empty upstream name")
	}
	b := &Block{Name: words[1].text, Line: words[0].line}
	p.seen = make(map[string]int)
	for {
		words, end, err := p.directive()
		if err != nil {
			return nil, err
		}
		if len(words) == 0 {
			if end.kind == tokClose {
				break
			}
			if end.kind == tokEOF {
				return nil, p.errorf(end.line, ErrSyntax, "unexpected end of file, missing \"}\"")
			}
			return nil, p.errorf(end.line, ErrSyntax, "unexpected %v", end)
		}
		if ignored[words[0].text] && end.kind == tokSemi {
			continue
		}
		if balancingMethod[words[0].text] {
			return nil, p.errorf(words[0].line, ErrSyntax, "%v selects another balancing method; remove it and choose one with -algo", words[0])
		}
		s, err := p.server(words, end)
		if err != nil {
			return nil, err
		}
		b.Servers = append(b.Servers, s)
	}
	if t, err := p.next(); err != nil || t.kind != tokEOF {
		if err != nil {
			return nil, err
		}
		return nil, p.errorf(t.line, ErrSyntax, "unexpected %v after the upstream block", t)
	}
	return b, p.check(b)
}

// ignored lists the upstream directives that tune connections, not the
// choice of server, so a block copied from a real configuration parses
// unchanged; their arguments are not checked.
var ignored = map[string]bool{
	"keepalive": true, "keepalive_requests": true, "keepalive_time": true,
	"keepalive_timeout": true, "zone": true, "ntlm": true,
	"resolver": true, "resolver_timeout": true,
}

// balancingMethod lists the directives that replace round-robin: tracing
// such a block with round-robin would silently show the wrong order.
var balancingMethod = map[string]bool{
	"least_conn": true, "hash": true, "ip_hash": true, "random": true,
	"least_time": true, "sticky": true,
}

// check rejects what nginx rejects once the block is read: no server, or
// backup servers only.
func (p *parser) check(b *Block) *ParseError {
	if len(b.Servers) == 0 {
		return p.errorf(b.Line, ErrNoServers, "no servers in upstream %q", b.Name)
	}
	for _, s := range b.Servers {
		if !s.Backup {
			return nil
		}
	}
	s := b.Servers[0]
	return p.errorf(s.Line, ErrNoServers, "backup server %q but no primary server in upstream %q", s.Addr, b.Name)
}

// server parses one `server ADDR [PARAM...]` directive ended by end.
func (p *parser) server(words []token, end token) (Server, *ParseError) {
	last := words[len(words)-1]
	switch {
	case words[0].text != "server":
		return Server{}, p.errorf(words[0].line, ErrSyntax, "unknown directive %v, only \"server\" is supported", words[0])
	case end.kind == tokOpen:
		return Server{}, p.errorf(end.line, ErrSyntax, "unexpected \"{\" after %v", last)
	case end.kind != tokSemi:
		return Server{}, p.errorf(last.line, ErrSyntax, "missing \";\" after %v", last)
	case len(words) == 1:
		return Server{}, p.errorf(words[0].line, ErrSyntax, "missing address after \"server\"")
	case words[1].text == "":
		return Server{}, p.errorf(words[1].line, ErrSyntax, "empty server address")
	}
	s := Server{
		Addr:        words[1].text,
		Line:        words[0].line,
		Weight:      balancer.DefaultWeight,
		MaxFails:    balancer.DefaultMaxFails,
		FailTimeout: balancer.DefaultFailTimeout,
	}
	for i, w := range words[2:] {
		if w.text == "server" {
			// The previous directive ran on: its ";" is missing.
			prev := words[i+1]
			return Server{}, p.errorf(prev.line, ErrSyntax, "missing \";\" after %v", prev)
		}
		if err := p.param(&s, w); err != nil {
			return Server{}, err
		}
	}
	if first, dup := p.seen[s.Addr]; dup {
		return Server{}, p.errorf(s.Line, balancer.ErrDuplicatePeer, "duplicate server %q, first on line %d", s.Addr, first)
	}
	p.seen[s.Addr] = s.Line
	if p.sum += int64(s.Weight); p.sum > balancer.MaxWeightSum {
		return Server{}, p.errorf(s.Line, balancer.ErrInvalidConfig, "weights sum past %d at server %q", balancer.MaxWeightSum, s.Addr)
	}
	return s, nil
}

// param applies one server parameter to s, as ngx_http_upstream_server
// reads it; a repeated parameter overrides the earlier one, as in nginx.
func (p *parser) param(s *Server, w token) *ParseError {
	key, val, eq := strings.Cut(w.text, "=")
	var err *ParseError
	switch {
	case !eq && key == "backup":
		s.Backup = true
	case !eq && key == "down":
		s.Down = true
	case eq && key == "weight":
		// nginx rejects weight=0; the bound keeps the sum in range.
		if s.Weight, err = p.number(w, val, balancer.MaxWeightSum); err == nil && s.Weight == 0 {
			err = p.errorf(w.line, ErrInvalidParam, "%v: weight must be at least 1", w)
		}
	case eq && key == "max_fails":
		s.MaxFails, err = p.number(w, val, math.MaxInt32)
	case eq && key == "max_conns":
		s.MaxConns, err = p.number(w, val, math.MaxInt32)
	case eq && key == "fail_timeout":
		var ok bool
		if s.FailTimeout, ok = parseTime(val); !ok {
			err = p.errorf(w.line, ErrInvalidParam, "bad time in %v: want e.g. 10s, 1m30s, 500ms", w)
		}
	default:
		err = p.errorf(w.line, ErrInvalidParam, "unknown parameter %v", w)
	}
	return err
}

// number parses the value of parameter w: decimal digits only, as nginx's
// ngx_atoi reads them, at most limit.
func (p *parser) number(w token, val string, limit int) (int, *ParseError) {
	n, err := strconv.Atoi(val)
	if err != nil || strings.Trim(val, "0123456789") != "" || n > limit {
		return 0, p.errorf(w.line, ErrInvalidParam, "bad number in %v: want a whole number up to %d", w, limit)
	}
	return n, nil
}

// timeUnits are nginx's time units, largest first; ngx_parse_time accepts
// each at most once, in this order. nginx takes fail_timeout in whole
// seconds and rejects ms there; it is accepted here because the library's
// clock has full resolution.
var timeUnits = []struct {
	name string
	d    time.Duration
}{
	{"y", 365 * 24 * time.Hour},
	{"M", 30 * 24 * time.Hour},
	{"w", 7 * 24 * time.Hour},
	{"d", 24 * time.Hour},
	{"h", time.Hour},
	{"m", time.Minute},
	{"s", time.Second},
	{"ms", time.Millisecond},
}

// parseTime parses nginx's time syntax: numbers with units in decreasing
// order, like 1m30s; a trailing bare number is seconds, so "90" is 90s and
// "1m30" is 90s.
func parseTime(s string) (time.Duration, bool) {
	if s == "" {
		return 0, false
	}
	var total time.Duration
	allowed := 0 // index of the largest unit still allowed
	for s != "" {
		digits := len(s) - len(strings.TrimLeft(s, "0123456789"))
		n, err := strconv.ParseInt(s[:digits], 10, 64)
		if digits == 0 || err != nil {
			return 0, false
		}
		s = s[digits:]
		u := unitIndex(s)
		if u < allowed {
			return 0, false
		}
		if s != "" {
			s = s[len(timeUnits[u].name):]
		}
		allowed = u + 1
		d := timeUnits[u].d
		if n > int64(math.MaxInt64-total)/int64(d) {
			return 0, false
		}
		total += time.Duration(n) * d
	}
	return total, true
}

// unitIndex returns the index in timeUnits of the unit s starts with, the
// index of "s" for an empty s (a bare number), or -1.
func unitIndex(s string) int {
	if s == "" {
		s = "s"
	}
	u := -1
	for i, t := range timeUnits {
		// Prefer the longest match, so "ms" is not read as "m" then "s".
		if strings.HasPrefix(s, t.name) && (u < 0 || len(t.name) > len(timeUnits[u].name)) {
			u = i
		}
	}
	return u
}
