package loadreport_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
)

// A request of 4 ms completes at RIF 0; with two in flight, levels 2
// (RIF 2-3) and 1 are empty, so the estimate is level 0's mean scaled by
// (2+1)/(0+1): 12 ms. With three in flight, level 2 holds the request
// that began at RIF 2.
func ExampleTracker_Probe() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t, _ := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return now }))
	b := t.Begin()
	now = now.Add(4 * time.Millisecond)
	t.End(b, false)
	t.Begin()
	t.Begin()
	fmt.Println(t.Probe())

	c := t.Begin() // began at RIF 2
	now = now.Add(9 * time.Millisecond)
	t.End(c, false)
	t.Begin()
	fmt.Println(t.Probe())
	// Output:
	// 2 12ms
	// 3 9ms
}

// The Middleware answers probes on DefaultProbePath itself; the
// client reads the answer with ParseProbe.
func ExampleParseProbe() {
	m, _ := loadreport.New()
	srv := httptest.NewServer(m.Handler(http.NotFoundHandler()))
	defer srv.Close()
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(srv.URL + loadreport.DefaultProbePath)
	if err != nil {
		fmt.Println(err)
		return
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, loadreport.MaxProbeLen+1))
	resp.Body.Close()
	fmt.Printf("%s\n", body)
	fmt.Println(loadreport.ParseProbe(body))

	_, _, err = loadreport.ParseProbe([]byte("TEXT named_metrics.rif=NaN"))
	fmt.Println(errors.Is(err, balancer.ErrInvalidProbe), err)
	// Output:
	// TEXT named_metrics.rif=0,named_metrics.latency_ms=0
	// 0 0s <nil>
	// true balancer: invalid probe answer: loadreport: invalid value: named_metrics.rif=NaN, want 0 to 1048576
}

// A server that mounts probes on its own mux, on another path.
func ExampleProbeHandler() {
	t, _ := loadreport.NewTracker()
	t.Begin()
	mux := http.NewServeMux()
	mux.Handle("GET /internal/probe", loadreport.ProbeHandler(t))
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/internal/probe", nil))
	fmt.Println(rec.Code, rec.Body)
	// Output:
	// 200 TEXT named_metrics.rif=1,named_metrics.latency_ms=0
}
