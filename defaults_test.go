//lint:file-ignore SA1019 the deprecated constants under test

package balancer

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"math"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The deprecated Default* constants keep their values for a release, and
// the docs now state those values in words and numbers. The tests below
// hold the three together: each constant against the number its field's
// or option's doc states, and against what a peer or a picker built
// without the setting does.

// TestDeprecatedDefaults_documented reads the doc of the field or option
// each constant applies to and expects it to state the constant's value
// (the text written here, which must hold the value as the docs spell it).
func TestDeprecatedDefaults_documented(t *testing.T) {
	docs := exportedDocs(t)
	for _, tt := range []struct {
		name  string
		value any    // the constant
		doc   string // Func, or Type.Field
		text  string // in the doc, whitespace folded
	}{
		{"DefaultWeight", DefaultWeight, "Weight", "Default 1."},
		{"DefaultMaxFails", DefaultMaxFails, "MaxFails", "Default 1."},
		{"DefaultFailTimeout", DefaultFailTimeout, "FailTimeout", "Default 10 s."},
		{"DefaultDecay", DefaultDecay, "WithDecay", "10 s for P2CPeakEWMA and Prequal"},
		{"DefaultFastestDecay", DefaultFastestDecay, "WithDecay", "5 s for FastestFirst"},
		{"DefaultFailurePenalty", DefaultFailurePenalty, "WithFailurePenalty", "Default: 5 s"},
		{"DefaultBand", DefaultBand, "FastestFirstSettings.Band", "0: 1.25,"},
		{"DefaultExponent", DefaultExponent, "FastestFirstSettings.Exponent", "0: 2,"},
		{"DefaultFloor", DefaultFloor, "FastestFirstSettings.Floor", "0: 1,"},
		{"DefaultTolerance", DefaultTolerance, "FastestFirstSettings.Tolerance", "0: 3:"},
		{"DefaultProbesPerPick", DefaultProbesPerPick, "PrequalSettings.ProbesPerPick", "0: 3,"},
		{"DefaultProbesPerSecond", DefaultProbesPerSecond, "PrequalSettings.ProbesPerSecond", "0: 10000,"},
		{"DefaultProbePoolSize", DefaultProbePoolSize, "PrequalSettings.PoolSize", "0: 4 "},
		{"DefaultProbeMaxAge", DefaultProbeMaxAge, "PrequalSettings.MaxAge", "0: 1 s."},
		{"DefaultHotQuantile", DefaultHotQuantile, "PrequalSettings.HotQuantile", "0: 0.3,"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			doc, ok := docs[tt.doc]
			require.True(t, ok, "no doc for %s", tt.doc)
			assert.Contains(t, doc, tt.text, "%s's doc", tt.doc)
			v := fmt.Sprint(tt.value)
			if d, ok := tt.value.(time.Duration); ok {
				v = fmt.Sprintf("%g s", d.Seconds())
			}
			number := regexp.MustCompile(`(^|[^0-9.])` + regexp.QuoteMeta(v) + `($|[^0-9])`)
			assert.Regexp(t, number, tt.text, "%s is %s", tt.name, v)
		})
	}
}

