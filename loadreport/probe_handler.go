package loadreport

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// ProbeHandler returns a handler that answers probes with t's Probe: a
// GET or HEAD gets 200 and the body
// "TEXT named_metrics.rif=<n>,named_metrics.latency_ms=<ms>", which
// ParseProbe reads; any other method gets 405. It does not count its
// requests in t. It is for a server that mounts probes on a mux of its
// own; the Middleware answers them on its probe path already. A nil t
// answers 500.
func ProbeHandler(t *Tracker) http.Handler { return probeHandler{t} }

type probeHandler struct{ t *Tracker }

func (h probeHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header()["Allow"] = probeAllow
		http.Error(w, "loadreport: a probe is a GET", http.StatusMethodNotAllowed)
		return
	}
	if h.t == nil {
		http.Error(w, "loadreport: ProbeHandler(nil Tracker)", http.StatusInternalServerError)
		return
	}
	serveProbe(w, h.t)
}

// Header values of every probe answer, shared: net/http only reads
// them, and assigning a shared slice allocates nothing where
// Header().Set allocates the slice.
var (
	probeContentType = []string{"text/plain; charset=utf-8"}
	probeNoStore     = []string{"no-store"}
	probeAllow       = []string{"GET, HEAD"}
)

// probeBody is a pooled buffer for a probe answer's body: a stack array
// passed to Write escapes to the heap.
type probeBody [96]byte // the longest answer: rif 1048576, latency_ms of 17 significant digits, about 75 bytes

var probeBodies = sync.Pool{New: func() any { return new(probeBody) }}

// serveProbe writes t's probe answer on w.
func serveProbe(w http.ResponseWriter, t *Tracker) {
	n, lat := t.Probe()
	buf := probeBodies.Get().(*probeBody)
	h := w.Header()
	h["Content-Type"] = probeContentType
	h["Cache-Control"] = probeNoStore
	_, _ = w.Write(appendProbe(buf[:0], n, lat))
	probeBodies.Put(buf)
}

// WithProbePath sets the path on which the Middleware answers probes
// itself, as ProbeHandler does, for GET and HEAD, without calling the
// wrapped handler or counting the probe as a request; other methods on
// it reach the wrapped handler. Empty: the Middleware answers no probes.
// A path must start with '/'. Default: DefaultProbePath.
func WithProbePath(path string) Option {
	return func(s *settings) error {
		if path != "" && (!strings.HasPrefix(path, "/") || strings.ContainsAny(path, "?# \t\r\n")) {
			return fmt.Errorf("%w: WithProbePath(%q): a path starts with '/' and has no query", ErrInvalidOption, path)
		}
		s.probePath = path
		s.httpOption("WithProbePath")
		return nil
	}
}
