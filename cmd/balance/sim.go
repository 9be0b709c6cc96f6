package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/defaults"
	"github.com/lbgo/balancer/sim"
)

var simUsage = fmt.Sprintf(`usage: balance sim [-scenario NAME,...|all] [-pickers NAME,...|all] [-seeds N] [-format table|markdown]
                 [-check [-candidate NAME] [-baseline NAME] [-tau D]] [-series] [-svg DIR] [-list]
                 [-hedge [-hedge-budget F] [-hedge-delay D] [-hedge-abort]] [overrides]

Simulates every picker and the oracles in the built-in scenarios on a
virtual clock and prints one comparison table per scenario. Backends send
a load report with each reply, as servers running package loadreport's
middleware do (-no-reports turns them off). The same flags always print
the same bytes. With no flags it runs every scenario with 3 seeds in a few
seconds.

-check prints the latency-aware picker's targets as PASS/FAIL lines with
their numbers and exits 1 if one fails; for a candidate that balances by
probes (Prequal) also its own: p99 within 1.5× Oracle SED's in fleet16 and
2× in fleet64, no worse than P2CPeakEWMA's anywhere, a fast-failing
backend's share no more than under FastestFirst, at most 3 probes a
request. -series prints, for the first seed,
every backend's share of attempts per 500 ms window. -svg DIR also writes,
for each scenario's first seed, SVG charts: every backend's share of
attempts over time per picker (NAME-share.svg), latency by percentile
(NAME-latency.svg) and FastestFirst's derived weights (NAME-weights.svg).

The guard scenarios (retrystorm, outage1s, scaleup) run SmoothWRR,
LeastConn, P2CPeakEWMA and RoundRobin of the chosen pickers, each beside
its variants under a guard (+budget: each client's retry budget; +panic:
a panic threshold; +slowstart: slow start), and add their measure over a
window: the load amplification, the failed share after the outage, the
p99 during the warm-up. The cold start (coldstart) runs SmoothWRR,
LeastConn, FastestFirst and ReportedWRR, the last also with A58's
periods (+a58: a 10 s blackout), on servers of unequal speeds from a
client's first request. -check leaves them out, as does a -duration that
ends before their window.

-hedge runs, after each chosen picker that has one (P2CPeakEWMA,
FastestFirst, LeastConn+rif, Prequal), its +hedge variant: when an attempt
has not answered after the client's p95 latency (or -hedge-delay), a second
goes to another peer, the first answer wins and the other is cancelled; it
leaves the backend's queue if it has not started, else runs to its end
(-hedge-abort: stops). Hedges are at most -hedge-budget of the requests
(5%%); the tables add the hedges sent, won and the server time wasted.

Every flag is checked: a value out of range exits 2 naming it. A run is
refused before it starts (exit 2, with the estimate) when it is expected to
need more than %d requests (its arrival rate times -duration) or
%d GiB of memory, or the whole comparison more than %d requests over
every scenario, picker and seed.

`, sim.MaxRequests, sim.MaxBytes>>30, sim.MaxCompareRequests)

// simDefaults are the candidate and baseline of -check, each the first of
// its list that exists: FastestFirst against P2CPeakEWMA, with stand-ins
// while those are missing.
var (
	simCandidates = []string{"FastestFirst", "LeastConn", "SmoothWRR"}
	simBaselines  = []string{"P2CPeakEWMA", "SmoothWRR"}
)

