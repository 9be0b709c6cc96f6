package upstream

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
)

// server parses one `server ADDR [PARAM...]` directive, its ";" checked,
// in a block whose balancing method so far is m.
func (p *parser) server(words []token, m Method) (Server, *ParseError) {
	switch {
	case len(words) == 1:
		return Server{}, p.errorf(words[0].line, ErrSyntax, "missing address after \"server\"")
	case words[1].text == "":
		return Server{}, p.errorf(words[1].line, ErrSyntax, "empty server address")
	}
	addr, reason := logAddr(words[1].text)
	if reason != "" {
		return Server{}, p.errorf(words[1].line, ErrInvalidAddr, "%s in upstream %v", reason, words[1])
	}
	s := Server{
		Name:        words[1].text,
		Addr:        addr,
		Line:        words[0].line,
		Weight:      defaults.Weight,
		MaxFails:    defaults.MaxFails,
		FailTimeout: defaults.FailTimeout,
	}
	for _, w := range words[2:] {
		if err := p.param(&s, w); err != nil {
			return Server{}, err
		}
		if s.Backup && !m.allowsBackup() {
			return Server{}, p.errorf(w.line, ErrInvalidParam, "balancing method %q (line %d) does not support parameter %v", m.Name, m.Line, w)
		}
	}
	if s.Service != "" {
		if err := p.checkService(s, words[0].line); err != nil {
			return Server{}, err
		}
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
	case !eq && key == "resolve":
		s.Resolve = true
	case eq && key == "service":
		if val == "" {
			err = p.errorf(w.line, ErrInvalidParam, "service is empty")
		}
		s.Service = val
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
