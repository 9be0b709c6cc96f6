package metricstest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

const exposition = `# TYPE a_total counter
a_total{peer="x",picker="p"} 3
a_total{peer="y",picker="p"} 4
# TYPE g gauge
g{peer="x"} 0.5
`

// TestScrape parses a literal exposition served on loopback and reads
// series by label, summing a family, and missing ones.
func TestScrape(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		io.WriteString(w, exposition)
	}))
	defer srv.Close()
	f := Scrape(t, &http.Client{Timeout: 10 * time.Second}, srv.URL)
	tests := []struct {
		name   string
		labels map[string]string
		want   float64
		ok     bool
		sum    float64
	}{
		{"a_total", map[string]string{"peer": "y"}, 4, true, 4},
		{"a_total", map[string]string{"picker": "p"}, 3, true, 7},
		{"a_total", nil, 3, true, 7},
		{"a_total", map[string]string{"peer": "z"}, 0, false, 0},
		{"g", map[string]string{"peer": "x"}, 0.5, true, 0.5},
		{"g", map[string]string{"picker": "p"}, 0, false, 0}, // no such label
		{"absent", nil, 0, false, 0},
	}
	for _, tt := range tests {
		v, ok := f.Lookup(tt.name, tt.labels)
		if v != tt.want || ok != tt.ok {
			t.Errorf("Lookup(%s, %v) = %v, %v; want %v, %v", tt.name, tt.labels, v, ok, tt.want, tt.ok)
		}
		if got := f.Sum(tt.name, tt.labels); got != tt.sum {
			t.Errorf("Sum(%s, %v) = %v, want %v", tt.name, tt.labels, got, tt.sum)
		}
	}
}
