package sim

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Chart is one SVG chart of a report.
//
// The zero value is an empty chart. A Chart is a plain value, safe to
// share.
type Chart struct {
	// Name is a file name for the chart: the scenario's name, a dash and
	// the chart's kind, as in "brownout-share.svg".
	Name string
	SVG  []byte
}

// ChartWindow is the width of the time windows of the share charts.
const ChartWindow = time.Second

// WeightsPolicy is the picker whose derived weights get a chart.
const WeightsPolicy = "FastestFirst"

// Charts draws the first seed's runs of every scenario of r as SVG:
//   - NAME-share.svg: every backend's share of attempts over time, one
//     panel per policy, in ChartWindow windows, stacked with the watched
//     backend at the bottom and its degraded interval shaded;
//   - NAME-latency.svg: every policy's request latency by percentile, from
//     the fastest to p99.99 (Result.Tail), on a tail scale;
//   - NAME-weights.svg, when r has WeightsPolicy: the first client's
//     effective weight of every backend over time (Result.Weights).
//
// The charts depend only on the report: the same runs give the same bytes.
// It returns an error if a summary has no runs or runs that do not match
// their scenario.
func (r *Report) Charts() ([]Chart, error) {
	var out []Chart
	for s := range r.Scenarios {
		sc := &r.Scenarios[s]
		if len(r.Summaries) <= s || len(r.Summaries[s]) == 0 {
			return nil, fmt.Errorf("sim: scenario %s has no summaries", sc.Name)
		}
		runs := make([]*Result, len(r.Summaries[s]))
		names := make([]string, len(runs))
		oracle := make([]bool, len(runs))
		for p, m := range r.Summaries[s] {
			if len(m.Runs) == 0 || m.Runs[0] == nil {
				return nil, fmt.Errorf("sim: %s in scenario %s has no runs", m.Policy, sc.Name)
			}
			run := m.Runs[0]
			if run.Backends != len(sc.Backends) || len(run.Picks) != len(run.Weights) ||
				len(run.Picks)%max(run.Backends, 1) != 0 || len(run.Tail) != len(TailLevels()) {
				return nil, fmt.Errorf("sim: the run of %s in scenario %s does not match the scenario", m.Policy, sc.Name)
			}
			runs[p], names[p], oracle[p] = run, m.Policy, m.Oracle
		}
		out = append(out,
			Chart{sc.Name + "-share.svg", shareChart(sc, runs, names)},
			Chart{sc.Name + "-latency.svg", latencyChart(sc, runs, names, oracle)})
		for p, n := range names {
			if n == WeightsPolicy {
				out = append(out, Chart{sc.Name + "-weights.svg", weightsChart(sc, runs[p])})
			}
		}
	}
	return out, nil
}

// backendColors returns each backend's colour: red for the watched one,
// the palette in order for the others.
func backendColors(sc *Scenario) []string {
	c := make([]string, len(sc.Backends))
	k := 0
	for i := range c {
		if i == sc.Watch {
			c[i] = watchedColor
			continue
		}
		c[i] = palette[k%len(palette)]
		k++
	}
	return c
}

// backendLabels returns the legend labels of the backends, the watched one
// marked.
func backendLabels(sc *Scenario) []string {
	l := make([]string, len(sc.Backends))
	for i := range l {
		l[i] = fmt.Sprintf("backend %d", i)
		if i == sc.Watch {
			l[i] += " (degraded)"
		}
	}
	return l
}

// degradedNote describes the shading of a time chart, or "".
func degradedNote(sc *Scenario) string {
	from, to, ok := sc.Degraded()
	if !ok {
		return ""
	}
	return fmt.Sprintf("; shaded: backend %d degraded, %g s to %g s", sc.Watch, from.Seconds(), to.Seconds())
}

// shade draws the watched backend's degraded interval over a time plot.
func shade(s *svg, sc *Scenario, x, y scale) {
	from, to, ok := sc.Degraded()
	if !ok {
		return
	}
	a, b := x.px(min(from.Seconds(), x.hi)), x.px(min(to.Seconds(), x.hi))
	top, bottom := min(y.a, y.b), max(y.a, y.b)
	s.rect(a, top, b-a, bottom-top, `fill="#000000" fill-opacity="0.13"`)
	for _, px := range []float64{a, b} {
		s.line(px, top, px, bottom, `stroke="#000000" stroke-dasharray="4 3"`)
	}
}

// timeTicks returns the ticks of a time axis of d.
func timeTicks(d time.Duration) []tick { return linearTicks(0, d.Seconds(), 7) }

