package sim

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// svg builds one SVG document. Coordinates are written with one decimal,
// so the same drawing always gives the same bytes.
type svg struct {
	b strings.Builder
}

func newSVG(width, height int) *svg {
	s := &svg{}
	fmt.Fprintf(&s.b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif" font-size="12">`+"\n", width, height, width, height)
	s.rect(0, 0, float64(width), float64(height), `fill="#ffffff"`)
	return s
}

// bytes closes the document and returns it.
func (s *svg) bytes() []byte {
	s.b.WriteString("</svg>\n")
	return []byte(s.b.String())
}

// f formats a coordinate with at most one decimal.
func f(v float64) string {
	v = math.Round(v*10) / 10
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// attr escapes an attribute value or text.
func esc(t string) string {
	var b strings.Builder
	for _, r := range t {
		switch r {
		case '<':
			b.WriteString("&lt;")
		case '>':
			b.WriteString("&gt;")
		case '&':
			b.WriteString("&amp;")
		case '"':
			b.WriteString("&quot;")
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func (s *svg) rect(x, y, w, h float64, attrs string) {
	fmt.Fprintf(&s.b, `<rect x="%s" y="%s" width="%s" height="%s" %s/>`+"\n", f(x), f(y), f(w), f(h), attrs)
}

func (s *svg) line(x1, y1, x2, y2 float64, attrs string) {
	fmt.Fprintf(&s.b, `<line x1="%s" y1="%s" x2="%s" y2="%s" %s/>`+"\n", f(x1), f(y1), f(x2), f(y2), attrs)
}

func (s *svg) path(d, attrs string) {
	fmt.Fprintf(&s.b, `<path d="%s" %s/>`+"\n", d, attrs)
}

// text writes t at (x, y); anchor is start, middle or end.
func (s *svg) text(x, y float64, anchor, attrs, t string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="%s" %s>%s</text>`+"\n", f(x), f(y), anchor, attrs, esc(t))
}

// vtext writes t rotated a quarter turn counterclockwise, centred on (x, y):
// a y axis label.
func (s *svg) vtext(x, y float64, t string) {
	fmt.Fprintf(&s.b, `<text x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`+"\n", f(x), f(y), f(x), f(y), esc(t))
}

// scale maps data values linearly onto pixels: lo to a, hi to b. A log
// scale maps log10 of the value instead.
type scale struct {
	lo, hi float64
	a, b   float64
	log    bool
}

func (c scale) px(v float64) float64 {
	lo, hi := c.lo, c.hi
	if c.log {
		v, lo, hi = math.Log10(max(v, c.lo)), math.Log10(lo), math.Log10(hi)
	}
	if hi == lo {
		return c.a
	}
	return c.a + (v-lo)/(hi-lo)*(c.b-c.a)
}

// tick is a value on an axis and its label.
type tick struct {
	v     float64
	label string
}

// linearTicks returns ticks at round values (1, 2 or 5 times a power of
// ten) covering [lo, hi] with at most about max of them.
func linearTicks(lo, hi float64, most int) []tick {
	if !(hi > lo) || most < 2 {
		return []tick{{lo, strconv.FormatFloat(lo, 'f', -1, 64)}}
	}
	raw := (hi - lo) / float64(most-1)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	step := 10 * p
	for _, m := range []float64{1, 2, 5} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	var out []tick
	for k := math.Ceil(lo/step - 1e-9); k*step <= hi+step*1e-9; k++ {
		v := k*step + 0 // no -0
		if v == 0 {
			v = 0
		}
		out = append(out, tick{v, strconv.FormatFloat(v, 'f', -1, 64)})
	}
	return out
}

// logTicks returns ticks at 1, 2 and 5 times the powers of ten in
// [lo, hi], both powers of ten; only at the powers when they are many.
func logTicks(lo, hi float64) []tick {
	var out []tick
	decades := math.Log10(hi / lo)
	mults := []float64{1, 2, 5}
	if decades > 4 {
		mults = []float64{1}
	}
	for d := math.Log10(lo); d <= math.Log10(hi)+1e-9; d++ {
		for _, m := range mults {
			v := m * math.Pow(10, math.Round(d))
			if v <= hi*(1+1e-9) {
				out = append(out, tick{v, strconv.FormatFloat(v, 'g', -1, 64)})
			}
		}
	}
	return out
}

// frame draws a plot area with grid lines, tick labels and axis labels.
func (s *svg) frame(x, y scale, xt, yt []tick, xlabel, ylabel string) {
	top, bottom := min(y.a, y.b), max(y.a, y.b)
	left, right := min(x.a, x.b), max(x.a, x.b)
	for _, t := range yt {
		py := y.px(t.v)
		s.line(left, py, right, py, `stroke="#dddddd"`)
		s.text(left-5, py+4, "end", `fill="#333333"`, t.label)
	}
	for _, t := range xt {
		px := x.px(t.v)
		s.line(px, top, px, bottom, `stroke="#eeeeee"`)
		s.text(px, bottom+15, "middle", `fill="#333333"`, t.label)
	}
	s.rect(left, top, right-left, bottom-top, `fill="none" stroke="#666666"`)
	if xlabel != "" {
		s.text((left+right)/2, bottom+31, "middle", "", xlabel)
	}
	if ylabel != "" {
		s.vtext(left-40, (top+bottom)/2, ylabel)
	}
}

// palette holds the colours of series in order; red is kept for the
// watched backend.
var palette = []string{
	"#3b75af", "#ef8a2f", "#4f9e4a", "#8f6bb8", "#3fa5a0",
	"#d9b52c", "#8c6046", "#d37fb5", "#9a9a9a", "#9cc3e6", "#a3a84a",
	"#1f3f6e", "#b35806", "#1b7837", "#762a83",
}

const watchedColor = "#d0312d"

// legend draws entries left to right from (x, y), wrapping at maxX, each a
// swatch (a filled square, or a line sample with the given dash) and a
// label; it returns the y of the last row.
func (s *svg) legend(x, y, maxX float64, labels, colors, dashes []string, lines bool) float64 {
	cx := x
	for i, l := range labels {
		w := 22 + 7*float64(len([]rune(l))) + 14
		if cx+w > maxX && cx > x {
			cx, y = x, y+18
		}
		if lines {
			dash := ""
			if i < len(dashes) {
				dash = dashes[i]
			}
			s.line(cx, y-4, cx+18, y-4, fmt.Sprintf(`stroke="%s" stroke-width="2.5"%s`, colors[i], dashAttr(dash)))
		} else {
			s.rect(cx, y-11, 14, 10, fmt.Sprintf(`fill="%s"`, colors[i]))
		}
		s.text(cx+22, y, "start", "", l)
		cx += w
	}
	return y
}

func dashAttr(d string) string {
	if d == "" {
		return ""
	}
	return ` stroke-dasharray="` + d + `"`
}
