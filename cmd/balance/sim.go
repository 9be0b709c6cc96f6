package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/sim"
)

const simUsage = `usage: balance sim [-scenario NAME,...|all] [-pickers NAME,...|all] [-seeds N] [-format table|markdown]
                 [-check [-candidate NAME] [-baseline NAME] [-tau D]] [-series] [-svg DIR] [-list] [overrides]

Simulates every picker and the two oracles in the built-in scenarios on a
virtual clock and prints one comparison table per scenario. The same flags
always print the same bytes. With no flags it runs every scenario with 3
seeds in a few seconds.

-check prints the latency-aware picker's targets as PASS/FAIL lines with
their numbers and exits 1 if one fails. -series prints, for the first seed,
every backend's share of attempts per 500 ms window. -svg DIR also writes,
for each scenario's first seed, SVG charts: every backend's share of
attempts over time per picker (NAME-share.svg), latency by percentile
(NAME-latency.svg) and FastestFirst's derived weights (NAME-weights.svg).

`

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
		seconds(balancer.DefaultFastestDecay), seconds(balancer.DefaultDecay)))
	series := fs.Bool("series", false, "print each backend's share of attempts per 500 ms window, first seed")
	list := fs.Bool("list", false, "list the scenarios and the policies")
	svgDir := fs.String("svg", "", "also write SVG charts of each scenario's first seed into `DIR`, created if missing")
	parallel := fs.Int("j", 0, "runs at once (default GOMAXPROCS); the output does not depend on it")
	duration := fs.Duration("duration", 0, "override: simulated time per run "+durationDefault)
	load := fs.Float64("load", 0, "override: offered load as a fraction of capacity "+loadDefault)
	clients := fs.Int("clients", 0, "override: number of independent clients K "+clientsDefault)
	var tries, maxFails optInt
	var failTimeout optDuration
	fs.Var(&tries, "tries", "override: `N` attempts per request, 0 as nginx (one per peer), 1 no retry "+triesDefault)
	timeout := fs.Duration("timeout", 0, "override: attempt timeout "+timeoutDefault)
	fs.Var(&maxFails, "max-fails", "override: every peer's max_fails, `N` failures within fail_timeout take it out; 0 disables failure accounting "+maxFailsDefault)
	fs.Var(&failTimeout, "fail-timeout", "override: every peer's fail_timeout, a `duration` "+failTimeoutDefault)
	jitterEvery := fs.Duration("jitter-every", 0, "override: mean interval between service-time redraws, in scenarios with jitter "+jitterDefault)
	fs.Usage = func() {
		fmt.Fprint(stderr, simUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "balance sim: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	if *format != "table" && *format != "markdown" {
		fmt.Fprintf(stderr, "balance sim: unknown format %q (table or markdown)\n", *format)
		return 2
	}
	if *list {
		simList(stdout)
		return 0
	}

	scs, err := simScenarios(*scenarios)
	if err != nil {
		fmt.Fprintf(stderr, "balance sim: %v\n", err)
		return 2
	}
	for i := range scs {
		s := &scs[i]
		if *duration > 0 {
			s.Duration = *duration
		}
		if *load > 0 && s.Rate == 0 {
			s.Load = *load
		}
		if *clients > 0 {
			s.Clients = *clients
		}
		if tries.set {
			s.Tries = tries.v
		}
		if *timeout > 0 {
			s.Timeout = *timeout
		}
		if maxFails.set {
			s.PeerOptions = append(slices.Clip(s.PeerOptions), balancer.MaxFails(maxFails.v))
		}
		if failTimeout.set {
			s.PeerOptions = append(slices.Clip(s.PeerOptions), balancer.FailTimeout(failTimeout.v))
		}
		if *jitterEvery > 0 && s.Jitter.Every > 0 {
			s.Jitter.Every = *jitterEvery
		}
	}

	var pols []sim.Policy
	if *check {
		c, b, err := simPair(*candidate, *baseline)
		if err != nil {
			fmt.Fprintf(stderr, "balance sim: %v\n", err)
			return 2
		}
		pols = []sim.Policy{c, b}
	} else if pols, err = simPolicies(*pickers); err != nil {
		fmt.Fprintf(stderr, "balance sim: %v\n", err)
		return 2
	}
	if *series {
		*seeds = 1
	}
	if *seeds < 1 {
		fmt.Fprintf(stderr, "balance sim: -seeds %d: need at least 1\n", *seeds)
		return 2
	}

	rep, err := sim.Compare(scs, pols, sim.Options{Seeds: *seeds, Seed: *seed, Parallel: *parallel})
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

// unknownPicker explains why name is not a policy: a keyed picker of the
// library needs keys the simulator does not send; anything else is unknown.
func unknownPicker(name string) error {
	if a, err := balancer.AlgorithmNamed(strings.TrimSpace(name)); err == nil && a.Keyed {
		return fmt.Errorf("%s routes by key, and the simulated requests carry none: it is not simulated", a.Name)
	}
	return fmt.Errorf("unknown picker %q (see -list)", name)
}

// simPair returns the candidate and baseline of -check: the named ones, or
// the first of each default list that exists.
func simPair(candidate, baseline string) (c, b sim.Policy, err error) {
	find := func(name string, defaults []string) (sim.Policy, error) {
		if name != "" {
			if p, ok := sim.PolicyByName(name); ok {
				return p, nil
			}
			return sim.Policy{}, unknownPicker(name)
		}
		for _, n := range defaults {
			if p, ok := sim.PolicyByName(n); ok {
				return p, nil
			}
		}
		return sim.Policy{}, fmt.Errorf("none of %v exists", defaults)
	}
	if c, err = find(candidate, simCandidates); err != nil {
		return
	}
	b, err = find(baseline, simBaselines)
	return
}

func simList(w io.Writer) {
	fmt.Fprintln(w, "scenarios:")
	for _, s := range sim.Scenarios() {
		fmt.Fprintf(w, "  %-16s %s\n", s.Name, s.Title)
	}
	fmt.Fprintln(w, "pickers:")
	for _, p := range sim.Pickers() {
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
		return balancer.DefaultFastestDecay
	}
	return balancer.DefaultDecay
}
