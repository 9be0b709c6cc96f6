package upstream

import (
	"net/netip"
	"strconv"
	"strings"
)

// defaultPort is the port of a server written without one, as in nginx.
const defaultPort = "80"

// maxUnixPath is the longest unix socket path nginx accepts on Linux: the
// path and its terminating NUL must fit in sockaddr_un's 108-byte sun_path.
const maxUnixPath = 107

// logAddr returns the address nginx logs in $upstream_addr for a server
// written as text, or, when nginx 1.22 rejects the text (ngx_parse_url),
// the reason nginx gives, such as "invalid port".
//
//   - "unix:PATH" (any case) is logged as written.
//   - "[IPv6]" and "[IPv6]:PORT" are logged as "[IPv6]:PORT" with the
//     address in its canonical form and PORT 80 by default.
//   - "HOST" and "HOST:PORT" are logged as "HOST:PORT", PORT 80 by default;
//     an IPv4 HOST is written as nginx prints it ("010.0.0.1" is
//     "10.0.0.1"). nginx resolves a host name and logs each address it
//     resolves to; a name is kept here as written, since resolving it
//     would make a trace depend on the machine.
//
// A "/" or "?" (a URI, or a scheme like "http://") makes the host invalid;
// a port is whole decimal digits from 1 to 65535.
func logAddr(text string) (addr, reason string) {
	if len(text) >= 5 && strings.EqualFold(text[:5], "unix:") {
		switch path := text[5:]; {
		case path == "":
			return "", "no path in the unix domain socket"
		case len(path) > maxUnixPath:
			return "", "too long path in the unix domain socket"
		}
		return text, ""
	}
	if strings.HasPrefix(text, "[") {
		return logAddr6(text)
	}
	if strings.ContainsAny(text, "/?") {
		return "", "invalid host"
	}
	host, port, hasPort := strings.Cut(text, ":")
	if !hasPort {
		port = defaultPort
	} else if !validPort(port) {
		return "", "invalid port"
	}
	if host == "" {
		return "", "no host"
	}
	if ip, ok := inetAddr(host); ok {
		host = ip
	}
	return host + ":" + port, ""
}

// logAddr6 is logAddr for text that starts with "[".
func logAddr6(text string) (addr, reason string) {
	host, rest, ok := strings.Cut(text[1:], "]")
	switch {
	case !ok || strings.Contains(rest, "/"):
		return "", "invalid host"
	case rest == "":
		rest = ":" + defaultPort
	case rest[0] != ':':
		return "", "invalid host"
	case !validPort(rest[1:]):
		return "", "invalid port"
	}
	if host == "" {
		return "", "no host"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || !ip.Is6() || ip.Zone() != "" {
		return "", "invalid IPv6 address"
	}
	return "[" + ip.String() + "]" + rest, ""
}

// validPort reports whether s is a port nginx accepts: decimal digits only
// (ngx_atoi), from 1 to 65535.
func validPort(s string) bool {
	if s == "" || strings.Trim(s, "0123456789") != "" {
		return false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n >= 1 && n <= 65535
}

// inetAddr reads s as nginx's ngx_inet_addr does: exactly four
// dot-separated decimal octets, each at most 255, where an empty octet is 0
// and leading zeros are allowed. It returns the address in dotted decimal.
func inetAddr(s string) (string, bool) {
	octets := strings.Split(s, ".")
	if len(octets) != 4 {
		return "", false
	}
	out := make([]string, 4)
	for i, o := range octets {
		n := 0
		for _, c := range []byte(o) {
			if c < '0' || c > '9' {
				return "", false
			}
			if n = n*10 + int(c-'0'); n > 255 {
				return "", false
			}
		}
		out[i] = strconv.Itoa(n)
	}
	return strings.Join(out, "."), true
}
