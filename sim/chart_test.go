package sim

import (
	"bytes"
	"encoding/xml"
	"io"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// svgDoc is what the chart tests read back from an SVG: every text, and
// the numbers of the drawing elements.
type svgDoc struct {
	width, height float64
	texts         []string
	paths         []string // d of every path
	strokes       map[string]int
}

// parseSVG decodes an SVG with encoding/xml, failing the test if it is not
// well formed.
func parseSVG(t *testing.T, b []byte) svgDoc {
	t.Helper()
	doc := svgDoc{strokes: map[string]int{}}
	d := xml.NewDecoder(bytes.NewReader(b))
	var inText bool
	var root bool
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch e := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range e.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch e.Name.Local {
			case "svg":
				require.False(t, root, "nested svg")
				root = true
				assert.Equal(t, "http://www.w3.org/2000/svg", e.Name.Space)
				doc.width, _ = strconv.ParseFloat(attr["width"], 64)
				doc.height, _ = strconv.ParseFloat(attr["height"], 64)
			case "text":
				inText = true
				doc.texts = append(doc.texts, "")
			case "path":
				doc.paths = append(doc.paths, attr["d"])
				if s := attr["stroke"]; s != "" {
					doc.strokes[s]++
				}
			}
		case xml.CharData:
			if inText {
				doc.texts[len(doc.texts)-1] += string(e)
			}
		case xml.EndElement:
			if e.Name.Local == "text" {
				inText = false
			}
		}
	}
	require.True(t, root, "no svg element")
	return doc
}

// number matches every number of a path.
var number = regexp.MustCompile(`-?[0-9]+(\.[0-9]+)?`)

func (d svgDoc) has(text string) bool {
	for _, t := range d.texts {
		if t == text {
			return true
		}
	}
	return false
}

func chartReport(t *testing.T, names ...string) *Report {
	t.Helper()
	pols := []Policy{policy(t, "RoundRobin"), policy(t, "FastestFirst"), policy(t, OracleSED)}
	return shortReport(t, names, pols, 1)
}

func TestCharts(t *testing.T) {
	rep := chartReport(t, "brownout", "uniform")
	charts, err := rep.Charts()
	require.NoError(t, err)
	var names []string
	for _, c := range charts {
		names = append(names, c.Name)
	}
	assert.Equal(t, []string{
		"brownout-share.svg", "brownout-latency.svg", "brownout-weights.svg",
		"uniform-share.svg", "uniform-latency.svg", "uniform-weights.svg",
	}, names)

	for _, c := range charts {
		t.Run(c.Name, func(t *testing.T) {
			doc := parseSVG(t, c.SVG)
			assert.Positive(t, doc.width)
			assert.Positive(t, doc.height)
			scenario := strings.SplitN(c.Name, "-", 2)[0]
			require.NotEmpty(t, doc.texts)
			assert.True(t, strings.HasPrefix(doc.texts[0], scenario+": "), "title %q", doc.texts[0])
			assert.Contains(t, doc.texts[1], "seed 1")
			// Every coordinate of every path lies on the canvas.
			for _, p := range doc.paths {
				for _, m := range number.FindAllString(p, -1) {
					v, err := strconv.ParseFloat(m, 64)
					require.NoError(t, err)
					assert.True(t, v >= 0 && v <= max(doc.width, doc.height), "coordinate %v off the canvas", v)
				}
			}
			switch {
			case strings.HasSuffix(c.Name, "-share.svg"):
				// One panel per policy, each with a time axis and an area
				// per backend.
				for _, p := range rep.Policies {
					assert.True(t, doc.has(p), "panel %s", p)
				}
				assert.Len(t, doc.paths, 10*len(rep.Policies))
				assert.True(t, doc.has("time (s)"))
				assert.True(t, doc.has("share of attempts (%)"))
				for _, tk := range []string{"0", "50", "100", "20"} {
					assert.True(t, doc.has(tk), "tick %s", tk)
				}
				for i := range 10 {
					assert.True(t, doc.has("backend "+strconv.Itoa(i)) || doc.has("backend "+strconv.Itoa(i)+" (degraded)"), "legend backend %d", i)
				}
			case strings.HasSuffix(c.Name, "-latency.svg"):
				assert.Len(t, doc.paths, len(rep.Policies), "one line per policy")
				assert.True(t, doc.has("latency (ms, log scale)"))
				assert.True(t, doc.has("percentile, from the median (tail scale)"))
				for _, tk := range []string{"50", "90", "99", "99.9", "99.99"} {
					assert.True(t, doc.has(tk), "tick %s", tk)
				}
				for _, p := range rep.Policies {
					assert.True(t, doc.has(p), "legend %s", p)
				}
			case strings.HasSuffix(c.Name, "-weights.svg"):
				assert.Contains(t, doc.texts[0], "FastestFirst")
				assert.Len(t, doc.paths, 10, "one line per backend")
				assert.True(t, doc.has("weight (best = 100)"))
				assert.True(t, doc.has("100"))
			}
		})
	}
	share := parseSVG(t, charts[0].SVG)
	assert.True(t, share.has("backend 3 (degraded)"))
	assert.Contains(t, share.texts[1], "shaded: backend 3 degraded, 15 s to 45 s")
	uniform := parseSVG(t, charts[3].SVG)
	assert.NotContains(t, uniform.texts[1], "shaded")
}

