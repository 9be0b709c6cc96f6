// Package flagtest holds the tests that every command built on package
// balancerflag runs through its own flag parsing: each option flag reaches
// its picker, bad values are refused naming the flag, -h names what each
// picker needs, and a copy of the command builds in a module of its own.
// Its expectations are written here, apart from balancerflag's table, so
// that the table is checked against them rather than against itself.
package flagtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// Option is what one option flag sets, and a value its picker takes and
// one it refuses, with what the library's refusal says: the refusal comes
// from the picker's constructor naming its option, or the field of its
// settings type, and the value, so the flag reached that setting with that
// value.
type Option struct {
	Option            string // the balancer option the flag sets
	Good, Bad, Refuse string
}

// Options is every option flag, by name.
var Options = map[string]Option{
	"reported-load":             {"WithReportedLoad", "10s,16", "10s,0", "WithReportedLoad(10s, 0)"},
	"probe-rate":                {"WithProbeRate", "2,500", "17,500", "PrequalSettings.ProbesPerPick(17)"},
	"probe-pool":                {"WithProbePool", "8,500ms", "2000,1s", "PrequalSettings.PoolSize(2000)"},
	"hot-quantile":              {"WithHotQuantile", "0.5", "1.5", "PrequalSettings.HotQuantile(1.5)"},
	"blackout":                  {"WithBlackoutPeriod", "1s", "-1s", "ReportedWRRSettings.BlackoutPeriod(-1s)"},
	"weight-update-period":      {"WithWeightUpdatePeriod", "100ms", "1us", "ReportedWRRSettings.WeightUpdatePeriod(1µs)"},
	"weight-expiration":         {"WithWeightExpirationPeriod", "1m", "-1s", "ReportedWRRSettings.WeightExpirationPeriod(-1s)"},
	"error-utilization-penalty": {"WithErrorUtilizationPenalty", "0.5", "-2", "ReportedWRRSettings.ErrorUtilizationPenalty(-2)"},
	"bounded-load":              {"WithBoundedLoad", "1.25", "0.5", "ConsistentHashSettings.BoundedLoad(0.5)"},
	"decay":                     {"WithDecay", "5s", "0s", "WithDecay(0s)"},
	"failure-penalty":           {"WithFailurePenalty", "200ms", "0s", "WithFailurePenalty(0s)"},
	"band":                      {"WithBand", "2", "1", "FastestFirstSettings.Band(1)"},
	"exponent":                  {"WithExponent", "2", "9", "FastestFirstSettings.Exponent(9)"},
	"floor":                     {"WithFloor", "5", "101", "FastestFirstSettings.Floor(101)"},
	"tolerance":                 {"WithTolerance", "2", "0.5", "FastestFirstSettings.Tolerance(0.5)"},
	"warmup":                    {"WithWarmup", "10s", "-1s", "RandomWeightedSettings.Warmup(-1s)"},
	"slow-start":                {"WithSlowStart", "30s,1,10", "30s,1,101", "WithSlowStart"},
	"panic-threshold":           {"WithPanicThreshold", "50", "101", "WithPanicThreshold(101)"},
	"max-ejection-percent":      {"WithMaxEjectionPercent", "20", "-1", "WithMaxEjectionPercent(-1)"},
	"ejection-backoff":          {"WithEjectionBackoff", "1m", "-1s", "WithEjectionBackoff(-1s)"},
}

// Takes reports whether a takes the option: it names it, or it is a
// guard's, which every picker takes.
func Takes(a balancer.Algorithm, option string) bool {
	switch option {
	case "WithPanicThreshold", "WithMaxEjectionPercent", "WithEjectionBackoff":
		return true
	}
	return slices.Contains(a.Options, option)
}

// Build is a command's flag parsing and set-up: it returns the command's
// log line at start and a function that releases what it built, or the
// error the command would exit with.
type Build func(args []string) (summary string, release func(), err error)

