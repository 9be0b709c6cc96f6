package balancerflag

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbgo/balancer"
)

// optionFlag is a flag that sets one of the library's picker options. Its
// value is the option's arguments, comma-separated, in the order the
// option takes them (-reported-load 10s,16 is WithReportedLoad(10*time.Second,
// 16)); a flag of a picker's own setting sets that field of its settings
// type (-band 2 is FastestFirstSettings{Band: 2}), where 0, as for the
// field, is the default unless 0 means something (-exponent 0: latency
// ignored). A flag not given leaves the option out, so the picker keeps the
// library's default; a flag given to a picker that does not take its option
// is an error naming both.
type optionFlag struct {
	name   string // the flag, without "-"
	option string // the option it sets, as balancer.Algorithm.Options names it
	args   string // what the value holds, for -h
	usage  string
	build  func(a *args) balancer.Option
}

var optionFlags = []optionFlag{
	{"reported-load", "WithReportedLoad", "WINDOW,CLIENTS",
		"weigh the requests in flight the servers report (loadreport's Middleware), faded over WINDOW, CLIENTS the number of clients like this one: \"Which picker?\" recommends 10s and the client count with LeastConn",
		func(a *args) balancer.Option { return balancer.WithReportedLoad(a.duration(), a.int()) }},
	{"probe-rate", "WithProbeRate", "PER_REQUEST,PER_SECOND",
		"probes sent a request and at most a second",
		func(a *args) balancer.Option {
			return balancer.PrequalSettings{ProbesPerPick: none(a.float()), ProbesPerSecond: a.float()}.Option()
		}},
	{"probe-pool", "WithProbePool", "SIZE,MAX_AGE",
		"probe answers kept at most, and how old one may be",
		func(a *args) balancer.Option {
			return balancer.PrequalSettings{PoolSize: a.int(), MaxAge: a.duration()}.Option()
		}},
	{"hot-quantile", "WithHotQuantile", "Q",
		"quantile of the probed in-flight counts above which a backend is hot",
		func(a *args) balancer.Option { return balancer.PrequalSettings{HotQuantile: a.float()}.Option() }},
	{"blackout", "WithBlackoutPeriod", "DURATION",
		"how long a backend's first reports wait before its weight counts (gRFC A58's blackout_period; 0 trusts the first)",
		func(a *args) balancer.Option {
			return balancer.ReportedWRRSettings{BlackoutPeriod: none(a.duration())}.Option()
		}},
	{"weight-update-period", "WithWeightUpdatePeriod", "DURATION",
		"how often at most the weights are recomputed from the reports (A58's weight_update_period)",
		func(a *args) balancer.Option {
			return balancer.ReportedWRRSettings{WeightUpdatePeriod: a.duration()}.Option()
		}},
	{"weight-expiration", "WithWeightExpirationPeriod", "DURATION",
		"how old a backend's last report may be before its weight is dropped (A58's weight_expiration_period)",
		func(a *args) balancer.Option {
			return balancer.ReportedWRRSettings{WeightExpirationPeriod: a.duration()}.Option()
		}},
	{"error-utilization-penalty", "WithErrorUtilizationPenalty", "X",
		"utilization added per unit of error rate (A58's error_utilization_penalty)",
		func(a *args) balancer.Option {
			return balancer.ReportedWRRSettings{ErrorUtilizationPenalty: none(a.float())}.Option()
		}},
	{"bounded-load", "WithBoundedLoad", "C",
		"no backend holds more than C times its share of the requests in flight; a hot key spills to the next backend",
		func(a *args) balancer.Option { return balancer.ConsistentHashSettings{BoundedLoad: a.float()}.Option() }},
	{"decay", "WithDecay", "DURATION",
		"how fast the latency estimates forget",
		func(a *args) balancer.Option { return balancer.WithDecay(a.duration()) }},
	{"failure-penalty", "WithFailurePenalty", "DURATION",
		"the least latency a failed attempt counts as",
		func(a *args) balancer.Option { return balancer.WithFailurePenalty(a.duration()) }},
	{"band", "WithBand", "H",
		"FastestFirst recomputes its weights when an estimate leaves [e/H, e·H]",
		func(a *args) balancer.Option { return balancer.FastestFirstSettings{Band: a.float()}.Option() }},
	{"exponent", "WithExponent", "ALPHA",
		"FastestFirst's weight ∝ (fastest/estimate)^ALPHA",
		func(a *args) balancer.Option {
			return balancer.FastestFirstSettings{Exponent: none(a.float())}.Option()
		}},
	{"floor", "WithFloor", "W",
		"the least weight FastestFirst gives a backend, out of 100",
		func(a *args) balancer.Option { return balancer.FastestFirstSettings{Floor: a.int()}.Option() }},
	{"tolerance", "WithTolerance", "X",
		"how many times slower than the fastest a backend may look before FastestFirst lowers its weight",
		func(a *args) balancer.Option { return balancer.FastestFirstSettings{Tolerance: a.float()}.Option() }},
	{"warmup", "WithWarmup", "DURATION",
		"RandomWeighted ramps a new backend's weight up over DURATION, as Dubbo does",
		func(a *args) balancer.Option { return balancer.RandomWeightedSettings{Warmup: a.duration()}.Option() }},
	{"slow-start", "WithSlowStart", "WINDOW,AGGRESSION,MIN_PERCENT",
		"a backend added or readmitted ramps its weight up over WINDOW (Envoy's slow start)",
		func(a *args) balancer.Option { return balancer.WithSlowStart(a.duration(), a.float(), a.float()) }},
	{"panic-threshold", "WithPanicThreshold", "PERCENT",
		"below PERCENT of the backends eligible, pick among all of them (Envoy's panic threshold)",
		func(a *args) balancer.Option { return balancer.WithPanicThreshold(a.float()) }},
	{"max-ejection-percent", "WithMaxEjectionPercent", "PERCENT",
		"at most PERCENT of the backends out for their failures at once",
		func(a *args) balancer.Option { return balancer.WithMaxEjectionPercent(a.float()) }},
	{"ejection-backoff", "WithEjectionBackoff", "MAX",
		"a backend out again stays out fail-timeout times its ejections in a row, at most MAX",
		func(a *args) balancer.Option { return balancer.WithEjectionBackoff(a.duration()) }},
}