func shareChart(sc *Scenario, runs []*Result, names []string) []byte {
	const (
		cols          = 2
		plotW, plotH  = 380.0, 120.0
		left, colGap  = 70.0, 60.0
		rowH          = plotH + 70
		titleH        = 40.0
		width         = int(left + cols*plotW + (cols-1)*colGap + 30)
		windowBuckets = int(ChartWindow / Bucket)
	)
	n := len(sc.Backends)
	colors := backendColors(sc)
	// Legend first, to know how tall it is; drawn on a scratch document.
	scratch := newSVG(width, 100)
	legendRows := (scratch.legend(left, 0, float64(width-10), backendLabels(sc), colors, nil, false))/18 + 1
	head := titleH + 18*legendRows + 10
	rows := (len(runs) + cols - 1) / cols
	height := int(head + float64(rows)*rowH)
	s := newSVG(width, height)
	s.text(10, 20, "start", `font-size="15" font-weight="bold"`, sc.Name+": share of attempts per backend over time")
	stack := "stacked"
	if sc.Watch >= 0 {
		stack += fmt.Sprintf(" with backend %d at the bottom", sc.Watch)
	}
	s.text(10, 36, "start", `fill="#444444"`, fmt.Sprintf("%s windows, seed %d, %s%s", span(ChartWindow), runs[0].Seed, stack, degradedNote(sc)))
	s.legend(left, titleH+16, float64(width-10), backendLabels(sc), colors, nil, false)

	order := make([]int, 0, n) // bottom to top
	if sc.Watch >= 0 {
		order = append(order, sc.Watch)
	}
	for i := range n {
		if i != sc.Watch {
			order = append(order, i)
		}
	}
	for p, run := range runs {
		x0 := left + float64(p%cols)*(plotW+colGap)
		y0 := head + float64(p/cols)*rowH + 20
		dur := time.Duration(run.Buckets()) * Bucket
		x := scale{lo: 0, hi: dur.Seconds(), a: x0, b: x0 + plotW}
		y := scale{lo: 0, hi: 100, a: y0 + plotH, b: y0}
		s.text(x0, y0-6, "start", `font-weight="bold"`, names[p])
		// Cumulative shares per window, in stacking order.
		windows := (run.Buckets() + windowBuckets - 1) / windowBuckets
		cum := make([][]float64, n) // cum[j][k]: layers 0..j in window k, %
		for j := range cum {
			cum[j] = make([]float64, windows)
		}
		for k := range windows {
			var acc float64
			for j, i := range order {
				share, _ := run.Share(i, k*windowBuckets, (k+1)*windowBuckets)
				acc += 100 * share
				cum[j][k] = acc
			}
		}
		// Top layer first: each area runs from the axis up to its
		// cumulative share and hides the part of the ones before it.
		for j := n - 1; j >= 0; j-- {
			var d strings.Builder
			for k := range windows {
				t0 := (time.Duration(k*windowBuckets) * Bucket).Seconds()
				t1 := min((time.Duration((k+1)*windowBuckets) * Bucket).Seconds(), x.hi)
				py := y.px(cum[j][k])
				if k == 0 {
					fmt.Fprintf(&d, "M%s %s", f(x.px(t0)), f(py))
				} else {
					fmt.Fprintf(&d, "V%s", f(py))
				}
				fmt.Fprintf(&d, "H%s", f(x.px(t1)))
			}
			fmt.Fprintf(&d, "V%sH%sZ", f(y.a), f(x.a))
			s.path(d.String(), fmt.Sprintf(`fill="%s"`, colors[order[j]]))
		}
		shade(s, sc, x, y)
		if sc.Watch >= 0 {
			fy := y.px(100 * sc.FairShare(sc.Watch))
			s.line(x.a, fy, x.b, fy, `stroke="#ffffff" stroke-width="1.5" stroke-dasharray="6 3"`)
		}
		ylabel := ""
		if p%cols == 0 {
			ylabel = "share of attempts (%)"
		}
		s.frame(x, y, timeTicks(dur), linearTicks(0, 100, 3), "time (s)", ylabel)
	}
	if sc.Watch >= 0 {
		s.text(float64(width-10), float64(height-8), "end", `fill="#444444"`,
			fmt.Sprintf("white dashes: backend %d's fair share (%.3g%%); white gaps: no attempts", sc.Watch, 100*sc.FairShare(sc.Watch)))
	}
	return s.bytes()
}

// tailTicks are the ticks of the tail axis, whose coordinate is
// −log10(1 − level).
var tailTicks = []tick{{math.Log10(2), "50"}, {1, "90"}, {2, "99"}, {3, "99.9"}, {4, "99.99"}}

// tailFrom is where the latency charts start on the tail scale: about the
// median, −log10(1 − 0.5) = 0.301, rounded to the level grid's 0.3.
const tailFrom = 0.3

// tailX returns a level's coordinate on the tail scale.
func tailX(level float64) float64 { return -math.Log10(1 - level) }

