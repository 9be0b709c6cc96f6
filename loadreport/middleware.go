package loadreport

import (
	"bufio"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// ErrInvalidOption: an option to New, or a utilization set, is out of range.
var ErrInvalidOption = errors.New("loadreport: invalid option")

// Option configures New.
type Option func(*Middleware) error

// WithClock makes the middleware read time from now (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(m *Middleware) error {
		if now == nil {
			return fmt.Errorf("%w: WithClock(nil)", ErrInvalidOption)
		}
		m.now = now
		return nil
	}
}

// WithFormat sets the header's format. Default: Text, the format vLLM
// emits and the one a person reads in a trace.
func WithFormat(f Format) Option {
	return func(m *Middleware) error {
		if f > Binary {
			return fmt.Errorf("%w: WithFormat(%v)", ErrInvalidOption, f)
		}
		m.format = f
		return nil
	}
}

// WithWindow sets the window requests and errors per second are counted
// over, at least 10 ms. Default: 10 s.
func WithWindow(d time.Duration) Option {
	return func(m *Middleware) error {
		if d < 10*time.Millisecond {
			return fmt.Errorf("%w: WithWindow(%v), at least 10ms", ErrInvalidOption, d)
		}
		m.reqs.width = d / windowBuckets
		m.errs.width = d / windowBuckets
		return nil
	}
}

// WithUtilization makes the middleware call f for application_utilization
// on every response, in place of SetApplicationUtilization's value. f must
// be safe for concurrent use and fast; a NaN, infinite or negative result
// is reported as 0.
func WithUtilization(f func() float64) Option {
	return func(m *Middleware) error {
		m.utilization = f
		return nil
	}
}

// WithErrorStatus sets which final statuses count as errors (eps).
// Default: 500 and above.
func WithErrorStatus(isError func(status int) bool) Option {
	return func(m *Middleware) error {
		if isError == nil {
			return fmt.Errorf("%w: WithErrorStatus(nil)", ErrInvalidOption)
		}
		m.isError = isError
		return nil
	}
}

// Middleware keeps a server's load and reports it on every response in
// the HeaderName header. It is safe for concurrent use; its request path
// takes no lock.
//
// A report carries: rps_fractional and eps, the requests and errors
// completed per second over the window; named_metrics.rif, the requests
// in flight through the middleware when the header is written (the
// current one included, so at least 1); and cpu_utilization,
// mem_utilization and application_utilization as last set (zero, so
// absent, until set).
type Middleware struct {
	now         func() time.Time
	start       time.Time
	format      Format
	utilization func() float64
	isError     func(int) bool

	inFlight   atomic.Int64
	reqs, errs rateWindow
	cpu        atomic.Uint64 // float64 bits
	mem        atomic.Uint64 // float64 bits
	app        atomic.Uint64 // float64 bits

	writers sync.Pool // of *reportWriter
}

// New returns a Middleware.
func New(opts ...Option) (*Middleware, error) {
	m := &Middleware{now: time.Now, isError: func(s int) bool { return s >= 500 }}
	if err := WithWindow(10 * time.Second)(m); err != nil {
		return nil, err
	}
	for _, o := range opts {
		if err := o(m); err != nil {
			return nil, err
		}
	}
	m.start = m.now()
	m.writers.New = func() any { return new(reportWriter) }
	return m, nil
}

// SetCPUUtilization sets cpu_utilization, a fraction of the CPU the
// server has (may exceed 1 where the server may use more than its share).
// A NaN, infinite or negative v is refused with ErrInvalidOption.
func (m *Middleware) SetCPUUtilization(v float64) error { return setUtil(&m.cpu, "CPU", v) }

// SetMemUtilization sets mem_utilization, as SetCPUUtilization.
func (m *Middleware) SetMemUtilization(v float64) error { return setUtil(&m.mem, "memory", v) }

// SetApplicationUtilization sets application_utilization, as
// SetCPUUtilization. WithUtilization's function, if given, overrides it.
func (m *Middleware) SetApplicationUtilization(v float64) error {
	return setUtil(&m.app, "application", v)
}

func setUtil(a *atomic.Uint64, what string, v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return fmt.Errorf("%w: %s utilization %v", ErrInvalidOption, what, v)
	}
	if v == 0 {
		v = 0 // -0 would be sent as "-0"
	}
	a.Store(math.Float64bits(v))
	return nil
}

// InFlight returns the requests in flight through the middleware.
func (m *Middleware) InFlight() int64 { return m.inFlight.Load() }

