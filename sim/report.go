package sim

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/lbgo/balancer"
)

// Options controls Compare.
//
// The zero value runs one seed, seed 0, on GOMAXPROCS goroutines. Options
// is a plain value, safe to share.
type Options struct {
	// Seeds is the number of runs per scenario and policy, with seeds
	// Seed, Seed+1, ...; 0 means 1, negative is invalid.
	Seeds int
	Seed  uint64
	// Parallel is how many runs go at once, each on its own goroutine;
	// 0 means GOMAXPROCS, negative is invalid. It changes nothing in the
	// results.
	Parallel int
}

// Stat is a metric over the seeds of a comparison: its mean, and the
// half-width of its 95% confidence interval (Student's t over the per-seed
// values; 0 with one seed). A NaN mean means the metric does not apply; an
// infinite one that some seed never met its condition.
//
// The zero value is a mean of 0 without an interval. A Stat is a plain
// value, safe to share.
type Stat struct {
	Mean, CI float64
}

// Summary is one policy in one scenario, over every seed.
//
// The zero value is an empty summary. A Summary is not modified once
// Compare returns it and may be read concurrently.
type Summary struct {
	Policy string
	Oracle bool
	Runs   []*Result // one per seed, in seed order

	Mean, SteadyMean, P50, P99, P999  Stat // milliseconds
	ErrorRate                         Stat // fraction of requests
	Refused                           Stat // fraction of requests refused at once (Result.Refused)
	FailedAttempts                    Stat // fraction of attempts that failed
	Divert, Readmit                   Stat // seconds
	PeakShare, ProbeRate, Herd, Churn Stat
	Sinkholes                         int // runs where the watched backend was a sinkhole
	// ProbesPerRequest and ProbeLoad are Result's, over the seeds: 0 for
	// a policy that does not probe.
	ProbesPerRequest, ProbeLoad Stat
	// The guard metrics over the scenario's Window (see Measure): the
	// offered load and the attempts at the backends per second, their
	// ratio, the failed and refused shares of the requests arriving in
	// it, its p99 (ms), the before-window's, and their ratio.
	Offered, AttemptRate, Amplification  Stat
	WindowErrors, WindowRefused          Stat
	WindowP99, BeforeP99, WindowP99Ratio Stat
	// The hedging metrics of a hedged policy (Hedged), 0 for any other:
	// the hedges sent per request, the share of them that won, and the
	// worker time spent on losers over all worker time on requests.
	Hedged                      bool
	HedgeShare, HedgeWon, Waste Stat
}

// Report is the outcome of Compare: a Summary for every scenario and
// policy.
//
// The zero value is an empty report. A Report is not modified once Compare
// returns it and may be read concurrently.
type Report struct {
	Seeds     []uint64
	Scenarios []Scenario
	Policies  []string
	Summaries [][]Summary // [scenario][policy], in the order given
}