// OptionFlags: each option flag builds every picker that takes its option
// with a good value, which the summary then names, and is refused by the
// picker with a bad one; base are the command's other arguments.
func OptionFlags(t *testing.T, build Build, base ...string) {
	for name, o := range Options {
		for _, a := range balancer.Algorithms() {
			if !Takes(a, o.Option) {
				continue
			}
			if a.Name == "RandomWeighted" && name == "slow-start" {
				continue // without WithWarmup it takes slow start; tested below
			}
			args := append(slices.Clone(base), "-algo", a.Name)
			if a.Name == "Hash" || a.Name == "ConsistentHash" {
				args = append(args, "-hash-key", "$uri")
			}
			t.Run(name+"/"+a.Name, func(t *testing.T) {
				summary, release, err := build(append(slices.Clone(args), "-"+name, o.Good))
				require.NoError(t, err)
				release()
				assert.Contains(t, summary, "-"+name+" "+o.Good)
				_, _, err = build(append(slices.Clone(args), "-"+name, o.Bad))
				require.Error(t, err)
				assert.Contains(t, err.Error(), o.Refuse)
				assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			})
		}
	}
	_, release, err := build(append(slices.Clone(base), "-algo", "RandomWeighted", "-slow-start", "30s,1,10"))
	require.NoError(t, err)
	release()
}

// BadFlag is a refusal of the picker's flags: the arguments (after the
// command's own) and what the error says.
type BadFlag struct {
	Name string
	Args []string
	Want string
}

// BadFlags are the refusals of the picker's flags: each names the flag, or
// is the picker's refusal naming the option.
var BadFlags = []BadFlag{
	{"unknown algo", []string{"-algo", "fastest-ever"}, `-algo: balancer: "fastest-ever" (want one of RoundRobin, SmoothWRR`},
	{"probe path", []string{"-algo", "prequal", "-probe-path", "probe"}, `-probe-path, -probe-timeout: balancer: invalid configuration: balancerhttp: WithProbePath("probe"): does not start with "/"`},
	{"probe timeout", []string{"-algo", "Prequal", "-probe-timeout", "0s"}, "WithProbeTimeout(0s): out of (0, 1h0m0s]"},
	{"probe flags without probes", []string{"-algo", "LeastConn", "-probe-timeout", "1s"}, "-probe-path, -probe-timeout: -algo LeastConn sends no probes (Prequal does)"},
	{"hash without key", []string{"-algo", "hash"}, "-hash-key is required with -algo Hash"},
	{"key without hash", []string{"-algo", "IPHash", "-hash-key", "$host"}, "-hash-key: -algo IPHash takes no key"},
	{"unknown variable", []string{"-algo", "ConsistentHash", "-hash-key", "$http_x_user$server_name"}, "-hash-key: unknown variable $server_name"},
	{"unclosed variable", []string{"-algo", "ConsistentHash", "-hash-key", "${host"}, "-hash-key: the variable ${host lacks its closing }"},
	{"option of another picker", []string{"-algo", "SmoothWRR", "-hot-quantile", "0.5"}, "-hot-quantile: -algo SmoothWRR does not take WithHotQuantile (Prequal do)"},
	{"too few values", []string{"-algo", "LeastConn", "-reported-load", "10s"}, `-reported-load "10s": too few values (want WINDOW,CLIENTS)`},
	{"too many values", []string{"-algo", "LeastConn", "-reported-load", "10s,16,3"}, `-reported-load "10s,16,3": too many values`},
	{"not a duration", []string{"-algo", "LeastConn", "-reported-load", "10,16"}, `-reported-load "10,16": "10" is not a duration`},
	{"not a whole number", []string{"-algo", "LeastConn", "-reported-load", "10s,1.5"}, `"1.5" is not a whole number`},
	{"not a number", []string{"-algo", "ConsistentHash", "-hash-key", "$uri", "-bounded-load", "x"}, `-bounded-load "x": "x" is not a number (want C)`},
	{"empty value", []string{"-algo", "FastestFirst", "-band", ""}, `-band "": "" is not a number (want H)`},
	{"value with a space", []string{"-algo", "Prequal", "-probe-pool", "8, 1 s"}, `-probe-pool "8, 1 s": "1 s" is not a duration`},
}