// exportedDocs returns the docs of the package's functions and of its
// struct types' fields ("Type.Field"), each with its whitespace folded.
func exportedDocs(t *testing.T) map[string]string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", func(fi os.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.ParseComments)
	require.NoError(t, err)
	fold := func(cg *ast.CommentGroup) string { return strings.Join(strings.Fields(cg.Text()), " ") }
	docs := map[string]string{}
	for _, f := range pkgs["balancer"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Doc != nil {
					docs[d.Name.Name] = fold(d.Doc)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					ts, ok := s.(*ast.TypeSpec)
					if !ok {
						continue
					}
					st, ok := ts.Type.(*ast.StructType)
					if !ok {
						continue
					}
					for _, fl := range st.Fields.List {
						for _, n := range fl.Names {
							if fl.Doc != nil {
								docs[ts.Name.Name+"."+n.Name] = fold(fl.Doc)
							}
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, docs)
	return docs
}

// TestDeprecatedDefaults_peer: a peer given no option holds the three
// server defaults.
func TestDeprecatedDefaults_peer(t *testing.T) {
	p := NewPeer("a")
	assert.Equal(t, DefaultWeight, p.Weight())
	assert.Equal(t, DefaultMaxFails, p.MaxFails())
	assert.Equal(t, DefaultFailTimeout, p.FailTimeout())
}

// TestDeprecatedDefaults_behaviour runs one scripted load (virtual clock,
// seeded draws, peers of different and changing latency, failures, probe
// answers of changing load and round trip) three times per constant: on
// the picker built with the setting left out, with the setting given the
// constant, and with it given another value. The first two must pick and
// estimate alike, step for step; the third must not, which shows that the
// load exercises the setting, so that the equality says the constant is
// the default.
func TestDeprecatedDefaults_behaviour(t *testing.T) {
	type opts func(pr Prober) []Option
	prequal := func(s PrequalSettings, more ...Option) opts {
		return func(pr Prober) []Option {
			s.Prober = pr
			return append([]Option{s.Option()}, more...)
		}
	}
	plain := func(o ...Option) opts { return func(Prober) []Option { return o } }
	fastest := func(s FastestFirstSettings) opts { return plain(s.Option()) }
	for _, tt := range []struct {
		name, picker          string
		unset, given, another opts
	}{
		{"DefaultDecay/P2CPeakEWMA", "P2CPeakEWMA",
			plain(), plain(WithDecay(DefaultDecay)), plain(WithDecay(time.Second))},
		{"DefaultDecay/Prequal", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{}, WithDecay(DefaultDecay)), prequal(PrequalSettings{}, WithDecay(time.Second))},
		{"DefaultFastestDecay", "FastestFirst",
			plain(), plain(WithDecay(DefaultFastestDecay)), plain(WithDecay(10 * time.Second))},
		{"DefaultFailurePenalty", "P2CPeakEWMA",
			plain(), plain(WithFailurePenalty(DefaultFailurePenalty)), plain(WithFailurePenalty(time.Millisecond))},
		{"DefaultBand", "FastestFirst",
			fastest(FastestFirstSettings{}), fastest(FastestFirstSettings{Band: DefaultBand}), fastest(FastestFirstSettings{Band: 2})},
		{"DefaultExponent", "FastestFirst",
			fastest(FastestFirstSettings{}), fastest(FastestFirstSettings{Exponent: DefaultExponent}), fastest(FastestFirstSettings{Exponent: 1})},
		{"DefaultFloor", "FastestFirst",
			fastest(FastestFirstSettings{}), fastest(FastestFirstSettings{Floor: DefaultFloor}), fastest(FastestFirstSettings{Floor: 10})},
		{"DefaultTolerance", "FastestFirst",
			fastest(FastestFirstSettings{}), fastest(FastestFirstSettings{Tolerance: DefaultTolerance}), fastest(FastestFirstSettings{Tolerance: 1.5})},
		{"DefaultProbesPerPick", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{ProbesPerPick: DefaultProbesPerPick}), prequal(PrequalSettings{ProbesPerPick: 1})},
		{"DefaultProbesPerSecond", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{ProbesPerSecond: DefaultProbesPerSecond}), prequal(PrequalSettings{ProbesPerSecond: 50})},
		{"DefaultProbePoolSize", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{PoolSize: DefaultProbePoolSize}), prequal(PrequalSettings{PoolSize: 2})},
		{"DefaultProbeMaxAge", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{MaxAge: DefaultProbeMaxAge}), prequal(PrequalSettings{MaxAge: 100 * time.Millisecond})},
		{"DefaultHotQuantile", "Prequal",
			prequal(PrequalSettings{}), prequal(PrequalSettings{HotQuantile: DefaultHotQuantile}), prequal(PrequalSettings{HotQuantile: 0.9})},
	} {
		t.Run(tt.name, func(t *testing.T) {
			unset := defaultsLoad(t, tt.picker, tt.unset)
			if at := firstDifference(unset, defaultsLoad(t, tt.picker, tt.given)); at != "" {
				t.Errorf("left out and given the constant, the runs part at %s", at)
			}
			if firstDifference(unset, defaultsLoad(t, tt.picker, tt.another)) == "" {
				t.Errorf("another value leaves the run as it was: the load does not exercise the setting")
			}
		})
	}
}