// Compare runs every policy in every scenario with o.Seeds seeds and
// summarizes the runs. Runs are independent simulations, spread over
// o.Parallel goroutines; the report is the same whatever their number.
// Before running any, it checks every scenario (Scenario.Validate), the
// options (ErrInvalid for negative Seeds or Parallel) and the whole
// comparison's cost against MaxCompareRequests and MaxBytes (ErrTooLarge).
// A scenario that names its Pickers runs those of pols, each followed by
// its guards' variants (see Scenario.Pickers), and is ErrInvalid when pols
// has none of them.
func Compare(scs []Scenario, pols []Policy, o Options) (*Report, error) {
	if o.Seeds < 0 || o.Parallel < 0 {
		return nil, invalid("sim: negative Seeds %d or Parallel %d", o.Seeds, o.Parallel)
	}
	for i := range scs {
		if err := scs[i].Validate(); err != nil {
			return nil, err
		}
	}
	for _, p := range pols {
		if p.New == nil && p.oracle == nil && p.Probed == nil {
			return nil, invalid("sim: policy %q has no constructor", p.Name)
		}
	}
	par := o.Parallel
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	if err := checkCompare(scs, len(pols), max(o.Seeds, 1), par); err != nil {
		return nil, err
	}
	seeds := make([]uint64, max(o.Seeds, 1))
	for i := range seeds {
		seeds[i] = o.Seed + uint64(i)
	}
	type job struct{ s, p, k int }
	var jobs []job
	run := make([][]Policy, len(scs)) // each scenario's policies
	for s := range scs {
		if run[s] = scs[s].Policies(pols); len(run[s]) == 0 {
			return nil, invalid("sim: scenario %s runs only %s (and their guards' variants): none of them is given", scs[s].Name, strings.Join(scs[s].Pickers, ", "))
		}
		for p := range run[s] {
			for k := range seeds {
				jobs = append(jobs, job{s, p, k})
			}
		}
	}
	results := make([]*Result, len(jobs))
	errs := make([]error, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(par, len(jobs)) {
		wg.Go(func() {
			for {
				j := int(next.Add(1) - 1)
				if j >= len(jobs) {
					return
				}
				jb := jobs[j]
				results[j], errs[j] = Run(&scs[jb.s], run[jb.s][jb.p], seeds[jb.k])
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	r := &Report{Seeds: seeds, Scenarios: scs}
	for _, p := range pols {
		r.Policies = append(r.Policies, p.Name)
	}
	r.Summaries = make([][]Summary, len(scs))
	j := 0
	for s := range scs {
		r.Summaries[s] = make([]Summary, len(run[s]))
		for p := range run[s] {
			r.Summaries[s][p] = summarize(run[s][p], results[j:j+len(seeds)])
			j += len(seeds)
		}
	}
	return r, nil
}

// Find returns the summary of policy in scenario.
func (r *Report) Find(scenario, policy string) (*Summary, bool) {
	for s := range r.Scenarios {
		if r.Scenarios[s].Name != scenario {
			continue
		}
		for p := range r.Summaries[s] {
			if r.Summaries[s][p].Policy == policy {
				return &r.Summaries[s][p], true
			}
		}
	}
	return nil, false
}

func summarize(p Policy, runs []*Result) Summary {
	sum := Summary{Policy: p.Name, Oracle: p.IsOracle(), Runs: runs}
	over := func(f func(*Result) float64) Stat {
		v := make([]float64, len(runs))
		for i, r := range runs {
			v[i] = f(r)
		}
		return stat(v)
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	sum.Mean = over(func(r *Result) float64 { return ms(r.Mean) })
	sum.SteadyMean = over(func(r *Result) float64 { return ms(r.SteadyMean) })
	sum.P50 = over(func(r *Result) float64 { return ms(r.P50) })
	sum.P99 = over(func(r *Result) float64 { return ms(r.P99) })
	sum.P999 = over(func(r *Result) float64 { return ms(r.P999) })
	sum.ErrorRate = over((*Result).ErrorRate)
	sum.Refused = over(func(r *Result) float64 { return ratio(r.Refused, r.Requests) })
	sum.FailedAttempts = over(func(r *Result) float64 { return ratio(r.FailedAttempts, r.Attempts) })
	sum.Divert = over(func(r *Result) float64 { return r.Divert })
	sum.Readmit = over(func(r *Result) float64 { return r.Readmit })
	sum.PeakShare = over(func(r *Result) float64 { return r.PeakShare })
	sum.ProbeRate = over(func(r *Result) float64 { return r.ProbeRate })
	sum.Herd = over(func(r *Result) float64 { return r.Herd })
	sum.Churn = over(func(r *Result) float64 { return r.Churn })
	sum.ProbesPerRequest = over((*Result).ProbesPerRequest)
	sum.ProbeLoad = over((*Result).ProbeLoad)
	if len(runs) > 0 {
		if win := runs[0].window; win.To > win.From {
			secs := win.seconds()
			sum.Offered = over(func(r *Result) float64 { return float64(r.WindowRequests) / secs })
			sum.AttemptRate = over(func(r *Result) float64 { return float64(r.WindowAttempts) / secs })
		}
	}
	sum.Amplification = over((*Result).Amplification)
	sum.WindowErrors = over(func(r *Result) float64 { return ratio(r.WindowFailed, r.WindowRequests) })
	sum.WindowRefused = over(func(r *Result) float64 { return ratio(r.WindowRefused, r.WindowRequests) })
	sum.WindowP99 = over(func(r *Result) float64 { return ms(r.WindowP99) })
	sum.BeforeP99 = over(func(r *Result) float64 { return ms(r.BeforeP99) })
	sum.WindowP99Ratio = over(func(r *Result) float64 { return ratio64(r.WindowP99, r.BeforeP99) })
	_, sum.Hedged = p.HedgeBase()
	sum.HedgeShare = over(func(r *Result) float64 { return ratio(r.Hedges, r.Requests) })
	sum.HedgeWon = over(func(r *Result) float64 { return ratio(r.HedgesWon, r.Hedges) })
	sum.Waste = over(func(r *Result) float64 { return ratio64(r.HedgeWaste, r.ServiceTime) })
	for _, r := range runs {
		if r.Sinkhole {
			sum.Sinkholes++
		}
	}
	return sum
}

// ratio64 returns a/b, or 0 when b is 0.
func ratio64(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// ratio returns a/b, or 0 when b is 0.
func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// tQuantile975 holds Student's t 0.975 quantiles for 1 to 30 degrees of
// freedom; past 30 the normal 1.96 is close enough.
var tQuantile975 = [...]float64{12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
	2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
	2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042}

// tq returns the 0.975 quantile of Student's t with df degrees of freedom.
func tq(df int) float64 {
	if df >= 1 && df <= len(tQuantile975) {
		return tQuantile975[df-1]
	}
	return 1.96
}

// stat returns the mean of v and its 95% confidence half-width. Any NaN
// makes the mean NaN (not applicable), any +Inf makes it +Inf (never).
func stat(v []float64) Stat {
	if len(v) == 0 {
		return Stat{Mean: math.NaN()}
	}
	var sum float64
	for _, x := range v {
		if math.IsNaN(x) {
			return Stat{Mean: math.NaN()}
		}
		sum += x
	}
	if math.IsInf(sum, 0) {
		return Stat{Mean: math.Inf(1)}
	}
	mean := sum / float64(len(v))
	if len(v) < 2 {
		return Stat{Mean: mean}
	}
	var ss float64
	for _, x := range v {
		ss += (x - mean) * (x - mean)
	}
	sd := math.Sqrt(ss / float64(len(v)-1))
	return Stat{Mean: mean, CI: tq(len(v)-1) * sd / math.Sqrt(float64(len(v)))}
}

// column is one column of a scenario's table.
type column struct {
	head string
	cell func(*Summary) string
}

// columns returns the columns that apply to scenario si.
func (r *Report) columns(si int) []column {
	s := &r.Scenarios[si]
	seeds := len(r.Seeds)
	ci := func(st Stat, prec int) string {
		if seeds < 2 || math.IsNaN(st.Mean) || math.IsInf(st.Mean, 0) {
			return num(st.Mean, prec)
		}
		return num(st.Mean, prec) + " ± " + num(st.CI, prec)
	}
	cols := []column{
		{"policy", func(m *Summary) string { return m.Policy }},
		{"mean ms", func(m *Summary) string { return ci(m.Mean, 2) }},
	}
	if s.Steady > 0 {
		cols = append(cols, column{"steady ms", func(m *Summary) string { return ci(m.SteadyMean, 2) }})
	}
	cols = append(cols,
		column{"p50 ms", func(m *Summary) string { return num(m.P50.Mean, 2) }},
		column{"p99 ms", func(m *Summary) string { return ci(m.P99, 2) }},
		column{"p99.9 ms", func(m *Summary) string { return num(m.P999.Mean, 2) }},
		column{"errors %", func(m *Summary) string { return num(100*m.ErrorRate.Mean, 2) }},
	)
	if from, _, ok := s.Degraded(); ok {
		if from > 0 {
			cols = append(cols, column{"divert s", func(m *Summary) string { return num(m.Divert.Mean, 1) }})
		}
		cols = append(cols,
			column{"readmit s", func(m *Summary) string { return num(m.Readmit.Mean, 1) }},
			column{"peak share", func(m *Summary) string {
				v := num(m.PeakShare.Mean, 2)
				if m.Sinkholes > 0 {
					v += fmt.Sprintf(" (sinkhole %d/%d)", m.Sinkholes, len(m.Runs))
				}
				return v
			}},
		)
	}
	cols = append(cols, r.ratioColumns(si)...)
	cols = append(cols, guardColumns(s, ci)...)
	if r.probes(si) {
		cols = append(cols,
			column{"probes/req", func(m *Summary) string { return num(m.ProbesPerRequest.Mean, 2) }},
			column{"probe load %", func(m *Summary) string { return num(100*m.ProbeLoad.Mean, 3) }},
		)
	}
	if r.hedged(si) {
		cols = append(cols,
			column{"hedges %", func(m *Summary) string { return num(100*m.HedgeShare.Mean, 2) }},
			column{"won %", func(m *Summary) string { return num(100*m.HedgeWon.Mean, 1) }},
			column{"wasted %", func(m *Summary) string { return num(100*m.Waste.Mean, 2) }},
		)
	}
	return append(cols,
		column{"herd", func(m *Summary) string { return num(m.Herd.Mean, 2) }},
		column{"churn", func(m *Summary) string { return num(m.Churn.Mean, 3) }},
	)
}

// probes reports whether a policy of scenario si sent probes.
func (r *Report) probes(si int) bool {
	for _, m := range r.Summaries[si] {
		if m.ProbesPerRequest.Mean > 0 {
			return true
		}
	}
	return false
}

// hedged reports whether a policy of scenario si hedges.
func (r *Report) hedged(si int) bool {
	for _, m := range r.Summaries[si] {
		if m.Hedged {
			return true
		}
	}
	return false
}

// hedgeLegend explains the hedge columns.
const hedgeLegend = "+hedge: the picker with hedged attempts (the second to another peer after the client's p95, at most 5% of requests and none while the client's attempts fail, the loser cancelled: it leaves the backend's queue unless already in service, where it runs to its end). hedges %: hedges sent per request; won %: the hedges that answered first; wasted %: the workers' time spent on losers, of all their time on requests."

// probeLegend explains the probe columns.
var probeLegend = fmt.Sprintf("probes/req: probes sent per request; probe load %%: the servers' time answering them (%v each, no worker occupied) over their workers' time serving requests.", ProbeCost)

// ratioOracles are the oracles a scenario with jitter measures p99
// against, with their column heads.
var ratioOracles = []struct{ name, head string }{
	{OracleSED, "p99/SED"},
	{OracleInfo, "p99/full-info"},
}

// ratioColumns returns, in a scenario with jitter (S4 of the plan, where
// the oracle is the reference), a column per oracle of ratioOracles in
// the report: each policy's mean p99 over the oracle's.
func (r *Report) ratioColumns(si int) []column {
	if r.Scenarios[si].Jitter.Every == 0 {
		return nil
	}
	var cols []column
	for _, o := range ratioOracles {
		ref, ok := r.Find(r.Scenarios[si].Name, o.name)
		if !ok {
			continue
		}
		cols = append(cols, column{o.head, func(m *Summary) string { return num(m.P99.Mean/ref.P99.Mean, 2) }})
	}
	return cols
}

// num formats v with prec decimals, "never" for +Inf and "-" for NaN.
func num(v float64, prec int) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "never"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

// describe returns the line that states a scenario's traffic and the
// analytic references.
func (r *Report) describe(s *Scenario) string {
	var b strings.Builder
	rate := s.ArrivalRate()
	if s.Rate > 0 {
		fmt.Fprintf(&b, "%.0f requests/s", rate)
	} else {
		fmt.Fprintf(&b, "Load %.2f (%.0f requests/s)", s.Load, rate)
	}
	k := orDefault(s.Clients, 1)
	clients := "1 client"
	if k > 1 {
		clients = fmt.Sprintf("%d clients", k)
	}
	fmt.Fprintf(&b, " for %s, %s, timeout %s", span(s.Duration), clients, span(orDefault(s.Timeout, DefaultTimeout)))
	if s.Tries == 1 {
		b.WriteString(", no retry")
	}
	if s.NoReports {
		b.WriteString(", no load reports")
	}
	seeds := fmt.Sprintf("seed %d", r.Seeds[0])
	if n := len(r.Seeds); n > 1 {
		seeds = fmt.Sprintf("seeds %d-%d", r.Seeds[0], r.Seeds[n-1])
	}
	fmt.Fprintf(&b, ", %s.", seeds)
	if t, pooled, ok := TStar(s); ok {
		fmt.Fprintf(&b, " T* = %.2f ms (best random static split, square-root rule), pooled bound %.2f ms.", 1000*t, 1000*pooled)
	}
	if s.Steady > 0 {
		fmt.Fprintf(&b, " Steady: requests arriving after %s.", span(s.Steady))
	}
	if s.Measure != NoMeasure {
		fmt.Fprintf(&b, " Window: requests arriving in [%s, %s)", span(s.Window.From), span(s.Window.To))
		if s.Measure == WindowP99 {
			fmt.Fprintf(&b, "; before: in [%s, %s)", span(s.Before.From), span(s.Before.To))
		}
		b.WriteString(".")
	}
	return b.String()
}

// span formats d in seconds, or milliseconds below one second: "60 s",
// "500 ms".
func span(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%g ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%g s", d.Seconds())
}

// Legend explains the report's columns; the markdown report ends with it,
// and a line on the oracle, columns and pickers added since.
const Legend = `Latencies are per request, from arrival to the end of its last attempt, failed requests included, over every seed (mean and 95% confidence interval across seeds).
Failed attempts are retried at once on another peer, as nginx does, unless the scenario says "no retry"; errors are requests that failed for good; a request that finds no eligible peer fails at once, at 0 ms (see the notes under a table).
divert: seconds from the degradation until the degraded backend's share of attempts (over 500 ms) stays at or below half its fair share; readmit: seconds from the recovery until it stays at or above half its fair share; never: not within the run.
peak share: the degraded backend's largest share of attempts in a 500 ms window while degraded, as a multiple of its fair share; sinkhole: above its fair share beyond binomial noise.
herd: 99th percentile over time of the largest in-flight count of a backend over the mean; churn: mean change of the traffic split between consecutive 500 ms windows (total variation).
Oracle SED sends each attempt where it will finish soonest, reading the true queues and service times; Oracle split draws from the square-root split of the true current capacities.`

// legendMore follows Legend in the markdown report: the oracle, columns and
// pickers added since Legend was fixed.
const legendMore = `Oracle full-info sends each attempt where the expected delay is least from every backend's true requests in flight and current speed, no service time known in advance; p99/SED and p99/full-info (scenarios with changing speeds): p99 over that oracle's; a +rif picker weighs the requests in flight its backends report (WithReportedLoad); Oracle probed chooses as Oracle full-info does, but among 3 random backends as they were at the client's previous pick: exact answers to the probes a Prequal pick sends, as old as theirs.`

// Write prints the report: a table per scenario, plain text or, with
// markdown, GitHub tables followed by the Legend. A plain-text table is
// followed by its own legend, which explains its columns for its
// scenario; under both forms, a row whose numbers need explaining gets a
// numbered note. The output depends only on the report, so the same runs
// always print the same bytes.
func (r *Report) Write(w io.Writer, markdown bool) error {
	ew := &errWriter{w: w}
	for s := range r.Scenarios {
		sc := &r.Scenarios[s]
		cols := r.columns(s)
		notes, marks := r.notes(s)
		row := func(p int) []string {
			cells := make([]string, len(cols))
			for i, c := range cols {
				cells[i] = c.cell(&r.Summaries[s][p])
			}
			if m, ok := marks[p]; ok {
				cells[0] += fmt.Sprintf(" [%d]", m)
			}
			return cells
		}
		if markdown {
			fmt.Fprintf(ew, "### %s\n\n%s. %s\n\n", sc.Name, sc.Title, r.describe(sc))
			heads := make([]string, len(cols))
			align := make([]string, len(cols))
			for i, c := range cols {
				heads[i], align[i] = c.head, "---:"
			}
			align[0] = "---"
			fmt.Fprintf(ew, "| %s |\n|%s|\n", strings.Join(heads, " | "), strings.Join(align, "|"))
			for p := range r.Summaries[s] {
				fmt.Fprintf(ew, "| %s |\n", strings.Join(row(p), " | "))
			}
			fmt.Fprintln(ew)
			for i, n := range notes {
				fmt.Fprintf(ew, "[%d] %s\n\n", i+1, n)
			}
			continue
		}
		if s > 0 {
			fmt.Fprintln(ew)
		}
		fmt.Fprintf(ew, "%s: %s\n%s\n", sc.Name, sc.Title, r.describe(sc))
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		for _, c := range cols {
			fmt.Fprintf(tw, "%s\t", c.head)
		}
		fmt.Fprintln(tw)
		for p := range r.Summaries[s] {
			for _, c := range row(p) {
				fmt.Fprintf(tw, "%s\t", c)
			}
			fmt.Fprintln(tw)
		}
		tw.Flush()
		for _, l := range r.tableLegend(s) {
			wrap(ew, l, "  ", "    ", textWidth)
		}
		for i, n := range notes {
			wrap(ew, fmt.Sprintf("[%d] %s", i+1, n), "  ", "    ", textWidth)
		}
	}
	if markdown {
		legend := Legend + "\n" + legendMore
		for s := range r.Scenarios {
			if r.probes(s) {
				legend += "\n" + probeLegend
				break
			}
		}
		for s := range r.Scenarios {
			if r.hedged(s) {
				legend += "\n" + hedgeLegend
				break
			}
		}
		var guards bool
		for _, m := range []Measure{Amplification, FailedShare, WindowP99} {
			if slices.ContainsFunc(r.Scenarios, func(s Scenario) bool { return s.Measure == m }) {
				legend += "\n" + guardLegend(&Scenario{Measure: m})
				guards = true
			}
		}
		if guards {
			legend += "\n" + guardSuffixes
		}
		for _, line := range strings.Split(legend, "\n") {
			fmt.Fprintf(ew, "- %s\n", line)
		}
	}
	return ew.err
}

// textWidth is the width the plain-text legends and notes wrap at.
const textWidth = 100

// wrap writes text to w in lines of at most width bytes where its words
// allow, the first line after first and the others after rest.
func wrap(w io.Writer, text, first, rest string, width int) {
	line := first
	fresh := true
	for _, word := range strings.Fields(text) {
		if !fresh && len(line)+1+len(word) > width {
			fmt.Fprintln(w, line)
			line, fresh = rest, true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	fmt.Fprintln(w, line)
}

// tableLegend returns the plain-text legend of scenario s's table: what
// each of its columns measures, with the scenario's own numbers.
func (r *Report) tableLegend(si int) []string {
	s := &r.Scenarios[si]
	lat := "mean, p50, p99, p99.9 ms: request latency, from arrival to the end of the last attempt, failed requests included"
	if s.Steady > 0 {
		lat += fmt.Sprintf("; steady ms: the mean over requests arriving after %s", span(s.Steady))
	}
	if n := len(r.Seeds); n > 1 {
		lat += fmt.Sprintf("; ± is the 95%% confidence interval over the %d seeds, of which every number is the mean", n)
	}
	out := []string{lat + ".",
		"errors %: requests that failed for good, out of tries or with no eligible peer."}
	if from, to, ok := s.Degraded(); ok {
		f := s.FairShare(s.Watch)
		half := fmt.Sprintf("%.3g%% (half its fair share of %.3g%%)", 50*f, 100*f)
		if from > 0 {
			out = append(out, fmt.Sprintf("divert s: seconds from %s, when backend %d is degraded, until its share of attempts over 500 ms stays at or below %s; never: not before it recovers.", span(from), s.Watch, half))
		}
		out = append(out,
			fmt.Sprintf("readmit s: seconds from %s, when backend %d recovers, until its share over 500 ms stays at or above %s; never: not by the end of the run.", span(to), s.Watch, half),
			fmt.Sprintf("peak share: backend %d's largest share of attempts in a 500 ms window while degraded, over its fair share (1 = fair); sinkhole k/n: above fair beyond binomial noise in k of n runs.", s.Watch))
	}
	if cols := r.ratioColumns(si); len(cols) > 0 {
		heads := make([]string, len(cols))
		for i, c := range cols {
			heads[i] = c.head
		}
		out = append(out, strings.Join(heads, ", ")+": the mean p99 over that oracle's (1 = as good as the oracle).")
	}
	if r.probes(si) {
		out = append(out, probeLegend)
	}
	if l := guardLegend(s); l != "" {
		out = append(out, l, guardSuffixes)
	}
	if r.hedged(si) {
		out = append(out, hedgeLegend)
	}
	out = append(out,
		fmt.Sprintf("herd: the 99th percentile over time of the busiest backend's attempts in flight over the mean across backends (1 = even, %d = all on one).", len(s.Backends)),
		"churn: the mean fraction of traffic that changes backend from one 500 ms window to the next (0 = a fixed split).")
	var oracles, rif bool
	for _, m := range r.Summaries[0] {
		oracles = oracles || m.Oracle
		rif = rif || strings.Contains(m.Policy, ReportedSuffix)
	}
	if rif {
		out = append(out, "+rif: the picker weighing the requests in flight its backends report with each reply (WithReportedLoad).")
	}
	if oracles {
		out = append(out, "Oracle SED sends each attempt where it will finish soonest, from the true queues and service times; Oracle full-info where the expected delay is least from every backend's true requests in flight and current speed, no service time known in advance; Oracle split draws from the square-root split of the true current capacities; Oracle probed as Oracle full-info, but from 3 random backends as they were at the client's previous pick (exact answers to the probes a Prequal pick sends, as old as theirs). No real client can run them.")
	}
	return out
}

// notes returns the notes of scenario s's table and, for each summary that
// has one, its number. A policy gets a note when the picker refused
// requests: they fail at 0 ms and would otherwise read as fast requests.
func (r *Report) notes(s int) ([]string, map[int]int) {
	sc := &r.Scenarios[s]
	var notes []string
	marks := map[int]int{}
	peer := balancer.NewPeer("probe", sc.PeerOptions...)
	faults := false
	for _, b := range sc.Backends {
		faults = faults || len(b.Faults) > 0
	}
	for p := range r.Summaries[s] {
		m := &r.Summaries[s][p]
		if !(m.Refused.Mean > 0) {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "%s: %s%% of requests were refused at once: every peer was inside its fail window after failed attempts (max_fails=%d within fail_timeout=%s), so the picker had none to offer, nginx's 502. They count as errors at 0 ms",
			m.Policy, num(100*m.Refused.Mean, 2), peer.MaxFails(), span(peer.FailTimeout()))
		if m.P50.Mean == 0 {
			b.WriteString(", which is why p50 is 0")
		}
		timeout := orDefault(sc.Timeout, DefaultTimeout)
		fmt.Fprintf(&b, ". %s%% of its attempts failed", num(100*m.FailedAttempts.Mean, 2))
		if !faults {
			fmt.Fprintf(&b, ", all by timeout (%s), as no backend of this scenario fails: queues grew beyond the timeout", span(timeout))
		}
		b.WriteString(".")
		if m.P99.Mean > float64(timeout)/float64(time.Millisecond) {
			fmt.Fprintf(&b, " A request that times out on several peers in turn waits the %s timeout on each: hence a p99 above it.", span(timeout))
		}
		notes = append(notes, b.String())
		marks[p] = len(notes)
	}
	return notes, marks
}

// errWriter keeps the first write error and drops everything after it.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return len(p), nil
	}
	_, e.err = e.w.Write(p)
	return len(p), nil
}