// Report returns the report a response written now would carry.
func (m *Middleware) Report() Report {
	s := m.snapshot()
	return Report{
		CPUUtilization: s.cpu, MemUtilization: s.mem, ApplicationUtilization: s.app,
		RPSFractional: s.rps, EPS: s.eps, NamedMetrics: map[string]float64{rifName: s.rif},
	}
}

// rifName is the named metric that carries requests in flight.
const rifName = "rif"

type snapshot struct{ cpu, mem, app, rps, eps, rif float64 }

func (m *Middleware) elapsed() time.Duration { return m.now().Sub(m.start) }

func (m *Middleware) snapshot() snapshot {
	e := m.elapsed()
	app := math.Float64frombits(m.app.Load())
	if m.utilization != nil {
		app = m.utilization()
		if math.IsNaN(app) || math.IsInf(app, 0) || app <= 0 {
			app = 0 // also turns -0 into 0
		}
	}
	return snapshot{
		cpu: math.Float64frombits(m.cpu.Load()),
		mem: math.Float64frombits(m.mem.Load()),
		app: app,
		rps: m.reqs.rate(e),
		eps: m.errs.rate(e),
		rif: float64(m.inFlight.Load()),
	}
}

// appendHeader appends the snapshot in format f, with no allocation when
// dst and scratch have room: the fields the middleware sends have fixed
// names that TEXT can carry and finite, non-negative values.
func (s *snapshot) appendHeader(dst, scratch []byte, f Format) []byte {
	dst = append(dst, f.prefix()...)
	switch f {
	case Text:
		start := len(dst)
		dst = appendTextPair(dst, start, nameCPU, "", s.cpu)
		dst = appendTextPair(dst, start, nameMem, "", s.mem)
		dst = appendTextPair(dst, start, nameApp, "", s.app)
		dst = appendTextPair(dst, start, nameRPS, "", s.rps)
		dst = appendTextPair(dst, start, nameEPS, "", s.eps)
		dst = appendTextPair(dst, start, nameNamed+".", rifName, s.rif)
	case JSON:
		dst = append(dst, '{')
		start := len(dst)
		for _, p := range [...]struct {
			name string
			v    float64
		}{{nameCPU, s.cpu}, {nameMem, s.mem}, {nameApp, s.app}, {nameRPS, s.rps}, {nameEPS, s.eps}} {
			if p.v != 0 {
				dst = appendJSONSep(dst, start)
				dst = append(dst, '"')
				dst = append(dst, p.name...)
				dst = append(dst, '"', ':')
				dst = strconv.AppendFloat(dst, p.v, 'g', -1, 64)
			}
		}
		dst = appendJSONSep(dst, start)
		dst = append(dst, `"named_metrics":{"rif":`...)
		dst = strconv.AppendFloat(dst, s.rif, 'g', -1, 64)
		dst = append(dst, '}', '}')
	case Binary:
		pb := scratch[:0]
		pb = appendProtoDouble(pb, fieldCPU, s.cpu)
		pb = appendProtoDouble(pb, fieldMem, s.mem)
		pb = appendProtoDouble(pb, fieldRPSFrac, s.rps)
		pb = appendProtoDouble(pb, fieldEPS, s.eps)
		pb = appendProtoMapEntry(pb, fieldNamed, rifName, s.rif)
		pb = appendProtoDouble(pb, fieldApp, s.app)
		dst = base64.StdEncoding.AppendEncode(dst, pb)
	}
	return dst
}

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
	m.inFlight.Add(1)
	rw := m.writers.Get().(*reportWriter)
	rw.w, rw.m, rw.status, rw.wrote, rw.hijacked = w, m, http.StatusOK, false, false
	done := false
	defer func() {
		if !done { // the handler panicked: count it, drop rw (it may still be referenced)
			e := m.elapsed()
			m.reqs.add(e)
			m.errs.add(e)
			m.inFlight.Add(-1)
		}
	}()
	h.next.ServeHTTP(rw, r)
	if !rw.wrote && !rw.hijacked {
		rw.writeReport()
	}
	e := m.elapsed()
	m.reqs.add(e)
	if !rw.hijacked && m.isError(rw.status) {
		m.errs.add(e)
	}
	m.inFlight.Add(-1)
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
	buf      [256]byte
	scratch  [128]byte
}

func (rw *reportWriter) writeReport() {
	s := rw.m.snapshot()
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
