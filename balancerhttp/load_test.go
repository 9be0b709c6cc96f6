package balancerhttp_test

import (
	"encoding/base64"
	"encoding/binary"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// loadRecorder is a Balancer that records the Load of every outcome
// reported to it, by peer, before passing the outcome on.
type loadRecorder struct {
	balancer.Balancer
	mu    sync.Mutex
	loads map[string][]*balancer.ServerLoad // copies; nil: no Load
}

func newLoadRecorder(t *testing.T, addrs ...string) *loadRecorder {
	t.Helper()
	var peers []*balancer.Peer
	for _, a := range addrs {
		peers = append(peers, balancer.NewPeer(a))
	}
	p, err := balancer.NewRoundRobin(peers)
	require.NoError(t, err)
	return &loadRecorder{Balancer: p, loads: map[string][]*balancer.ServerLoad{}}
}

func (r *loadRecorder) Done(p *balancer.Peer, o balancer.Outcome) error {
	var c *balancer.ServerLoad
	if o.Load != nil {
		l := *o.Load
		c = &l
	}
	r.mu.Lock()
	r.loads[p.Addr()] = append(r.loads[p.Addr()], c)
	r.mu.Unlock()
	return r.Balancer.Done(p, o)
}

func (r *loadRecorder) seen(addr string) []*balancer.ServerLoad {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.loads[addr]
}

// protoDouble is field f of a protobuf message as a double, written out
// from the wire format's rules (tag f<<3|1, eight little-endian bytes), not
// by the package under test.
func protoDouble(f int, v float64) []byte {
	b := []byte{byte(f<<3 | 1), 0, 0, 0, 0, 0, 0, 0, 0}
	binary.LittleEndian.PutUint64(b[1:], math.Float64bits(v))
	return b
}

// reportingServer starts a loopback server answering "ok" through h.
func reportingServer(t *testing.T, h http.Handler) string {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s.Listener.Addr().String()
}

// middlewareServer runs loadreport's Middleware in format f with the
// utilizations set.
func middlewareServer(t *testing.T, f loadreport.Format, cpu, app float64) string {
	t.Helper()
	m, err := loadreport.New(loadreport.WithFormat(f))
	require.NoError(t, err)
	require.NoError(t, m.SetCPUUtilization(cpu))
	require.NoError(t, m.SetApplicationUtilization(app))
	return reportingServer(t, m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})))
}

// loadBackends starts one server per way a report can come, each with
// its own utilization, and returns their addresses with what each
// attempt's Outcome.Load must hold (nil: none). Utilization is
// application_utilization when set, else cpu_utilization (gRFC A58).
func loadBackends(t *testing.T) (addrs []string, want map[string]*balancer.ServerLoad) {
	t.Helper()
	want = map[string]*balancer.ServerLoad{}
	add := func(addr string, l *balancer.ServerLoad) {
		addrs = append(addrs, addr)
		want[addr] = l
	}
	// The middleware in each format; it always sends rif (at least 1,
	// checked apart) and rates (checked to be set, not their values).
	add(middlewareServer(t, loadreport.Text, 0.25, 0), &balancer.ServerLoad{Utilization: 0.25, HasInFlight: true})
	add(middlewareServer(t, loadreport.JSON, 0.5, 0.75), &balancer.ServerLoad{Utilization: 0.75, HasInFlight: true})
	add(middlewareServer(t, loadreport.Binary, 0.125, 0), &balancer.ServerLoad{Utilization: 0.125, HasInFlight: true})
	// endpoint-load-metrics-bin, unprefixed and unpadded as grpc-go
	// sends it: cpu_utilization (field 1) and eps (field 7).
	bin := base64.RawStdEncoding.EncodeToString(append(protoDouble(1, 0.375), protoDouble(7, 2)...))
	add(reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(loadreport.HeaderNameBin, bin)
		_, _ = io.WriteString(w, "ok")
	})), &balancer.ServerLoad{Utilization: 0.375, EPS: 2})
	// In the trailer, after the body; the header's report loses to it.
	add(reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", loadreport.HeaderName)
		w.Header().Set(loadreport.HeaderName, "TEXT cpu_utilization=0.9")
		_, _ = io.WriteString(w, "ok")
		w.(http.Flusher).Flush()
		w.Header().Set(loadreport.HeaderName, "TEXT cpu_utilization=0.625,rps_fractional=40,named_metrics.rif=2")
	})), &balancer.ServerLoad{Utilization: 0.625, RPS: 40, InFlight: 2, HasInFlight: true})
	// No report at all.
	add(reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	})), nil)
	return addrs, want
}

// checkLoads checks that every attempt on every backend was reported
// with what the backend sent.
func checkLoads(t *testing.T, rec *loadRecorder, addrs []string, want map[string]*balancer.ServerLoad, each int) {
	t.Helper()
	for _, a := range addrs {
		got := rec.seen(a)
		require.Len(t, got, each, "attempts on %s", a)
		for _, g := range got {
			w := want[a]
			if w == nil {
				assert.Nil(t, g, "%s sent no report", a)
				continue
			}
			if !assert.NotNil(t, g, "%s's report", a) {
				continue
			}
			assert.Equal(t, w.Utilization, g.Utilization, "%s", a)
			assert.Equal(t, w.HasInFlight, g.HasInFlight, "%s", a)
			if w.InFlight != 0 {
				assert.Equal(t, w.InFlight, g.InFlight, "%s", a)
			} else if w.HasInFlight {
				assert.GreaterOrEqual(t, g.InFlight, 1.0, "%s: the middleware counts the request itself", a)
			}
			if w.RPS != 0 || w.EPS != 0 {
				assert.Equal(t, w.RPS, g.RPS, "%s", a)
				assert.Equal(t, w.EPS, g.EPS, "%s", a)
			}
		}
	}
}

