package sim

import (
	"fmt"
	"math"
	"time"
)

// The targets of a picker that balances by probes (Prequal), as
// Report.ProbeChecks measures them.
const (
	// ProbeBaseline is the picker a probing one must be no worse than in
	// any scenario.
	ProbeBaseline = "P2CPeakEWMA"
	// SinkBaseline is the picker a fast-failing backend must get no less
	// traffic under than under the probing one.
	SinkBaseline = "FastestFirst"
	// MaxProbesPerRequest bounds the probes a request may cost, in every
	// scenario and seed.
	MaxProbesPerRequest = 3.0
)

// OracleTargets returns, by scenario, the factor of Oracle SED's p99 that
// a probing picker's p99 must stay within: 1.5 with 16 clients on shifting
// speeds (fleet16), 2 with 64 (fleet64).
func OracleTargets() map[string]float64 {
	return map[string]float64{"fleet16": 1.5, "fleet64": 2}
}

// ProbeChecks measures candidate, a picker that balances by probes,
// against its targets in every scenario of r where they apply, each over
// the report's seeds paired (the runs of one seed face the same
// workload):
//   - within the oracle: in a scenario of OracleTargets, the mean over
//     seeds of its p99 minus the factor times Oracle SED's is at most 0;
//   - no worse than ProbeBaseline: its p99 is not significantly above
//     the baseline's (the paired difference's 95% interval is not wholly
//     above 0; with one seed, not above 0);
//   - no sink: where the watched backend fails fast, its share of the
//     attempts sent while it fails is not significantly above its share
//     under SinkBaseline;
//   - probes: at most MaxProbesPerRequest per request in every run.
//
// The guard scenarios are left out, as by Checks. It returns an error if
// r lacks the candidate, ProbeBaseline, or, where
// their checks apply, Oracle SED or SinkBaseline.
func (r *Report) ProbeChecks(candidate string) ([]Check, error) {
	var out []Check
	targets := OracleTargets()
	for s := range r.Scenarios {
		sc := &r.Scenarios[s]
		if sc.Pickers != nil {
			continue // a guard scenario, left out as by Checks
		}
		find := func(policy string) (*Summary, error) {
			m, ok := r.Find(sc.Name, policy)
			if !ok {
				return nil, fmt.Errorf("sim: no runs of %q in scenario %s", policy, sc.Name)
			}
			return m, nil
		}
		add := func(target string, pass bool, format string, args ...any) {
			out = append(out, Check{Scenario: sc.Name, Target: target, Pass: pass, Detail: fmt.Sprintf(format, args...)})
		}
		c, err := find(candidate)
		if err != nil {
			return nil, err
		}
		p99 := func(r *Result) float64 { return float64(r.P99) / float64(time.Millisecond) }

		if k, ok := targets[sc.Name]; ok {
			o, err := find(OracleSED)
			if err != nil {
				return nil, err
			}
			n := min(len(c.Runs), len(o.Runs))
			v := make([]float64, n)
			for i := range v {
				v[i] = p99(c.Runs[i]) - k*p99(o.Runs[i])
			}
			over := stat(v)
			add(fmt.Sprintf("p99 within %g× %s", k, OracleSED), over.Mean <= 0,
				"%s vs %s ms: %s× (target %g×); p99 − %g × SED's: %s ms",
				num(c.P99.Mean, 2), num(o.P99.Mean, 2), num(c.P99.Mean/o.P99.Mean, 2), k, k, pm(over, 2))
		}

		b, err := find(ProbeBaseline)
		if err != nil {
			return nil, err
		}
		d := paired(c, b, p99)
		worse := d.Mean > 0 && (len(r.Seeds) < 2 || d.Mean-d.CI > 0)
		add("p99 no worse than "+ProbeBaseline, !worse,
			"%s vs %s ms, difference %s", num(c.P99.Mean, 2), num(b.P99.Mean, 2), pm(d, 2))

		if from, to, ok := sc.Degraded(); ok && sc.HasFastError() {
			f, err := find(SinkBaseline)
			if err != nil {
				return nil, err
			}
			share := func(r *Result) float64 { return failingShare(r, sc.Watch, from, to) }
			d := paired(c, f, share)
			more := d.Mean > 0 && (len(r.Seeds) < 2 || d.Mean-d.CI > 0)
			add("fast-failing backend's share no more than under "+SinkBaseline, !more,
				"backend %d: %s%% vs %s%% of the attempts in [%s, %s), difference %s points",
				sc.Watch, num(100*meanOf(c, share), 2), num(100*meanOf(f, share), 2), span(from), span(to), pm(scaled(d, 100), 2))
		}

		top := 0.0
		for _, run := range c.Runs {
			top = max(top, run.ProbesPerRequest())
		}
		add(fmt.Sprintf("at most %g probes per request", MaxProbesPerRequest), top <= MaxProbesPerRequest,
			"%s per request (mean), %s in the worst run", num(c.ProbesPerRequest.Mean, 4), num(top, 4))
	}
	return out, nil
}

// failingShare returns backend i's share of the attempts sent in the
// buckets wholly inside [from, to).
func failingShare(r *Result, i int, from, to time.Duration) float64 {
	k0 := int((int64(from) + int64(Bucket) - 1) / int64(Bucket))
	k1 := int(int64(to) / int64(Bucket))
	s, n := r.Share(i, k0, k1)
	if n == 0 {
		return math.NaN()
	}
	return s
}

// meanOf returns the mean of f over m's runs.
func meanOf(m *Summary, f func(*Result) float64) float64 {
	v := make([]float64, len(m.Runs))
	for i, r := range m.Runs {
		v[i] = f(r)
	}
	return stat(v).Mean
}

// scaled returns s times k.
func scaled(s Stat, k float64) Stat { return Stat{Mean: s.Mean * k, CI: s.CI * k} }