// RunBadFlags: each of BadFlags, after base, is refused with its message
// and nothing is built; every refusal but -algo's wraps
// balancer.ErrInvalidConfig, -algo's balancer.ErrUnknownAlgorithm.
func RunBadFlags(t *testing.T, build Build, base ...string) {
	for _, tt := range BadFlags {
		t.Run(tt.Name, func(t *testing.T) {
			_, _, err := build(append(slices.Clone(base), tt.Args...))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.Want)
			if tt.Name == "unknown algo" {
				assert.ErrorIs(t, err, balancer.ErrUnknownAlgorithm)
			} else {
				assert.ErrorIs(t, err, balancer.ErrInvalidConfig)
			}
		})
	}
}

// Needs: the summary says what the picker needs from the servers: probes
// for Prequal, reports for ReportedWRR and for a picker given
// -reported-load, nothing otherwise.
func Needs(t *testing.T, build Build, base ...string) {
	tests := []struct {
		args []string
		want string // "" for nothing
	}{
		{[]string{"-algo", "Prequal"}, "it needs probes: each backend answers GET -probe-path"},
		{[]string{"-algo", "ReportedWRR"}, "it needs load reports"},
		{[]string{"-algo", "LeastConn", "-reported-load", "10s,16"}, "it needs with -reported-load, load reports"},
		{[]string{"-algo", "LeastConn"}, ""},
		{[]string{"-algo", "SmoothWRR"}, ""},
	}
	for _, tt := range tests {
		summary, release, err := build(append(slices.Clone(base), tt.args...))
		require.NoError(t, err, "%v", tt.args)
		release()
		if tt.want == "" {
			assert.NotContains(t, summary, "needs", "%v", tt.args)
		} else {
			assert.Contains(t, summary, tt.want, "%v", tt.args)
		}
	}
}

// Usage: -h's output lists every picker, with the option flags it takes
// and what it needs from the servers, and each option flag with its
// arguments and the pickers that take it.
func Usage(t *testing.T, out string) {
	for _, a := range balancer.Algorithms() {
		assert.Contains(t, out, "\n  "+a.Name, "-h does not list %s", a.Name)
	}
	for name, o := range Options {
		assert.Contains(t, out, "\n  -"+name+" ", "-h does not list -%s", name)
		assert.Contains(t, out, " of balancer."+o.Option+": ", "-h does not name %s", o.Option)
	}
	for _, want := range []string{
		"  Prequal: -probe-rate -probe-pool -hot-quantile -decay -failure-penalty -probe-path -probe-timeout\n      needs probes",
		"  ReportedWRR: -blackout -weight-update-period -weight-expiration -error-utilization-penalty -slow-start\n      needs load reports",
		"  LeastConn: -reported-load -slow-start\n      needs with -reported-load, load reports",
		"  ConsistentHash: -bounded-load -hash-key (required)\n",
		"  IPHash\n",
		"  -reported-load WINDOW,CLIENTS\n    \tWINDOW,CLIENTS of balancer.WithReportedLoad: ",
		"(LeastConn, P2CPeakEWMA, FastestFirst, RandomTwo)\n",
		"at once (every picker)\n",
		"loadreport's Middleware",
	} {
		assert.Contains(t, out, want)
	}
}

// CopyBuilds: the command's directory (the test's), copied into a module
// of its own that requires the library, builds; so the command imports
// nothing internal to this repository nor another command. The library
// comes from this checkout (a replace directive) and the build uses only
// the module cache.
func CopyBuilds(t *testing.T, module string) {
	if testing.Short() {
		t.Skip("builds a module: skipped under -short")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err, "the test's directory is not two levels below the repository's root")
	dir := t.TempDir()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	mod := "module " + module + "\n\ngo 1.26\n\nrequire github.com/lbgo/balancer v0.0.0\n\nreplace github.com/lbgo/balancer => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644))
	run := func(args ...string) {
		cmd := exec.Command(goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
	}
	run("mod", "tidy")
	run("build", "-o", filepath.Join(dir, "cmd"), ".")
}
