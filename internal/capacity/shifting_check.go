package capacity

import (
	"testing"
	"time"
)

// CheckShifting logs each fleet's result of run (fleets named names, in
// the fleets' order, among them "Oracle", "Prequal" and "P2CPeakEWMA"),
// each one's p99 against P2CPeakEWMA's and the target (Prequal's
// p99 at least 2× lower than P2CPeakEWMA's: met or missed, with the
// ratio), and fails t for a request that failed otherwise than by its
// timeout. With compare set it also checks what held in every quiet run:
// the control, P2CPeakEWMA's p99 at least twice the full-information
// oracle's (else halving it is out of reach and the comparison tells
// nothing), and Prequal's p99 below P2CPeakEWMA's.
func CheckShifting(t testing.TB, sc Shifting, names []string, run ShiftRun, compare bool) {
	t.Helper()
	p99 := map[string]time.Duration{}
	for i, name := range names {
		r := run.Fleets[i]
		p99[name] = r.P99
		t.Logf("%s: %d requests, %d gave up after %v; p50 %v, p99 %v, mean %v; shares %s%%",
			name, r.N, r.Timeouts, sc.Timeout, r.P50.Round(time.Millisecond), r.P99.Round(time.Millisecond), r.Mean.Round(time.Millisecond), FormatShares(r.Shares))
		if len(r.Errs) > 0 {
			t.Errorf("%s: %d requests failed, first: %v", name, len(r.Errs), r.Errs[0])
		}
	}
	base := p99["P2CPeakEWMA"]
	for _, name := range names {
		if name != "P2CPeakEWMA" {
			t.Logf("P2CPeakEWMA's p99 / %s's: %.2f", name, float64(base)/float64(max(p99[name], 1)))
		}
	}
	met := map[bool]string{true: "met", false: "missed"}[2*p99["Prequal"] <= base]
	t.Logf("the issue's target, Prequal's p99 at least 2x lower than P2CPeakEWMA's: %.2fx, %s",
		float64(base)/float64(max(p99["Prequal"], 1)), met)
	if !compare {
		t.Logf("a noisy run: the comparisons are logged, not checked")
		return
	}
	if base < 2*p99["Oracle"] {
		t.Errorf("the control: P2CPeakEWMA's p99 %v is less than twice the full-information oracle's %v", base, p99["Oracle"])
	}
	if p99["Prequal"] >= base {
		t.Errorf("Prequal's p99 %v is not below P2CPeakEWMA's %v", p99["Prequal"], base)
	}
}
