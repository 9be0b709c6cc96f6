package capacity

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that keeps what CheckShifting reports.
type recorder struct {
	testing.TB
	errs, logs []string
}

func (r *recorder) Helper()                      {}
func (r *recorder) Logf(f string, args ...any)   { r.logs = append(r.logs, fmt.Sprintf(f, args...)) }
func (r *recorder) Errorf(f string, args ...any) { r.errs = append(r.errs, fmt.Sprintf(f, args...)) }

// TestCheckShifting: the checks fail where they must. With P2CPeakEWMA at
// 1 s: an oracle at 500 ms and Prequal at 800 ms pass (the target, 500 ms,
// missed and logged so); an oracle at 501 ms fails the control; Prequal
// at 1 s fails the comparison; a failed request fails; a noisy run
// (compare false) checks only the failures; Prequal at 500 ms meets the
// target.
func TestCheckShifting(t *testing.T) {
	names := []string{"Oracle", "Prequal", "P2CPeakEWMA"}
	run := func(oracle, prequal time.Duration, errs ...error) ShiftRun {
		return ShiftRun{Fleets: []ShiftResult{{P99: oracle}, {P99: prequal, Errs: errs}, {P99: time.Second}}}
	}
	ms := time.Millisecond
	for _, tc := range []struct {
		name    string
		run     ShiftRun
		compare bool
		errs    int
		target  string
	}{
		{"passes, target missed", run(500*ms, 800*ms), true, 0, "1.25x, missed"},
		{"target met", run(500*ms, 500*ms), true, 0, "2.00x, met"},
		{"control fails", run(501*ms, 800*ms), true, 1, "missed"},
		{"Prequal no better", run(500*ms, time.Second), true, 1, "missed"},
		{"both fail", run(600*ms, 1100*ms), true, 2, "missed"},
		{"a failed request", run(500*ms, 800*ms, errors.New("refused")), true, 1, "missed"},
		{"noisy: comparisons not checked", run(900*ms, 1100*ms), false, 0, "missed"},
		{"noisy: failures still", run(900*ms, 1100*ms, errors.New("refused")), false, 1, "missed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{TB: t}
			CheckShifting(r, Fleet16, names, tc.run, tc.compare)
			assert.Len(t, r.errs, tc.errs, "%q", r.errs)
			found := false
			for _, l := range r.logs {
				if strings.Contains(l, "the issue's target") && strings.Contains(l, tc.target) {
					found = true
				}
			}
			assert.True(t, found, "target line %q in %q", tc.target, r.logs)
		})
	}
}
