package capacity

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// The capacity shares, big/medium/small, from the package doc's table.
var (
	SharesBefore = []float64{4.0 / 7, 2.0 / 7, 1.0 / 7}
	SharesAfter  = []float64{0.25, 0.5, 0.25}
)

// ShareMisses names each server whose share is more than tol from want.
func ShareMisses(got, want []float64, tol float64) []string {
	var out []string
	for i, name := range []string{"big", "medium", "small"} {
		if math.Abs(got[i]-want[i]) > tol {
			out = append(out, fmt.Sprintf("%s %.1f%% (capacity %.1f%%)", name, 100*got[i], 100*want[i]))
		}
	}
	return out
}

// FormatShares writes shares as percentages, slash-separated.
func FormatShares(s []float64) string {
	var b strings.Builder
	for i, v := range s {
		if i > 0 {
			b.WriteByte('/')
		}
		fmt.Fprintf(&b, "%.1f", 100*v)
	}
	return b.String()
}

// Percentile returns the q-quantile of ds (nearest rank), 0 for none.
func Percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(math.Ceil(q*float64(len(s))))-1)]
}
