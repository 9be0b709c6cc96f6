package upstream

import (
	"net"
	"net/netip"
	"strings"
	"time"
)

// nginx 1.27.3's run-time resolution: `server NAME resolve [service=S]`,
// with the `resolver` and `resolver_timeout` directives inside the upstream
// block or in the http context around it, and a `zone` directive.

// defaultResolverTimeout is nginx's resolver_timeout default.
const defaultResolverTimeout = 30 * time.Second

// resolverConf is a `resolver` directive and a `resolver_timeout`, of an
// upstream block or of the http context.
type resolverConf struct {
	addrs   []string
	network string // "", "ip4" or "ip6"
	valid   time.Duration
	timeout time.Duration
	line    int // of the resolver directive; 0 for none
}

// resolver parses `resolver ADDRESS ... [valid=TIME] [ipv4=on|off]
// [ipv6=on|off] [status_zone=ZONE]`, its ";" checked.
func (p *parser) resolver(words []token, rc *resolverConf) *ParseError {
	if len(words) < 2 {
		return p.errorf(words[0].line, ErrSyntax, "invalid number of arguments in \"resolver\" directive")
	}
	rc.addrs, rc.valid, rc.line = nil, 0, words[0].line
	ipv4, ipv6 := true, true
	for _, w := range words[1:] {
		key, val, eq := strings.Cut(w.text, "=")
		switch {
		case eq && key == "valid":
			d, ok := parseTime(val)
			if !ok {
				return p.errorf(w.line, ErrInvalidParam, "invalid parameter: %s", w.text)
			}
			rc.valid = d
		case eq && (key == "ipv4" || key == "ipv6"):
			if val != "on" && val != "off" {
				return p.errorf(w.line, ErrInvalidParam, "invalid parameter: %s", w.text)
			}
			if key == "ipv4" {
				ipv4 = val == "on"
			} else {
				ipv6 = val == "on"
			}
		case eq && key == "status_zone":
		default:
			if _, reason := logAddr(w.text); reason != "" || strings.HasPrefix(strings.ToLower(w.text), "unix:") {
				return p.errorf(w.line, ErrInvalidAddr, "invalid resolver address %v", w)
			}
			rc.addrs = append(rc.addrs, w.text)
		}
	}
	if len(rc.addrs) == 0 {
		return p.errorf(words[0].line, ErrSyntax, "no name servers defined in \"resolver\" directive")
	}
	switch {
	case !ipv4 && !ipv6:
		return p.errorf(words[0].line, ErrInvalidParam, "\"ipv4\" and \"ipv6\" cannot both be \"off\"")
	case !ipv6:
		rc.network = "ip4"
	case !ipv4:
		rc.network = "ip6"
	default:
		rc.network = ""
	}
	return nil
}

// resolverTimeout parses `resolver_timeout TIME`.
func (p *parser) resolverTimeout(words []token, rc *resolverConf) *ParseError {
	if len(words) != 2 {
		return p.errorf(words[0].line, ErrSyntax, "invalid number of arguments in \"resolver_timeout\" directive")
	}
	d, ok := parseTime(words[1].text)
	if !ok {
		return p.errorf(words[1].line, ErrInvalidParam, "invalid value %v in \"resolver_timeout\" directive", words[1])
	}
	rc.timeout = d
	return nil
}

// zone parses `zone NAME [SIZE]`.
func (p *parser) zone(words []token, b *Block) *ParseError {
	if len(words) < 2 || len(words) > 3 {
		return p.errorf(words[0].line, ErrSyntax, "invalid number of arguments in \"zone\" directive")
	}
	b.Zone = words[1].text
	return nil
}

// checkService checks a server's service= against nginx's rules:
// resolve, a name without a port, not empty.
func (p *parser) checkService(s Server, line int) *ParseError {
	switch {
	case s.Service == "":
		return p.errorf(line, ErrInvalidParam, "service is empty")
	case !s.Resolve:
		return p.errorf(line, ErrInvalidParam, "service upstream %q requires \"resolve\" parameter", s.Name)
	}
	// nginx checks the port first: "[::1]:80" may not have port, "[::1]"
	// requires a domain name.
	host, _, hasPort := strings.Cut(s.Name, ":")
	if strings.HasPrefix(s.Name, "[") {
		var rest string
		host, rest, _ = strings.Cut(s.Name[1:], "]")
		hasPort = strings.HasPrefix(rest, ":")
	}
	if hasPort {
		return p.errorf(line, ErrInvalidParam, "service upstream %q may not have port", s.Name)
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return p.errorf(line, ErrInvalidParam, "service upstream %q requires domain name", s.Name)
	}
	return nil
}

// checkResolve refuses, as nginx does when it starts, a block with resolve
// servers but no zone or no resolver (its own or the http context's,
// which it then takes).
func (p *parser) checkResolve(b *Block, http resolverConf) *ParseError {
	resolving := false
	for _, s := range b.Servers {
		resolving = resolving || s.resolvesName()
	}
	if !resolving {
		return nil
	}
	if b.Zone == "" {
		return p.errorf(b.Line, ErrInvalidParam, "resolving names at run time requires upstream %q in %s:%d to be in shared memory", b.Name, p.file, b.Line)
	}
	if len(b.Resolvers) == 0 {
		b.Resolvers, b.ResolverValid, b.ResolverNetwork = http.addrs, http.valid, http.network
	}
	if b.ResolverTimeout == 0 {
		b.ResolverTimeout = cmpOr(http.timeout, defaultResolverTimeout)
	}
	if len(b.Resolvers) == 0 {
		return p.errorf(b.Line, ErrInvalidParam, "no resolver defined to resolve names at run time in upstream %q in %s:%d", b.Name, p.file, b.Line)
	}
	return nil
}

// resolvesName reports whether the server has a name to resolve at run
// time: nginx takes resolve on an IP address or a unix socket (which
// ngx_parse_url resolves as it reads them) as a static server.
func (s Server) resolvesName() bool {
	if !s.Resolve {
		return false
	}
	if s.Service != "" {
		return true
	}
	if len(s.Addr) >= 5 && strings.EqualFold(s.Addr[:5], "unix:") {
		return false
	}
	host, _, err := net.SplitHostPort(s.Addr)
	if err != nil {
		return true
	}
	_, err = netip.ParseAddr(host)
	return err != nil
}

func cmpOr(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}
