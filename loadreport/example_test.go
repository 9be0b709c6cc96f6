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
