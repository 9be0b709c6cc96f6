package balancer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// optionCases is every option of the package with a valid value.
var optionCases = []struct {
	name string
	opt  Option
}{
	{"WithClock", WithClock(time.Now)},
	{"WithRand", WithRand(rand.NewPCG(1, 2))},
	{"WithRetryBudget", WithRetryBudget(&RetryBudget{})}, // Do's alone: every picker refuses it
	{"WithWarmup", WithWarmup(time.Minute)},
	{"WithDecay", WithDecay(time.Second)},
	{"WithFailurePenalty", WithFailurePenalty(time.Second)},
	{"WithBand", WithBand(1.5)},
	{"WithExponent", WithExponent(1)},
	{"WithFloor", WithFloor(2)},
	{"WithTolerance", WithTolerance(2)},
	{"WithBoundedLoad", WithBoundedLoad(1.25)},
	{"WithBlackoutPeriod", WithBlackoutPeriod(time.Second)},
	{"WithWeightExpirationPeriod", WithWeightExpirationPeriod(time.Minute)},
	{"WithWeightUpdatePeriod", WithWeightUpdatePeriod(100 * time.Millisecond)},
	{"WithErrorUtilizationPenalty", WithErrorUtilizationPenalty(2)},
	{"WithReportedLoad", WithReportedLoad(time.Second, 1)},
	{"WithProber", WithProber(proberFunc(func(*Peer, ProbeReceiver) {}))},
	{"WithProbeRate", WithProbeRate(2, 100)},
	{"WithProbePool", WithProbePool(8, time.Second)},
	{"WithHotQuantile", WithHotQuantile(0.8)},
	{"WithSlowStart", WithSlowStart(30*time.Second, 1, 10)},
	{"WithEvents", WithEvents(func(Event) {})},
	{"WithPanicThreshold", WithPanicThreshold(50)},
	{"WithMaxEjectionPercent", WithMaxEjectionPercent(10)},
}

// TestOptions_everyOptionEveryPicker builds every picker with every option,
// one at a time, each with a valid value: the pickers whose declaration
// names the option (Algorithm.Options, or WithClock, WithEvents and the
// guards, which every picker takes) accept it, every other one refuses it with
// ErrInvalidConfig and an error naming the option and the picker.
func TestOptions_everyOptionEveryPicker(t *testing.T) {
	for _, tt := range optionCases {
		t.Run(tt.name, func(t *testing.T) {
			forEachPicker(t, func(t *testing.T, pc pickerCase) {
				_, err := pc.new([]*Peer{NewPeer("a")}, tt.opt)
				if tt.name == "WithClock" || tt.name == "WithEvents" || slices.Contains(guardOptions, tt.name) || slices.Contains(pc.alg.Options, tt.name) {
					assert.NoError(t, err)
					return
				}
				assert.ErrorIs(t, err, ErrInvalidConfig)
				assert.ErrorContains(t, err, tt.name)
				assert.ErrorContains(t, err, pc.name)
			})
		})
	}
}

// TestOptions_nil checks that a nil option is refused, by every picker,
// with its position.
func TestOptions_nil(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, err := pc.new([]*Peer{NewPeer("a")}, WithClock(time.Now), nil)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "opts[1] is nil")
	})
}

// optionFuncs returns the package's exported functions that return an
// Option, by name, with the file that declares each, read from the
// source.
func optionFuncs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	funcs := map[string]string{}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || fd.Type.Results == nil || len(fd.Type.Results.List) != 1 {
				continue
			}
			if id, ok := fd.Type.Results.List[0].Type.(*ast.Ident); ok && id.Name == "Option" {
				funcs[fd.Name.Name] = fset.Position(fd.Pos()).Filename
			}
		}
	}
	return funcs
}

// TestOptions_declaredOnce checks the declarations against the source:
// optionCases has a row for every option function; every option a picker
// declares exists; options.go declares the options every picker's
// randomness and clock go through (WithClock, WithRand) and no
// algorithm's option.
func TestOptions_declaredOnce(t *testing.T) {
	funcs := optionFuncs(t)
	var rows []string
	for _, tt := range optionCases {
		rows = append(rows, tt.name)
	}
	assert.ElementsMatch(t, slices.Sorted(maps.Keys(funcs)), rows, "one row per option function")
	for _, a := range Algorithms() {
		for _, o := range a.Options {
			assert.Contains(t, funcs, o, "%s declares %s", a.Name, o)
		}
	}
	var inOptions []string
	for name, file := range funcs {
		if file == "options.go" {
			inOptions = append(inOptions, name)
		}
	}
	assert.ElementsMatch(t, []string{"WithClock", "WithRand"}, inOptions, "options.go declares the shared options only")
}