func getOK(t *testing.T, c *http.Client, url string) {
	t.Helper()
	resp, err := c.Get(url)
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "ok", string(body))
}

// The Transport hands each response's report to the picker with Done, in
// every format, from the header or the trailer, and nothing when none.
func TestTransport_loadReports(t *testing.T) {
	addrs, want := loadBackends(t)
	rec := newLoadRecorder(t, addrs...)
	tr := &balancerhttp.Transport{Picker: rec}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	const rounds = 5
	for range rounds * len(addrs) {
		getOK(t, c, "http://service/")
	}
	checkLoads(t, rec, addrs, want, rounds)
	assert.Zero(t, tr.BadLoadReports())
}

// The Proxy does the same.
func TestProxy_loadReports(t *testing.T) {
	addrs, want := loadBackends(t)
	rec := newLoadRecorder(t, addrs...)
	px := &balancerhttp.Proxy{Picker: rec, ErrorLog: quietLog}
	front := httptest.NewServer(px)
	defer front.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	const rounds = 5
	for range rounds * len(addrs) {
		getOK(t, c, front.URL)
	}
	checkLoads(t, rec, addrs, want, rounds)
	assert.Zero(t, px.BadLoadReports())
}

// hostileReports are reports loadreport.Parse rejects: each must be
// ignored (no Load), counted, and must not fail the request.
var hostileReports = []struct {
	name, header, value string
	trailer             bool
}{
	{"negative", loadreport.HeaderName, "TEXT cpu_utilization=-1", false},
	{"NaN", loadreport.HeaderName, "TEXT cpu_utilization=NaN", false},
	{"infinite", loadreport.HeaderName, "TEXT rps_fractional=1e999", false},
	{"unknown prefix", loadreport.HeaderName, "XML <cpu>0.5</cpu>", false},
	{"no prefix", loadreport.HeaderName, "cpu_utilization=0.5", false},
	{"bad base64", loadreport.HeaderName, "BIN !!!!", false},
	{"truncated protobuf", loadreport.HeaderNameBin, base64.RawStdEncoding.EncodeToString(protoDouble(1, 0.5)[:5]), false},
	{"wrong type", loadreport.HeaderName, `JSON {"cpu_utilization":"0.5"}`, false},
	{"unknown name", loadreport.HeaderName, "TEXT load=3", false},
	{"huge", loadreport.HeaderName, "TEXT named_metrics.x=1" + strings.Repeat(",named_metrics.x=1", 600), false},
	{"JSON cut short", loadreport.HeaderName, `JSON {"cpu_utilization":0.5`, false},
	{"in the trailer", loadreport.HeaderName, "TEXT cpu_utilization=-0.5", true},
}

// hostileServer answers request ?i=k with hostileReports[k].
func hostileServer(t *testing.T) string {
	return reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := strconv.Atoi(r.URL.Query().Get("i"))
		if err != nil || k < 0 || k >= len(hostileReports) {
			http.Error(w, "no such report", http.StatusNotFound)
			return
		}
		h := hostileReports[k]
		if h.trailer {
			w.Header().Set("Trailer", h.header)
			_, _ = io.WriteString(w, "ok")
			w.(http.Flusher).Flush()
			w.Header().Set(h.header, h.value)
			return
		}
		w.Header().Set(h.header, h.value)
		_, _ = io.WriteString(w, "ok")
	}))
}

func TestTransport_hostileLoadReports(t *testing.T) {
	addr := hostileServer(t)
	rec := newLoadRecorder(t, addr)
	tr := &balancerhttp.Transport{Picker: rec}
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	for i, h := range hostileReports {
		getOK(t, c, "http://service/?i="+strconv.Itoa(i))
		got := rec.seen(addr)
		require.Len(t, got, i+1)
		assert.Nil(t, got[i], "%s: trusted", h.name)
		assert.Equal(t, uint64(i+1), tr.BadLoadReports(), "%s: not counted", h.name)
	}
}

func TestProxy_hostileLoadReports(t *testing.T) {
	addr := hostileServer(t)
	rec := newLoadRecorder(t, addr)
	px := &balancerhttp.Proxy{Picker: rec, ErrorLog: quietLog}
	front := httptest.NewServer(px)
	defer front.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	for i, h := range hostileReports {
		getOK(t, c, front.URL+"/?i="+strconv.Itoa(i))
		got := rec.seen(addr)
		require.Len(t, got, i+1)
		assert.Nil(t, got[i], "%s: trusted", h.name)
		assert.Equal(t, uint64(i+1), px.BadLoadReports(), "%s: not counted", h.name)
	}
}

// A failure status's report reaches the picker with the failure, before
// the request is retried on the next peer.
func TestTransport_loadReportOnFailureStatus(t *testing.T) {
	failing := reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(loadreport.HeaderName, "TEXT cpu_utilization=0.875")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	ok := reportingServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	rec := newLoadRecorder(t, failing, ok)
	c := &http.Client{Transport: &balancerhttp.Transport{Picker: rec}, Timeout: 10 * time.Second}
	// Round robin over two peers tries the failing one in one of two
	// requests; max_fails 1 keeps it out after that.
	getOK(t, c, "http://service/")
	getOK(t, c, "http://service/")
	got := rec.seen(failing)
	require.Len(t, got, 1)
	require.NotNil(t, got[0])
	assert.Equal(t, 0.875, got[0].Utilization)
}
