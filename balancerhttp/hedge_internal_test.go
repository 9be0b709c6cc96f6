package balancerhttp

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestHedgeable: net/http's replay rule (Request.isReplayable): the safe
// methods or an idempotency key (present, even empty), a body only with
// GetBody; PUT and DELETE are not among them; an upgrade never.
func TestHedgeable(t *testing.T) {
	body := func() io.ReadCloser { return io.NopCloser(strings.NewReader("x")) }
	getBody := func() (io.ReadCloser, error) { return body(), nil }
	for _, tt := range []struct {
		name   string
		method string
		header http.Header
		body   bool
		get    bool
		want   bool
	}{
		{"GET", "GET", nil, false, false, true},
		{"empty method", "", nil, false, false, true},
		{"HEAD", "HEAD", nil, false, false, true},
		{"OPTIONS", "OPTIONS", nil, false, false, true},
		{"TRACE", "TRACE", nil, false, false, true},
		{"POST", "POST", nil, true, true, false},
		{"PUT", "PUT", nil, true, true, false},
		{"DELETE", "DELETE", nil, false, false, false},
		{"PATCH", "PATCH", nil, false, false, false},
		{"POST with Idempotency-Key", "POST", http.Header{"Idempotency-Key": {"k"}}, true, true, true},
		{"POST with an empty X-Idempotency-Key", "POST", http.Header{"X-Idempotency-Key": {""}}, true, true, true},
		{"POST with a key, body not replayable", "POST", http.Header{"Idempotency-Key": {"k"}}, true, false, false},
		{"GET with a body not replayable", "GET", nil, true, false, false},
		{"GET with a replayable body", "GET", nil, true, true, true},
		{"GET upgrade", "GET", http.Header{"Upgrade": {"websocket"}}, false, false, false},
	} {
		req := &http.Request{Method: tt.method, Header: tt.header}
		if req.Header == nil {
			req.Header = http.Header{}
		}
		if tt.body {
			req.Body = body()
		}
		if tt.get {
			req.GetBody = getBody
		}
		if got := hedgeable(req); got != tt.want {
			t.Errorf("%s: hedgeable %v, want %v", tt.name, got, tt.want)
		}
	}
}
