package capacity

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// The share check tells apart what it must: capacity shares pass, the
// equal split that RoundRobin gives fails, before and after the change.
func TestShareMisses(t *testing.T) {
	for _, tc := range []struct {
		name      string
		got, want []float64
		misses    int
	}{
		{"capacity before", SharesBefore, SharesBefore, 0},
		{"capacity after", SharesAfter, SharesAfter, 0},
		{"just inside", []float64{4.0/7 - 0.079, 2.0/7 + 0.04, 1.0/7 + 0.039}, SharesBefore, 0},
		{"equal split before", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, SharesBefore, 2},
		{"equal split after", []float64{1.0 / 3, 1.0 / 3, 1.0 / 3}, SharesAfter, 3},
		{"not following the change", SharesBefore, SharesAfter, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Len(t, ShareMisses(tc.got, tc.want, ShareTol), tc.misses)
		})
	}
}
