package sim

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"
)

// Check is one target of the latency-aware picker, measured on a report.
//
// The zero value is an empty check. A Check is a plain value, safe to
// share.
type Check struct {
	Scenario string
	Target   string
	Pass     bool
	Detail   string // the numbers behind the verdict
}

// Checks measures candidate against its targets in every scenario of r
// where they apply:
//   - below T*: its steady mean under the analytic T* (scenarios of M/M/1
//     backends);
//   - p99 against baseline, per scenario: no worse everywhere (the paired
//     difference over seeds is not significantly positive) and better where
//     a backend degrades in mid-run (significantly negative; with one seed,
//     simply negative);
//   - no sinkhole: where the watched backend fails fast, no 500 ms window
//     gives it more than its fair share beyond noise;
//   - probe floor: a backend that fails every attempt still gets some, at
//     most one attempt per second per client, in the second half of its
//     failure;
//   - readmission within 3τ of the recovery, τ being the candidate's
//     decay constant;
//   - herding with several clients no worse than baseline.
//
// The guard scenarios (those naming their Pickers) are left out: their
// targets are the guards'. It returns an error if r lacks either policy,
// and one wrapping
// ErrInvalid if tau is not positive.
func (r *Report) Checks(candidate, baseline string, tau time.Duration) ([]Check, error) {
	if tau <= 0 {
		return nil, invalid("sim: decay constant %v is not positive", tau)
	}
	var out []Check
	for s := range r.Scenarios {
		sc := &r.Scenarios[s]
		if sc.Pickers != nil {
			continue // a guard scenario: its targets are its own
		}
		c, ok := r.Find(sc.Name, candidate)
		if !ok {
			return nil, fmt.Errorf("sim: no runs of %q in scenario %s", candidate, sc.Name)
		}
		b, ok := r.Find(sc.Name, baseline)
		if !ok {
			return nil, fmt.Errorf("sim: no runs of %q in scenario %s", baseline, sc.Name)
		}
		add := func(target string, pass bool, format string, args ...any) {
			out = append(out, Check{Scenario: sc.Name, Target: target, Pass: pass, Detail: fmt.Sprintf(format, args...)})
		}

		if t, _, ok := TStar(sc); ok {
			t *= 1000
			add("steady mean below T*", c.SteadyMean.Mean < t,
				"%s ms vs T* %.2f ms", pm(c.SteadyMean, 2), t)
		}

		d := paired(c, b, func(r *Result) float64 { return float64(r.P99) / float64(time.Millisecond) })
		from, to, degraded := sc.Degraded()
		if degraded && from > 0 {
			better := d.Mean < 0 && (len(r.Seeds) < 2 || d.Mean+d.CI < 0)
			add("p99 better than "+baseline, better,
				"%s vs %s ms, difference %s", num(c.P99.Mean, 2), num(b.P99.Mean, 2), pm(d, 2))
		} else {
			worse := d.Mean > 0 && (len(r.Seeds) < 2 || d.Mean-d.CI > 0)
			add("p99 no worse than "+baseline, !worse,
				"%s vs %s ms, difference %s", num(c.P99.Mean, 2), num(b.P99.Mean, 2), pm(d, 2))
		}

		if sc.HasFastError() {
			add("no sinkhole", c.Sinkholes == 0,
				"peak share %s× fair share; %d of %d runs above it beyond noise",
				num(c.PeakShare.Mean, 2), c.Sinkholes, len(c.Runs))
		}

		if degraded && failsAll(sc) {
			perClient := c.ProbeRate.Mean / float64(orDefault(sc.Clients, 1))
			add("probe floor", perClient > 0 && perClient <= 1,
				"%s attempts/s per client in [%s, %s)", num(perClient, 2), span((from+to)/2), span(to))
		}

		if rd := c.Readmit.Mean; degraded && !math.IsNaN(rd) {
			add(fmt.Sprintf("readmission within 3τ (τ=%v)", tau), rd <= 3*tau.Seconds(),
				"%s s = %s τ after recovery at %s", num(rd, 1), num(rd/tau.Seconds(), 2), span(to))
		}

		if orDefault(sc.Clients, 1) > 1 {
			h := paired(c, b, func(r *Result) float64 { return r.Herd })
			worse := h.Mean > 0 && (len(r.Seeds) < 2 || h.Mean-h.CI > 0)
			add("herding no worse than "+baseline, !worse,
				"herd %s vs %s, difference %s", num(c.Herd.Mean, 2), num(b.Herd.Mean, 2), pm(h, 2))
		}
	}
	return out, nil
}

// failsAll reports whether the watched backend fails every attempt at some
// point.
func failsAll(sc *Scenario) bool {
	for _, f := range sc.Backends[sc.Watch].Faults {
		if f.Prob >= 1 {
			return true
		}
	}
	return false
}

// paired returns the mean and confidence interval of the per-seed
// difference f(c) − f(b): runs with the same seed face the same workload,
// so the difference is much tighter than either value.
func paired(c, b *Summary, f func(*Result) float64) Stat {
	n := min(len(c.Runs), len(b.Runs))
	v := make([]float64, n)
	for i := range v {
		v[i] = f(c.Runs[i]) - f(b.Runs[i])
	}
	return stat(v)
}

// pm formats a Stat as "mean ± ci", or the mean alone without an interval.
func pm(s Stat, prec int) string {
	if s.CI == 0 || math.IsNaN(s.Mean) || math.IsInf(s.Mean, 0) {
		return num(s.Mean, prec)
	}
	return num(s.Mean, prec) + " ± " + num(s.CI, prec)
}

// WriteChecks prints checks one a line, PASS or FAIL first, and a count.
func WriteChecks(w io.Writer, checks []Check) error {
	ew := &errWriter{w: w}
	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', 0)
	pass := 0
	for _, c := range checks {
		verdict := "FAIL"
		if c.Pass {
			verdict = "PASS"
			pass++
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", verdict, c.Scenario, c.Target, c.Detail)
	}
	tw.Flush()
	fmt.Fprintf(ew, "%d of %d checks pass\n", pass, len(checks))
	return ew.err
}