// TestChartsWeightsRange: the brownout's slow backend visibly loses weight
// in the weights chart: its line (drawn last, thickest) reaches well below
// the others, which stay at the top.
func TestChartsWeightsRange(t *testing.T) {
	rep := chartReport(t, "brownout")
	charts, err := rep.Charts()
	require.NoError(t, err)
	doc := parseSVG(t, charts[2].SVG)
	require.Len(t, doc.paths, 10)
	ys := func(d string) (lo, hi float64) {
		lo, hi = 1e9, -1e9
		for _, m := range regexp.MustCompile(`[MV]-?[0-9.]+( -?[0-9.]+)?`).FindAllString(d, -1) {
			f := strings.Fields(m[1:])
			v, _ := strconv.ParseFloat(f[len(f)-1], 64)
			lo, hi = min(lo, v), max(hi, v)
		}
		return lo, hi
	}
	_, slowBottom := ys(doc.paths[9])
	_, otherBottom := ys(doc.paths[0])
	assert.Greater(t, slowBottom, otherBottom+100, "the slow backend's weight falls (SVG y grows downward)")
}

func TestChartsDeterministic(t *testing.T) {
	a, err := chartReport(t, "blackhole-fast").Charts()
	require.NoError(t, err)
	b, err := chartReport(t, "blackhole-fast").Charts()
	require.NoError(t, err)
	require.Equal(t, len(a), len(b))
	for i := range a {
		assert.Equal(t, a[i].SVG, b[i].SVG, a[i].Name)
	}
	sc := mustLookup(t, "blackhole-fast")
	sc.Duration = 20 * time.Second
	other, err := Compare([]Scenario{sc}, []Policy{policy(t, "RoundRobin"), policy(t, "FastestFirst"), policy(t, OracleSED)}, Options{Seed: 9})
	require.NoError(t, err)
	c, err := other.Charts()
	require.NoError(t, err)
	assert.NotEqual(t, a[0].SVG, c[0].SVG, "another seed, the same chart")
}

func TestChartsBadReport(t *testing.T) {
	rep := chartReport(t, "uniform")
	empty := &Report{Scenarios: rep.Scenarios, Summaries: [][]Summary{{{Policy: "x"}}}}
	_, err := empty.Charts()
	assert.ErrorContains(t, err, "has no runs")

	none := &Report{Scenarios: rep.Scenarios}
	_, err = none.Charts()
	assert.ErrorContains(t, err, "no summaries")

	bad := *rep.Summaries[0][0].Runs[0]
	bad.Tail = nil
	broken := &Report{Scenarios: rep.Scenarios, Summaries: [][]Summary{{{Policy: "x", Runs: []*Result{&bad}}}}}
	_, err = broken.Charts()
	assert.ErrorContains(t, err, "does not match")

	charts, err := (&Report{}).Charts()
	assert.NoError(t, err)
	assert.Empty(t, charts)
}

func TestTicks(t *testing.T) {
	label := func(ts []tick) []string {
		var out []string
		for _, t := range ts {
			out = append(out, t.label)
		}
		return out
	}
	assert.Equal(t, []string{"0", "10", "20", "30", "40", "50", "60"}, label(linearTicks(0, 60, 7)))
	assert.Equal(t, []string{"0", "50", "100"}, label(linearTicks(0, 100, 3)))
	assert.Equal(t, []string{"0", "5", "10", "15", "20"}, label(linearTicks(0, 20, 7)))
	assert.Equal(t, []string{"1", "2", "5", "10", "20", "50", "100"}, label(logTicks(1, 100)))
	assert.Equal(t, []string{"0.1", "1", "10", "100", "1000", "10000", "100000"}, label(logTicks(0.1, 1e5)))
	assert.Equal(t, []string{"3"}, label(linearTicks(3, 3, 5)), "an empty range")
}

func TestEsc(t *testing.T) {
	assert.Equal(t, "a &lt;b&gt; &amp; &quot;c&quot;", esc(`a <b> & "c"`))
}