// none is a flag's value v as a settings field takes it where 0 is
// meaningful (-exponent 0, -blackout 0s): 0 is the field's default, and -1
// stands for 0.
func none[T ~int64 | ~float64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// takes reports whether a takes the option: its own, or a guard, which
// every picker takes.
func takes(a balancer.Algorithm, option string) bool {
	switch option {
	case "WithPanicThreshold", "WithMaxEjectionPercent", "WithEjectionBackoff":
		return true
	}
	return slices.Contains(a.Options, option)
}

// takers names the pickers that take the option, for an error.
func takers(option string) string {
	var names []string
	for _, a := range balancer.Algorithms() {
		if takes(a, option) {
			names = append(names, a.Name)
		}
	}
	return strings.Join(names, ", ")
}

// options returns the options of the flags given (set holds their values by
// name) for the picker a, or an error wrapping balancer.ErrInvalidConfig
// that names the first flag that a does not take or whose value is not the
// option's arguments. The values' ranges are the picker's to check: a.New
// refuses one out of range, naming the option.
func options(a balancer.Algorithm, set map[string]string) ([]balancer.Option, error) {
	var opts []balancer.Option
	for _, f := range optionFlags {
		v, ok := set[f.name]
		if !ok {
			continue
		}
		if !takes(a, f.option) {
			return nil, fmt.Errorf("-%s: -algo %s does not take %s (%s do): %w", f.name, a.Name, f.option, takers(f.option), balancer.ErrInvalidConfig)
		}
		ar := &args{rest: strings.Split(v, ",")}
		o := f.build(ar)
		if err := ar.done(); err != nil {
			return nil, fmt.Errorf("-%s %q: %v (want %s): %w", f.name, v, err, f.args, balancer.ErrInvalidConfig)
		}
		opts = append(opts, o)
	}
	return opts, nil
}

// args reads an option flag's comma-separated arguments in order; the first
// that is missing or does not parse is kept for done.
type args struct {
	rest []string
	err  error
}

func (a *args) next() string {
	if a.err != nil {
		return ""
	}
	if len(a.rest) == 0 {
		a.err = fmt.Errorf("too few values")
		return ""
	}
	s := strings.TrimSpace(a.rest[0])
	a.rest = a.rest[1:]
	return s
}

func (a *args) duration() time.Duration {
	s := a.next()
	if a.err != nil {
		return 0
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		a.err = fmt.Errorf("%q is not a duration", s)
	}
	return d
}

func (a *args) int() int {
	s := a.next()
	if a.err != nil {
		return 0
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		a.err = fmt.Errorf("%q is not a whole number", s)
	}
	return n
}

func (a *args) float() float64 {
	s := a.next()
	if a.err != nil {
		return 0
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		a.err = fmt.Errorf("%q is not a number", s)
	}
	return x
}

// done returns the first error, or one for values left over.
func (a *args) done() error {
	if a.err == nil && len(a.rest) > 0 {
		a.err = fmt.Errorf("too many values")
	}
	return a.err
}

// needs says what a picker needs from the servers to do what it is for,
// for -h and the log line at start; "" when it needs nothing.
func needs(a balancer.Algorithm, set map[string]string) string {
	switch {
	case slices.Contains(a.Options, "WithProber"):
		return "probes: each backend answers GET -probe-path (loadreport's Middleware or ProbeHandler); without them it picks as P2CPeakEWMA"
	case slices.Contains(a.Options, "WithBlackoutPeriod"):
		return "load reports: each backend's responses carry endpoint-load-metrics (loadreport's Middleware); without them it picks as SmoothWRR"
	}
	if _, ok := set["reported-load"]; ok && slices.Contains(a.Options, "WithReportedLoad") {
		return "with -reported-load, load reports: each backend's responses carry endpoint-load-metrics (loadreport's Middleware); without them the option changes nothing"
	}
	return ""
}
