package balancerhttp

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/lbgo/balancer/loadreport"
)

// A response with no report costs nothing: no allocation, no count. A
// trailer declared but not sent (net/http leaves its key with a nil
// value) is no report either.
func TestLoadReader_noReport(t *testing.T) {
	var lr loadReader
	for _, h := range []http.Header{
		nil,
		{"Content-Type": {"text/plain"}, "Content-Length": {"2"}},
		{loadreport.HeaderName: nil, loadreport.HeaderNameBin: nil},
	} {
		allocs := testing.AllocsPerRun(1000, func() {
			if lr.read(h, nil) != nil {
				t.Fatal("a report out of nothing")
			}
		})
		assert.Zero(t, allocs, "%v", h)
	}
	assert.Zero(t, lr.bad.Load())
}
