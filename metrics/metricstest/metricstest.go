// Package metricstest scrapes a /metrics endpoint over HTTP and reads
// series from it, for tests of programs that serve the collector of
// package metrics (or any Prometheus text exposition).
package metricstest

import (
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families is a parsed scrape: the metric families by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs url with c and parses the answer, which must be the text
// exposition format (Content-Type text/plain), failing t otherwise.
func Scrape(t testing.TB, c *http.Client, url string) Families {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
		t.Fatalf("GET %s: Content-Type %q, want the text exposition", url, ct)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return mfs
}

// Value returns the value of the first counter or gauge series of family
// name whose labels include want (nil: any), failing t if there is none.
func (f Families) Value(t testing.TB, name string, want map[string]string) float64 {
	t.Helper()
	v, ok := f.Lookup(name, want)
	if !ok {
		t.Fatalf("no %s%v in the scrape", name, want)
	}
	return v
}

// Lookup is Value without a test: ok is false if there is no such series.
func (f Families) Lookup(name string, want map[string]string) (v float64, ok bool) {
	mf := f[name]
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !matches(labels, want) {
			continue
		}
		switch mf.GetType() {
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), true
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// Sum returns the sum of the counter or gauge series of family name
// whose labels include want (nil: all of them).
func (f Families) Sum(name string, want map[string]string) float64 {
	sum := 0.0
	mf := f[name]
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if matches(labels, want) {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