func runSim(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenario", "all", "comma-separated scenarios, or all (see -list)")
	pickers := fs.String("pickers", "all", "comma-separated pickers and oracles, or all (see -list)")
	seeds := fs.Int("seeds", 3, "seeds per scenario and picker")
	seed := fs.Uint64("seed", 1, "first seed")
	format := fs.String("format", "table", "output format: table or markdown")
	check := fs.Bool("check", false, "print the target checks instead of the tables")
	candidate := fs.String("candidate", "", "picker measured by -check (default "+strings.Join(simCandidates, ", else ")+")")
	baseline := fs.String("baseline", "", "picker -check compares with (default "+strings.Join(simBaselines, ", else ")+")")
	tau := fs.Duration("tau", 0, fmt.Sprintf("the candidate's decay constant, for the readmission check (default its own: %s for FastestFirst, %s otherwise)",
		seconds(defaults.FastestDecay), seconds(defaults.Decay)))
	series := fs.Bool("series", false, "print each backend's share of attempts per 500 ms window, first seed")
	list := fs.Bool("list", false, "list the scenarios and the policies")
	svgDir := fs.String("svg", "", "also write SVG charts of each scenario's first seed into `DIR`, created if missing")
	parallel := fs.Int("j", 0, "runs at once (default GOMAXPROCS); the output does not depend on it")
	duration := fs.Duration("duration", 0, "override: simulated time per run "+durationDefault)
	load := fs.Float64("load", 0, "override: offered load as a fraction of capacity, below 1 "+loadDefault)
	clients := fs.Int("clients", 0, "override: number of independent clients K "+clientsDefault)
	var tries, maxFails optInt
	var failTimeout optDuration
	tries.max = math.MaxInt32
	fs.Var(&tries, "tries", "override: `N` attempts per request, 0 as nginx (one per peer), 1 no retry "+triesDefault)
	timeout := fs.Duration("timeout", 0, "override: attempt timeout "+timeoutDefault)
	fs.Var(&maxFails, "max-fails", "override: every peer's max_fails, `N` failures within fail_timeout take it out; 0 disables failure accounting "+maxFailsDefault)
	fs.Var(&failTimeout, "fail-timeout", "override: every peer's fail_timeout, a `duration` "+failTimeoutDefault)
	jitterEvery := fs.Duration("jitter-every", 0, "override: mean interval between service-time redraws, in scenarios with jitter (a uniform interval's spread scales with it) "+jitterDefault)
	noReports := fs.Bool("no-reports", false, "override: the backends send no load reports with their replies")
	hedge := fs.Bool("hedge", false, "also run each chosen picker's +hedge variant after it (P2CPeakEWMA, FastestFirst, LeastConn+rif, Prequal)")
	hedgeBudget := fs.Float64("hedge-budget", sim.DefaultHedge.Budget, "the +hedge variants' most hedges per request, in [0, 0.5]")
	hedgeDelay := fs.Duration("hedge-delay", 0, "the +hedge variants' fixed hedge delay (default: the client's latency percentile 1 − budget)")
	hedgeAbort := fs.Bool("hedge-abort", false, "the backends stop a cancelled loser already in service (default: it runs to its end)")
	rifWindow := fs.Duration("rif-window", sim.ReportedLoadWindow, "the window over which the +rif pickers fade a reported count (WithReportedLoad)")
	fs.Usage = func() {} // a usage error prints a hint, -h the usage
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			fmt.Fprint(stderr, simUsage)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprint(stderr, hint("sim"))
		return 2
	}
	set := given(fs, args)
	bad := func(name, format string, args ...any) int {
		what := "-" + name
		if b, ok := fs.Lookup(name).Value.(interface{ IsBoolFlag() bool }); !ok || !b.IsBoolFlag() {
			what += " " + shown(set[name])
		}
		fmt.Fprintf(stderr, "balance sim: %s: %s\n%s", what, fmt.Sprintf(format, args...), hint("sim"))
		return 2
	}
	has := func(name string) bool { _, ok := set[name]; return ok }
	positive := func(name string, d time.Duration) bool { return !has(name) || d > 0 }
	switch {
	case fs.NArg() > 0:
		fmt.Fprintf(stderr, "balance sim: unexpected argument %q\n%s", fs.Arg(0), hint("sim"))
		return 2
	case *format != "table" && *format != "markdown":
		return bad("format", "unknown format %q (table or markdown)", *format)
	case *seeds < 1:
		return bad("seeds", "need at least 1")
	case has("j") && *parallel < 1:
		return bad("j", "need at least 1 run at once (default GOMAXPROCS)")
	case !positive("duration", *duration):
		return bad("duration", "the simulated time must be positive")
	case has("load") && !(*load > 0 && *load < 1):
		return bad("load", "the offered load must be a fraction of capacity in (0, 1): at 1 or more the queues grow without bound")
	case has("clients") && *clients < 1:
		return bad("clients", "need at least 1 client")
	case !positive("timeout", *timeout):
		return bad("timeout", "the attempt timeout must be positive")
	case !positive("jitter-every", *jitterEvery):
		return bad("jitter-every", "the mean interval must be positive")
	case has("hedge-budget") && !(*hedgeBudget >= 0 && *hedgeBudget <= sim.MaxHedgeBudget):
		return bad("hedge-budget", "the share of requests hedged must be in [0, %v]", sim.MaxHedgeBudget)
	case !positive("hedge-delay", *hedgeDelay):
		return bad("hedge-delay", "the delay must be positive")
	case !positive("rif-window", *rifWindow):
		return bad("rif-window", "the window must be positive")
	case !positive("tau", *tau):
		return bad("tau", "the decay constant must be positive")
	case has("svg") && *svgDir == "":
		return bad("svg", "need a directory")
	}
	for _, name := range []string{"candidate", "baseline", "tau"} {
		if has(name) && !*check {
			return bad(name, "applies only with -check")
		}
	}
	switch {
	case *series && *check:
		return bad("series", "-series and -check print different things: choose one")
	case has("format") && (*check || *series):
		return bad("format", "applies to the tables, not to -check or -series")
	case has("seeds") && *series:
		return bad("seeds", "-series prints the first seed only")
	}
	if *list {
		simList(stdout)
		return 0
	}
	if slices.Contains(strings.Split(*scenarios, ","), sim.SubsetScenario) {
		return runSubsetSim(set, *scenarios, *seeds, *seed, *parallel, *format == "markdown", stdout, stderr, bad)
	}

	scs, err := simScenarios(*scenarios)
	if err != nil {
		return bad("scenario", "%v", err)
	}
	// An override that no chosen scenario reads would be ignored.
	if has("load") && !slices.ContainsFunc(scs, func(s sim.Scenario) bool { return s.Rate == 0 }) {
		return bad("load", "no chosen scenario has a load to override: each sets a fixed rate")
	}
	if has("jitter-every") && !slices.ContainsFunc(scs, func(s sim.Scenario) bool { return s.Jitter.Every > 0 }) {
		return bad("jitter-every", "no chosen scenario has jitter")
	}
	for i := range scs {
		s := &scs[i]
		if has("duration") {
			s.Duration = *duration
		}
		if has("load") && s.Rate == 0 {
			s.Load = *load
		}
		if has("clients") {
			s.Clients = *clients
		}
		if tries.set {
			s.Tries = tries.v
		}
		if has("timeout") {
			s.Timeout = *timeout
		}
		if maxFails.set {
			s.PeerOptions = append(slices.Clip(s.PeerOptions), balancer.MaxFails(maxFails.v))
		}
		if failTimeout.set {
			s.PeerOptions = append(slices.Clip(s.PeerOptions), balancer.FailTimeout(failTimeout.v))
		}
		if has("jitter-every") && s.Jitter.Every > 0 {
			s.Jitter.Spread = time.Duration(float64(s.Jitter.Spread) * float64(*jitterEvery) / float64(s.Jitter.Every))
			s.Jitter.Every = *jitterEvery
		}
		if *noReports {
			s.NoReports = true
		}
	}

	var pols []sim.Policy
	if *check {
		c, b, err := simPair(*candidate, *baseline)
		if err != nil {
			return bad(err.flag, "%v", err.err)
		}
		pols = []sim.Policy{c, b}
		if c.Probed != nil {
			// A probing candidate's own targets compare it with these too.
			for _, name := range []string{sim.ProbeBaseline, sim.SinkBaseline, sim.OracleSED} {
				if p, ok := sim.PolicyByName(name); ok && !slices.ContainsFunc(pols, func(q sim.Policy) bool { return q.Name == name }) {
					pols = append(pols, p)
				}
			}
		}
	} else if pols, err = simPolicies(*pickers); err != nil {
		return bad("pickers", "%v", err)
	}
	if has("rif-window") {
		var rif bool
		for i, p := range pols {
			name, hedged := p.HedgeBase()
			if !hedged {
				name = p.Name
			}
			base, ok := strings.CutSuffix(name, sim.ReportedSuffix)
			if !ok || p.IsOracle() {
				continue
			}
			if pols[i], ok, err = sim.Reported(base, *rifWindow); !ok || err != nil {
				return bad("rif-window", "%s: %v", p.Name, err)
			}
			if hedged {
				// The hedge is set below, from the hedge flags.
				pols[i], _ = sim.Hedged(pols[i], sim.DefaultHedge)
			}
			rif = true
		}
		if !rif {
			return bad("rif-window", "no chosen picker reads reported counts (the %s ones)", sim.ReportedSuffix)
		}
	}
	if pols, err = simHedge(pols, *hedge, sim.Hedge{Budget: *hedgeBudget, Delay: *hedgeDelay, Abort: *hedgeAbort}); err != nil {
		return bad("hedge", "%v", err)
	}
	if hedged := slices.ContainsFunc(pols, func(p sim.Policy) bool { _, ok := p.HedgeBase(); return ok }); !hedged {
		for _, name := range []string{"hedge-budget", "hedge-delay", "hedge-abort"} {
			if has(name) {
				return bad(name, "no chosen picker hedges (-hedge, or a %s picker)", sim.HedgeSuffix)
			}
		}
	}
	if *series {
		*seeds = 1
	}
	if *scenarios == "all" {
		// The guard scenarios run their own pickers: left out of -check,
		// whose targets are not theirs, and where none is chosen.
		scs = slices.DeleteFunc(scs, func(s sim.Scenario) bool {
			return s.Pickers != nil && (*check || len(s.Policies(pols)) == 0)
		})
		// A -duration that ends a guard scenario before its window does
		// leaves it out, with a word.
		scs = slices.DeleteFunc(scs, func(s sim.Scenario) bool {
			end := max(s.Window.To, s.Before.To)
			if s.Measure == sim.NoMeasure || end <= s.Duration {
				return false
			}
			fmt.Fprintf(stderr, "balance sim: left out %s: its window ends at %v, after -duration %v\n", s.Name, end, s.Duration)
			return true
		})
	}

	rep, err := sim.Compare(scs, pols, sim.Options{Seeds: *seeds, Seed: *seed, Parallel: *parallel})
	if errors.Is(err, sim.ErrTooLarge) || errors.Is(err, sim.ErrInvalid) {
		// Refused before any run: name the flags that shaped it.
		var flags []string
		for _, name := range []string{"duration", "load", "clients", "tries", "timeout", "jitter-every", "seeds", "j", "scenario", "pickers"} {
			if has(name) {
				flags = append(flags, "-"+name+" "+shown(set[name]))
			}
		}
		if len(flags) > 0 {
			fmt.Fprintf(stderr, "balance sim: %s: %v\n%s", strings.Join(flags, ", "), err, hint("sim"))
		} else {
			fmt.Fprintf(stderr, "balance sim: %v\n", err)
		}
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "balance sim: %v\n", err)
		return 1
	}
	if *svgDir != "" {
		n, err := writeCharts(*svgDir, rep)
		if err != nil {
			fmt.Fprintf(stderr, "balance sim: %v\n", err)
			return 1
		}
		fmt.Fprintf(stderr, "balance sim: wrote %d charts to %s\n", n, *svgDir)
	}
	switch {
	case *check:
		if *tau == 0 {
			*tau = decayOf(pols[0].Name)
		}
		checks, err := rep.Checks(pols[0].Name, pols[1].Name, *tau)
		if err == nil && pols[0].Probed != nil {
			var more []sim.Check
			more, err = rep.ProbeChecks(pols[0].Name)
			for _, c := range more {
				if !slices.Contains(checks, c) { // the same p99 check as Checks' where it is "no worse"
					checks = append(checks, c)
				}
			}
		}
		if err == nil {
			fmt.Fprintf(stdout, "candidate %s, baseline %s, %d seeds\n", pols[0].Name, pols[1].Name, *seeds)
			err = sim.WriteChecks(stdout, checks)
		}
		if err != nil {
			fmt.Fprintf(stderr, "balance sim: %v\n", err)
			return 1
		}
		for _, c := range checks {
			if !c.Pass {
				return 1
			}
		}
	case *series:
		err = simSeries(stdout, rep)
	default:
		err = rep.Write(stdout, *format == "markdown")
	}
	if err != nil {
		fmt.Fprintf(stderr, "balance sim: %v\n", err)
		return 1
	}
	return 0
}

