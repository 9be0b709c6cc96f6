package balancerflag

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/lbgo/balancer"
)

// parseKey compiles -hash-key, nginx's hash key: text with variables, such
// as $http_x_user, $cookie_session or $host$request_uri. The variables are
// nginx's: $http_NAME (a request header, "_" for "-"), $cookie_NAME,
// $arg_NAME (a query parameter), $remote_addr, $host, $uri,
// $request_uri and $args; ${name} delimits one inside text. As in nginx,
// $host has no port and is in lower case, the names of cookies and
// arguments match without regard to case and their values are as sent,
// and a missing header, cookie or argument is empty. In a client's
// request (Transport.Key) $remote_addr is empty and $host is the URL's
// host, the same for every request. An unknown variable is an error naming
// it, wrapping balancer.ErrInvalidConfig.
func parseKey(s string) (func(*http.Request) string, error) {
	var parts []func(*http.Request) string
	for s != "" {
		i := strings.IndexByte(s, '$')
		if i < 0 {
			lit := s
			parts = append(parts, func(*http.Request) string { return lit })
			break
		}
		if i > 0 {
			lit := s[:i]
			parts = append(parts, func(*http.Request) string { return lit })
		}
		s = s[i+1:]
		var name string
		if strings.HasPrefix(s, "{") {
			end := strings.IndexByte(s, '}')
			if end < 0 {
				return nil, fmt.Errorf("-hash-key: the variable ${%s lacks its closing }: %w", s[1:], balancer.ErrInvalidConfig)
			}
			name, s = s[1:end], s[end+1:]
		} else {
			end := 0
			for end < len(s) && isNameByte(s[end]) {
				end++
			}
			name, s = s[:end], s[end:]
		}
		v, err := variable(name)
		if err != nil {
			return nil, err
		}
		parts = append(parts, v)
	}
	if len(parts) == 0 {
		return nil, fmt.Errorf("-hash-key: empty key: %w", balancer.ErrInvalidConfig)
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return func(r *http.Request) string {
		var b strings.Builder
		for _, p := range parts {
			b.WriteString(p(r))
		}
		return b.String()
	}, nil
}

func isNameByte(c byte) bool {
	return c == '_' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// variable returns the value of nginx's variable name for a request.
func variable(name string) (func(*http.Request) string, error) {
	lower := strings.ToLower(name)
	switch {
	case lower == "remote_addr":
		return func(r *http.Request) string {
			host, _, err := net.SplitHostPort(r.RemoteAddr)
			if err != nil {
				return r.RemoteAddr
			}
			return host
		}, nil
	case lower == "host":
		return host, nil
	case lower == "uri":
		return func(r *http.Request) string { return r.URL.Path }, nil
	case lower == "request_uri":
		return func(r *http.Request) string { return r.URL.RequestURI() }, nil
	case lower == "args":
		return func(r *http.Request) string { return r.URL.RawQuery }, nil
	case strings.HasPrefix(lower, "http_") && len(lower) > len("http_"):
		h := http.CanonicalHeaderKey(strings.ReplaceAll(lower[len("http_"):], "_", "-"))
		return func(r *http.Request) string { return r.Header.Get(h) }, nil
	case strings.HasPrefix(lower, "cookie_") && len(name) > len("cookie_"):
		c := lower[len("cookie_"):]
		return func(r *http.Request) string { return cookie(r, c) }, nil
	case strings.HasPrefix(lower, "arg_") && len(name) > len("arg_"):
		a := lower[len("arg_"):]
		return func(r *http.Request) string { return arg(r.URL.RawQuery, a) }, nil
	}
	return nil, fmt.Errorf("-hash-key: unknown variable $%s (want $http_NAME, $cookie_NAME, $arg_NAME, $remote_addr, $host, $uri, $request_uri or $args): %w", name, balancer.ErrInvalidConfig)
}

// host is nginx's $host: the request's host without its port (an IPv6
// address keeps its brackets) or final dot, in lower case.
func host(r *http.Request) string {
	h := r.Host
	if i := strings.LastIndexByte(h, ':'); i > strings.LastIndexByte(h, ']') {
		h = h[:i]
	}
	return strings.ToLower(strings.TrimSuffix(h, "."))
}

// cookie is nginx's $cookie_NAME: the first cookie of the Cookie headers
// whose name is name without regard to case, its value as sent (up to the
// next ";"). Go's Request.Cookie differs: its names match with case, and it
// drops a cookie whose value has a character RFC 6265 does not allow.
func cookie(r *http.Request, name string) string {
	for _, line := range r.Header.Values("Cookie") {
		for line != "" {
			var pair string
			pair, line, _ = strings.Cut(line, ";")
			pair = strings.TrimLeft(pair, " ")
			k, v, ok := strings.Cut(pair, "=")
			if ok && strings.EqualFold(strings.TrimRight(k, " "), name) {
				return strings.TrimLeft(v, " ")
			}
		}
	}
	return ""
}

// arg is nginx's $arg_NAME: the first argument of the query whose name is
// name without regard to case, its value as sent (not decoded).
func arg(query, name string) string {
	for query != "" {
		var pair string
		pair, query, _ = strings.Cut(query, "&")
		if k, v, ok := strings.Cut(pair, "="); ok && strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