func latencyChart(sc *Scenario, runs []*Result, names []string, oracle []bool) []byte {
	const (
		left, top    = 75.0, 50.0
		plotW, plotH = 560.0, 360.0
		legendW      = 170.0
		width        = int(left + plotW + 20 + legendW)
		height       = int(top + plotH + 50)
	)
	levels := TailLevels()
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	lo, hi, zero := math.Inf(1), 0.0, false
	for _, r := range runs {
		for i, v := range r.Tail {
			if tailX(levels[i]) < tailFrom-1e-9 {
				continue
			}
			if v <= 0 {
				zero = true
				continue
			}
			lo, hi = min(lo, ms(v)), max(hi, ms(v))
		}
	}
	if hi == 0 {
		lo, hi = 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi)))
	if hi <= lo {
		hi = lo * 10
	}
	s := newSVG(width, height)
	s.text(10, 20, "start", `font-size="15" font-weight="bold"`, sc.Name+": request latency by percentile")
	sub := fmt.Sprintf("seed %d; failed requests included at the time they failed", runs[0].Seed)
	if zero {
		sub += "; refused ones (0 ms) on the bottom edge"
	}
	s.text(10, 36, "start", `fill="#444444"`, sub)
	x := scale{lo: tailFrom, hi: 4, a: left, b: left + plotW}
	y := scale{lo: lo, hi: hi, a: top + plotH, b: top, log: true}
	s.frame(x, y, tailTicks, logTicks(lo, hi), "percentile, from the median (tail scale)", "latency (ms, log scale)")
	colors := make([]string, len(runs))
	dashes := make([]string, len(runs))
	k := 0
	for p := range runs {
		if oracle[p] {
			o := min(k2(oracle, p), len(oracleStyles)-1)
			colors[p], dashes[p] = oracleStyles[o][0], oracleStyles[o][1]
			continue
		}
		colors[p] = palette[k%len(palette)]
		k++
	}
	for p, r := range runs {
		var d strings.Builder
		cmd := "M"
		for i, v := range r.Tail {
			if tailX(levels[i]) < tailFrom-1e-9 {
				continue
			}
			fmt.Fprintf(&d, "%s%s %s", cmd, f(x.px(tailX(levels[i]))), f(y.px(max(ms(v), lo))))
			cmd = "L"
		}
		s.path(d.String(), fmt.Sprintf(`fill="none" stroke="%s" stroke-width="2"%s`, colors[p], dashAttr(dashes[p])))
	}
	for p := range runs {
		ly := top + 10 + 20*float64(p)
		s.legend(left+plotW+20, ly, float64(width), names[p:p+1], colors[p:p+1], dashes[p:p+1], true)
	}
	return s.bytes()
}

// k2 returns how many oracles come before p.
// oracleStyles are the colors and dashes of the oracles' lines, in order
// (SED, full-info, split).
var oracleStyles = [][2]string{{"#222222", "6 4"}, {"#555555", "2 3"}, {"#999999", "6 4"}}

func k2(oracle []bool, p int) int {
	n := 0
	for _, o := range oracle[:p] {
		if o {
			n++
		}
	}
	return n
}

func weightsChart(sc *Scenario, run *Result) []byte {
	const (
		left, top    = 75.0, 50.0
		plotW, plotH = 700.0, 260.0
		width        = int(left + plotW + 30)
	)
	n := run.Backends
	colors := backendColors(sc)
	scratch := newSVG(width, 100)
	legendRows := scratch.legend(left, 0, float64(width-10), backendLabels(sc), colors, nil, true)/18 + 1
	height := int(top + plotH + 50 + 18*legendRows)
	var most int32 = 100
	for _, v := range run.Weights {
		most = max(most, v)
	}
	dur := time.Duration(run.Buckets()) * Bucket
	s := newSVG(width, height)
	s.text(10, 20, "start", `font-size="15" font-weight="bold"`, fmt.Sprintf("%s: %s's derived weight per backend over time", sc.Name, run.Policy))
	clients := ""
	if k := orDefault(sc.Clients, 1); k > 1 {
		clients = fmt.Sprintf(" (client 1 of %d)", k)
	}
	s.text(10, 36, "start", `fill="#444444"`, fmt.Sprintf("effective weight as Peer.State reports it%s, every %s, seed %d%s", clients, span(Bucket), run.Seed, degradedNote(sc)))
	x := scale{lo: 0, hi: dur.Seconds(), a: left, b: left + plotW}
	y := scale{lo: 0, hi: float64(most), a: top + plotH, b: top}
	shade(s, sc, x, y)
	s.frame(x, y, timeTicks(dur), linearTicks(0, float64(most), 6), "time (s)", "weight (best = 100)")
	order := make([]int, 0, n) // the watched backend last, on top
	for i := range n {
		if i != sc.Watch {
			order = append(order, i)
		}
	}
	if sc.Watch >= 0 {
		order = append(order, sc.Watch)
	}
	for _, i := range order {
		var d strings.Builder
		prev := int32(-1)
		for k := range run.Buckets() {
			v := run.Weights[k*n+i]
			t0 := (time.Duration(k) * Bucket).Seconds()
			switch {
			case k == 0:
				fmt.Fprintf(&d, "M%s %s", f(x.px(t0)), f(y.px(float64(v))))
			case v != prev:
				fmt.Fprintf(&d, "H%sV%s", f(x.px(t0)), f(y.px(float64(v))))
			}
			prev = v
		}
		fmt.Fprintf(&d, "H%s", f(x.b))
		width := "1.5"
		if i == sc.Watch {
			width = "2.5"
		}
		s.path(d.String(), fmt.Sprintf(`fill="none" stroke="%s" stroke-width="%s"`, colors[i], width))
	}
	s.legend(left, top+plotH+58, float64(width-10), backendLabels(sc), colors, make([]string, n), true)
	return s.bytes()
}
