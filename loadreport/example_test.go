package loadreport_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/lbgo/balancer/loadreport"
)

func ExampleMiddleware() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	m, err := loadreport.New(loadreport.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	_ = m.SetCPUUtilization(0.5)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "hello")
	}))

	now = start.Add(2 * time.Second)
	for range 4 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Header().Get(loadreport.HeaderName))
	}
	// Output:
	// TEXT cpu_utilization=0.5,named_metrics.rif=1
	// TEXT cpu_utilization=0.5,rps_fractional=0.5,named_metrics.rif=1
	// TEXT cpu_utilization=0.5,rps_fractional=1,named_metrics.rif=1
	// TEXT cpu_utilization=0.5,rps_fractional=1.5,named_metrics.rif=1
}

func ExampleParse() {
	r, err := loadreport.Parse("TEXT application_utilization=0.8,rps_fractional=200,eps=4")
	fmt.Println(r.ApplicationUtilization, r.RPSFractional, r.EPS, err)

	_, err = loadreport.Parse("TEXT cpu_utilization=-1")
	fmt.Println(err)
	// Output:
	// 0.8 200 4 <nil>
	// loadreport: invalid value: cpu_utilization is negative (-1)
}

// One Tracker behind two middlewares, as for two handlers of one server
// (or HTTP beside gRPC, with loadreport/grpcreport): each reports the
// server's whole load. A header is written when the handler writes,
// after its 3 ms: the second's rps is 1 request over 1.006 s, the
// third's 2 over 1.009 s.
func ExampleWithTracker() {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	t, err := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}
	api, _ := loadreport.New(loadreport.WithTracker(t))
	static, _ := loadreport.New(loadreport.WithTracker(t), loadreport.WithFormat(loadreport.JSON))
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now = now.Add(3 * time.Millisecond) // each request takes 3 ms
		fmt.Fprint(w, "hello")
	})
	now = start.Add(time.Second)
	for _, h := range []http.Handler{api.Handler(hello), static.Handler(hello), api.Handler(hello)} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Header().Get(loadreport.HeaderName))
	}
	// Output:
	// TEXT named_metrics.rif=1
	// JSON {"rps_fractional":0.9940357852882704,"named_metrics":{"rif":1,"latency_ms":3}}
	// TEXT rps_fractional=1.9821605550049557,named_metrics.rif=1,named_metrics.latency_ms=3
}