// defaultsLoad runs the scripted load on the picker named picker, built
// with opts (handed the load's prober), and returns its trace: every
// pick, and every 50 steps each peer's stats (and the probe counters of
// a Prequal).
func defaultsLoad(t *testing.T, picker string, opts func(pr Prober) []Option) string {
	t.Helper()
	const steps = 1200
	base := []time.Duration{10 * time.Millisecond, 25 * time.Millisecond, 60 * time.Millisecond, 150 * time.Millisecond}
	peers := makePeers(len(base), letter, nil)
	at := map[*Peer]int{}
	for i, p := range peers {
		at[p] = i
	}
	clk := newFakeClock()
	step := 0
	// latency is peer i's at the current step: its base, drifting by up
	// to ±50% over a few hundred steps, and 6× for c in steps [400, 700).
	latency := func(i int) time.Duration {
		f := 1 + 0.5*math.Sin(float64(step)/40+float64(i))
		if i == 2 && step >= 400 && step < 700 {
			f *= 6
		}
		return time.Duration(float64(base[i]) * f)
	}
	pr := &syncProber{answer: func(p *Peer) ProbeAnswer {
		i := at[p]
		return ProbeAnswer{
			InFlight:  float64((step/7+3*i)%9) + float64(i),
			Latency:   latency(i),
			RoundTrip: time.Duration((step*7+i*13)%300) * time.Millisecond,
		}
	}}
	alg, err := AlgorithmNamed(picker)
	require.NoError(t, err)
	b, err := alg.New(peers, append(opts(pr), clk.opt(), WithRand(rand.NewPCG(7, 7)))...)
	require.NoError(t, err)

	var trace strings.Builder
	type attempt struct {
		p    *Peer
		done int // the step it ends at
	}
	var inFlight []attempt
	for step = 0; step < steps; step++ {
		gap := 3 * time.Millisecond
		if step%97 == 0 {
			gap = 700 * time.Millisecond
		}
		clk.add(gap)
		for len(inFlight) > 0 && inFlight[0].done <= step {
			a := inFlight[0]
			inFlight = inFlight[1:]
			i := at[a.p]
			o := Outcome{Latency: latency(i)}
			if i == 3 && step%11 == 0 || i == 1 && step >= 900 && step%5 == 0 {
				o = Outcome{Failed: true, Latency: time.Millisecond}
			}
			require.NoError(t, b.Done(a.p, o))
		}
		var r Request
		p, err := b.Pick(&r)
		if err != nil {
			fmt.Fprintf(&trace, "%d:%v ", step, err)
			continue
		}
		fmt.Fprintf(&trace, "%d:%s ", step, p.Addr())
		inFlight = append(inFlight, attempt{p, step + 1 + step%4})
		if step%50 == 0 {
			for _, q := range peers {
				s := q.Stats()
				fmt.Fprintf(&trace, "\n%s %v %v %d %d %v\n", q.Addr(), s.Latency, s.Health, s.DerivedWeight, s.Fails, s.Blind)
			}
			if q, ok := b.(*Prequal); ok {
				fmt.Fprintf(&trace, "%+v\n", q.ProbeStats())
			}
		}
	}
	return trace.String()
}

// firstDifference returns where traces a and b first differ, with what
// each says there, or "" if they are equal.
func firstDifference(a, b string) string {
	x, y := strings.Fields(a), strings.Fields(b)
	for i := range min(len(x), len(y)) {
		if x[i] != y[i] {
			return fmt.Sprintf("word %d: %q, %q (after %q)", i, x[i], y[i], strings.Join(x[max(0, i-8):i], " "))
		}
	}
	if len(x) != len(y) {
		return fmt.Sprintf("the end: %d words, %d", len(x), len(y))
	}
	return ""
}
