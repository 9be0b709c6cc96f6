package balancerflag

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// TestParseKey: each variable's value, read from the request by hand.
func TestParseKey(t *testing.T) {
	r := httptest.NewRequest(http.MethodGet, "http://svc.example/a/b?id=7&x=y", nil)
	r.RemoteAddr = "192.0.2.9:5555"
	r.Header.Set("X-User", "ann")
	r.AddCookie(&http.Cookie{Name: "Sess", Value: "s1"})
	tests := map[string]string{
		"$http_x_user":            "ann",
		"$HTTP_X_USER":            "ann",
		"$http_x_missing":         "",
		"$cookie_Sess":            "s1",
		"$arg_id":                 "7",
		"$remote_addr":            "192.0.2.9",
		"$host":                   "svc.example",
		"$uri":                    "/a/b",
		"$request_uri":            "/a/b?id=7&x=y",
		"$args":                   "id=7&x=y",
		"$host$request_uri":       "svc.example/a/b?id=7&x=y",
		"u:${http_x_user}:$arg_x": "u:ann:y",
		"fixed":                   "fixed",
	}
	for key, want := range tests {
		f, err := parseKey(key)
		require.NoError(t, err, key)
		assert.Equal(t, want, f(r), key)
	}

	// As nginx: $host without its port, in lower case; $cookie_ and $arg_
	// names matched without regard to case, their values as sent (not
	// decoded, nor dropped for characters Go's cookie parser refuses).
	r = httptest.NewRequest(http.MethodGet, "http://Svc.Example:8080/?ID=a%20b&id2=no&x=1", nil)
	r.Header.Add("Cookie", `session=a b"c; other=1`)
	r.Header.Add("Cookie", "Token=t1")
	for key, want := range map[string]string{
		"$host":           "svc.example",
		"$arg_id":         "a%20b",
		"$arg_x":          "1",
		"$arg_nope":       "",
		"$cookie_SESSION": `a b"c`,
		"$cookie_token":   "t1",
		"$cookie_other":   "1",
		"$cookie_sess":    "",
	} {
		f, err := parseKey(key)
		require.NoError(t, err, key)
		assert.Equal(t, want, f(r), key)
	}

	for _, bad := range []string{"", "$", "$http_", "$cookie_", "$arg_", "$nope", "${http_x_user", "$remote_addr$nope"} {
		_, err := parseKey(bad)
		assert.ErrorIs(t, err, balancer.ErrInvalidConfig, "%q", bad)
		if err != nil {
			assert.Contains(t, err.Error(), "-hash-key", "%q", bad)
		}
	}
}

// TestParseKey_host: $host as nginx has it, an IPv6 address in brackets.
func TestParseKey_host(t *testing.T) {
	f, err := parseKey("$host")
	require.NoError(t, err)
	for h, want := range map[string]string{"[::1]:8080": "[::1]", "[::1]": "[::1]", "Example.COM.": "example.com", "a.b:1": "a.b"} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = h
		assert.Equal(t, want, f(r), h)
	}
}

// TestParseKey_concurrent: a compiled key is read by a Transport or a
// Proxy from many goroutines at once; each sees its own request's key.
func TestParseKey_concurrent(t *testing.T) {
	f, err := parseKey("$host/${http_x_user}?$arg_id;$cookie_s")
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				r := httptest.NewRequest(http.MethodGet, fmt.Sprintf("http://h%d/?id=%d", g, i), nil)
				r.Header.Set("X-User", fmt.Sprint("u", g))
				r.Header.Set("Cookie", fmt.Sprintf("s=%d", i))
				if got, want := f(r), fmt.Sprintf("h%d/u%d?%d;%d", g, g, i, i); got != want {
					t.Errorf("goroutine %d: key %q, want %q", g, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}