// simScenarios returns the scenarios a -scenario value names.
func simScenarios(arg string) ([]sim.Scenario, error) {
	if arg == "all" {
		return sim.Scenarios(), nil
	}
	var out []sim.Scenario
	for _, name := range strings.Split(arg, ",") {
		s, ok := sim.Lookup(strings.TrimSpace(name))
		if !ok {
			return nil, fmt.Errorf("unknown scenario %q (see -list)", name)
		}
		out = append(out, s)
	}
	return out, nil
}

// simPolicies returns the policies a -pickers value names.
func simPolicies(arg string) ([]sim.Policy, error) {
	if arg == "all" {
		return sim.Policies(), nil
	}
	var out []sim.Policy
	for _, name := range strings.Split(arg, ",") {
		p, ok := sim.PolicyByName(strings.TrimSpace(name))
		if !ok {
			return nil, unknownPicker(name)
		}
		out = append(out, p)
	}
	return out, nil
}

// simHedge returns pols with every hedged variant set to h, and with
// -hedge (add) each picker that has a +hedge variant followed by it.
func simHedge(pols []sim.Policy, add bool, h sim.Hedge) ([]sim.Policy, error) {
	var out []sim.Policy
	for _, p := range pols {
		if _, ok := p.HedgeBase(); ok {
			v, err := sim.Hedged(p, h)
			if err != nil {
				return nil, err
			}
			p = v
		}
		out = append(out, p)
		if !add || !slices.ContainsFunc(sim.HedgePolicies(), func(v sim.Policy) bool { return v.Name == p.Name+sim.HedgeSuffix }) ||
			slices.ContainsFunc(pols, func(v sim.Policy) bool { return v.Name == p.Name+sim.HedgeSuffix }) {
			continue
		}
		v, err := sim.Hedged(p, h)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if add && len(out) == len(pols) {
		return nil, fmt.Errorf("none of the chosen pickers has a %s variant (P2CPeakEWMA, FastestFirst, LeastConn+rif, Prequal)", sim.HedgeSuffix)
	}
	return out, nil
}

// unknownPicker explains why name is not a policy: a keyed picker of the
// library needs keys the simulator does not send; anything else is unknown.
func unknownPicker(name string) error {
	if a, err := balancer.AlgorithmNamed(strings.TrimSpace(name)); err == nil && a.Keyed {
		return fmt.Errorf("%s routes by key, and the simulated requests carry none: it is not simulated", a.Name)
	}
	return fmt.Errorf("unknown picker %q (see -list)", name)
}

// flagError is an error in the value of one flag.
type flagError struct {
	flag string
	err  error
}

// simPair returns the candidate and baseline of -check: the named ones, or
// the first of each default list that exists.
func simPair(candidate, baseline string) (c, b sim.Policy, err *flagError) {
	find := func(flag, name string, defaults []string) (sim.Policy, *flagError) {
		if name != "" {
			if p, ok := sim.PolicyByName(name); ok {
				return p, nil
			}
			return sim.Policy{}, &flagError{flag, unknownPicker(name)}
		}
		for _, n := range defaults {
			if p, ok := sim.PolicyByName(n); ok {
				return p, nil
			}
		}
		return sim.Policy{}, &flagError{flag, fmt.Errorf("none of %v exists", defaults)}
	}
	if c, err = find("candidate", candidate, simCandidates); err != nil {
		return
	}
	b, err = find("baseline", baseline, simBaselines)
	return
}

func simList(w io.Writer) {
	fmt.Fprintln(w, "scenarios:")
	for _, s := range sim.Scenarios() {
		fmt.Fprintf(w, "  %-16s %s\n", s.Name, s.Title)
	}
	fmt.Fprintf(w, "  %-16s %s\n", sim.SubsetScenario, "subsetting compared (runs alone): 300 clients, 300 backends, subsets of 30, scale events of ±10%")
	for _, s := range sim.Liars() {
		fmt.Fprintf(w, "  %-16s %s (by name only)\n", s.Name, s.Title)
	}
	fmt.Fprintln(w, "pickers:")
	for _, p := range sim.Pickers() {
		fmt.Fprintf(w, "  %s\n", p.Name)
	}
	fmt.Fprintln(w, "hedged (-hedge, or by name):")
	for _, p := range sim.HedgePolicies() {
		fmt.Fprintf(w, "  %s\n", p.Name)
	}
	fmt.Fprintln(w, "oracles:")
	for _, p := range sim.Oracles() {
		fmt.Fprintf(w, "  %s\n", p.Name)
	}
}

// simSeries prints, for the first seed of every scenario and policy, each
// backend's share of the attempts sent in each aligned 500 ms window.
func simSeries(w io.Writer, rep *sim.Report) error {
	var b strings.Builder
	span := sim.SpanBuckets
	for s, sc := range rep.Scenarios {
		for _, sum := range rep.Summaries[s] {
			r := sum.Runs[0]
			fmt.Fprintf(&b, "# %s, %s, seed %d: share of attempts per backend, by window start\nt\t", sc.Name, sum.Policy, r.Seed)
			for i := range r.Backends {
				fmt.Fprintf(&b, "b%d\t", i)
			}
			b.WriteString("attempts\n")
			for k := 0; k+span <= r.Buckets(); k += span {
				fmt.Fprintf(&b, "%.1f\t", (time.Duration(k) * sim.Bucket).Seconds())
				var total int
				for i := range r.Backends {
					var share float64
					share, total = r.Share(i, k, k+span)
					fmt.Fprintf(&b, "%.3f\t", share)
				}
				fmt.Fprintf(&b, "%d\n", total)
			}
			b.WriteString("\n")
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeCharts writes the report's charts into dir, creating it if needed,
// and returns how many it wrote.
func writeCharts(dir string, rep *sim.Report) (int, error) {
	charts, err := rep.Charts()
	if err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, err
	}
	for _, c := range charts {
		if err := os.WriteFile(filepath.Join(dir, c.Name), c.SVG, 0o644); err != nil {
			return 0, err
		}
	}
	return len(charts), nil
}

// decayOf returns the decay constant a picker runs with by default: the
// time scale on which it forgets a peer's past latency, and so the unit of
// the readmission check.
func decayOf(picker string) time.Duration {
	if picker == "FastestFirst" {
		return defaults.FastestDecay
	}
	return defaults.Decay
}
