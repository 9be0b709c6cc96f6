package balancerhttp_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
)

// TestNewProber_probePath: NewProber takes the paths a probe can be sent
// to and a loadreport Middleware can answer on (a path starting with "/",
// no '#', no space or control character; a query may follow), and refuses
// the others, naming the path, rather than answering every probe Failed.
func TestNewProber_probePath(t *testing.T) {
	tests := []struct {
		path string
		ok   bool
	}{
		{"/_lbgo/probe", true},
		{"/", true},
		{"/a/b", true},
		{"/probe?zone=b&x=1", true},
		{"/a%2Fb", true},
		{"", false},
		{"x", false},
		{"_lbgo/probe", false},
		{"/_lbgo/probe #x", false},
		{"/a b", false},
		{"/a#b", false},
		{"/probe?zone=a b", false},
		{"/a\tb", false},
		{"/a\nb", false},
		{"/a\rb", false},
		{"/a\x00b", false},
		{"/a\x7fb", false},
		{"/a%zz", false},
		{"/a%2", false},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			pr, err := balancerhttp.NewProber(balancerhttp.WithProbePath(tt.path))
			if tt.ok {
				require.NoError(t, err)
				require.NoError(t, pr.Close())
				return
			}
			assert.Nil(t, pr)
			assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			assert.ErrorContains(t, err, "WithProbePath")
			assert.ErrorContains(t, err, strconv.Quote(tt.path))
		})
	}
}
