package main

import (
	"fmt"
	"net"
	"net/http"
	"strings"
)

// parseKey compiles -hash-key, nginx's hash key: text with variables, such
// as $http_x_user, $cookie_session or $host$request_uri. The variables are
// nginx's: $http_NAME (a request header, "_" for "-"), $cookie_NAME,
// $arg_NAME (a query parameter), $remote_addr, $host, $uri,
// $request_uri and $args; ${name} delimits one inside text. A missing
// header, cookie or argument is empty, as in nginx. An unknown variable is
// an error naming it.
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
				return nil, fmt.Errorf("-hash-key: the variable ${%s lacks its closing }", s[1:])
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
		return nil, fmt.Errorf("-hash-key: empty key")
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
		return func(r *http.Request) string { return r.Host }, nil
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
		c := name[len("cookie_"):] // cookie names keep their case
		return func(r *http.Request) string {
			if ck, err := r.Cookie(c); err == nil {
				return ck.Value
			}
			return ""
		}, nil
	case strings.HasPrefix(lower, "arg_") && len(name) > len("arg_"):
		a := name[len("arg_"):]
		return func(r *http.Request) string { return r.URL.Query().Get(a) }, nil
	}
	return nil, fmt.Errorf("-hash-key: unknown variable $%s (want $http_NAME, $cookie_NAME, $arg_NAME, $remote_addr, $host, $uri, $request_uri or $args)", name)
}
