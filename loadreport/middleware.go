package loadreport

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
)

// Middleware reports a server's load on every response in the
// HeaderName header: the load its Tracker keeps (its own, or one given
// with WithTracker), in which it counts each request. It is safe for
// concurrent use; its request path takes no lock.
//
// A report carries: rps_fractional and eps, the requests and errors
// completed per second over the window; named_metrics.rif, the requests
// in flight when the header is written (the current one included, so at
// least 1); named_metrics.latency_ms, the mean duration of the requests
// completed in the window; and cpu_utilization, mem_utilization and
// application_utilization as last set (zero, so absent, until set).
//
// It answers probes itself on its probe path (DefaultProbePath, or
// WithProbePath's): a GET or HEAD there gets the Tracker's Probe answer,
// as ProbeHandler writes it, and is neither passed on nor counted.
type Middleware struct {
	t         *Tracker
	format    Format
	isError   func(int) bool
	probePath string    // "": none
	writers   sync.Pool // of *reportWriter
}

// New returns a Middleware. It accepts WithFormat, WithErrorStatus,
// WithProbePath and WithTracker, and, without WithTracker, the Tracker's
// options (WithClock, WithWindow, WithProbeWindow, WithUtilization,
// WithConcurrency) for a Tracker of its own.
func New(opts ...Option) (*Middleware, error) {
	s := defaultSettings()
	if err := s.apply(opts); err != nil {
		return nil, err
	}
	t := s.tracker
	if t == nil {
		t = newTracker(&s)
	} else if s.trackerOpt != "" {
		return nil, fmt.Errorf("%w: %s with WithTracker: the Tracker has its settings", ErrInvalidOption, s.trackerOpt)
	}
	m := &Middleware{t: t, format: s.format, isError: s.isError, probePath: s.probePath}
	m.writers.New = func() any { return new(reportWriter) }
	return m, nil
}

// Tracker returns the Tracker the middleware counts in and reports.
func (m *Middleware) Tracker() *Tracker { return m.t }

// SetCPUUtilization is m.Tracker().SetCPUUtilization.
func (m *Middleware) SetCPUUtilization(v float64) error { return m.t.SetCPUUtilization(v) }

// SetMemUtilization is m.Tracker().SetMemUtilization.
func (m *Middleware) SetMemUtilization(v float64) error { return m.t.SetMemUtilization(v) }

// SetApplicationUtilization is m.Tracker().SetApplicationUtilization.
func (m *Middleware) SetApplicationUtilization(v float64) error {
	return m.t.SetApplicationUtilization(v)
}

// InFlight is m.Tracker().InFlight.
func (m *Middleware) InFlight() int64 { return m.t.InFlight() }

// Report is m.Tracker().Report: the report a response written now would
// carry.
func (m *Middleware) Report() Report { return m.t.Report() }

// Handler returns next wrapped: each response carries the report in its
// HeaderName header, set before the status line is written (by
// WriteHeader, the first Write or Flush, or, for a handler that writes
// nothing, on its return). A 1xx informational status does not carry it;
// a hijacked connection does not either. The request counts in rps and,
// if its status is an error, in eps when the handler returns; a handler
// that panics counts as an error. The ResponseWriter it passes on
// supports Flush and Hijack where the server's does (else they fail with
// http.ErrNotSupported) and Unwrap for http.ResponseController; it must
// not be used after the handler returns.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return &handler{m: m, next: next}
}

type handler struct {
	m    *Middleware
	next http.Handler
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	m := h.m
	if m.probePath != "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) && r.URL != nil && r.URL.Path == m.probePath {
		serveProbe(w, m.t)
		return
	}
	began := m.t.Begin()
	rw := m.writers.Get().(*reportWriter)
	rw.w, rw.m, rw.status, rw.wrote, rw.hijacked = w, m, http.StatusOK, false, false
	done := false
	defer func() {
		if !done { // the handler panicked: count it, drop rw (it may still be referenced)
			m.t.End(began, true)
		}
	}()
	h.next.ServeHTTP(rw, r)
	if !rw.wrote && !rw.hijacked {
		rw.writeReport()
	}
	m.t.End(began, !rw.hijacked && m.isError(rw.status))
	done = true
	rw.w, rw.m = nil, nil
	m.writers.Put(rw)
}

// reportWriter is the ResponseWriter a wrapped handler gets; pooled.
type reportWriter struct {
	w        http.ResponseWriter
	m        *Middleware
	status   int
	wrote    bool // the report is set and a final status written or implied
	hijacked bool
	buf      [384]byte // room for the longest TEXT value, every field set (at most about 300 bytes)
	scratch  [128]byte
}

func (rw *reportWriter) writeReport() {
	s := rw.m.t.Snapshot()
	b := s.appendHeader(rw.buf[:0], rw.scratch[:], rw.m.format)
	rw.w.Header()[HeaderName] = []string{string(b)}
	rw.wrote = true
}

func (rw *reportWriter) Header() http.Header { return rw.w.Header() }

func (rw *reportWriter) WriteHeader(code int) {
	if !rw.wrote && !rw.hijacked && (code < 100 || code > 199 || code == http.StatusSwitchingProtocols) {
		rw.writeReport()
		rw.status = code
	}
	rw.w.WriteHeader(code)
}

func (rw *reportWriter) Write(b []byte) (int, error) {
	if !rw.wrote && !rw.hijacked {
		rw.writeReport()
	}
	return rw.w.Write(b)
}

// ReadFrom writes the report, then copies from src with the underlying
// ResponseWriter's ReadFrom where it has one (net/http's uses sendfile),
// else with Write.
func (rw *reportWriter) ReadFrom(src io.Reader) (int64, error) {
	if !rw.wrote && !rw.hijacked {
		rw.writeReport()
	}
	if rf, ok := rw.w.(io.ReaderFrom); ok {
		return rf.ReadFrom(src)
	}
	return io.Copy(writerOnly{rw.w}, src)
}

// writerOnly hides every method but Write, so io.Copy does not loop back
// into ReadFrom.
type writerOnly struct{ io.Writer }

// Flush sends the headers (report included) and flushes, if the
// underlying ResponseWriter can.
func (rw *reportWriter) Flush() { _ = rw.FlushError() }

// FlushError is Flush returning the underlying error, the method
// http.ResponseController calls.
func (rw *reportWriter) FlushError() error {
	if !rw.wrote && !rw.hijacked {
		rw.writeReport()
	}
	return http.NewResponseController(rw.w).Flush()
}

// Hijack hands over the connection; no report is written on it.
func (rw *reportWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, b, err := http.NewResponseController(rw.w).Hijack()
	if err == nil {
		rw.hijacked = true
	}
	return c, b, err
}

// Unwrap returns the underlying ResponseWriter, for http.ResponseController.
func (rw *reportWriter) Unwrap() http.ResponseWriter { return rw.w }
