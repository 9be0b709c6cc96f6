package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
)

// FastestFirst's section: its cost depends on the latencies it is fed, so
// it is timed under the constant latency of the feedback family, a
// lognormal and a bimodal one (families feedback, feedback-lognormal,
// feedback-bimodal), beside kratos's p2c, and over the first 20,000 picks
// of fresh pickers (the Warmup benchmarks).

// latencySection is the heading the section starts with; -only fastest
// replaces the text from it to the next heading of its level.
const latencySection = "## FastestFirst under real latencies"

// dists are the latency distributions of the section, each with its
// family.
var dists = []struct{ name, family string }{
	{"constant 1 ms", "feedback"},
	{"lognormal", "feedback-lognormal"},
	{"bimodal", "feedback-bimodal"},
}

// latencyTargets are the section's targets.
var latencyTargets = []target{
	{
		"FastestFirst, Pick plus report, lognormal latencies: ≤ 1.0× kratos p2c from 10 peers on, serial and parallel",
		ratioTarget("feedback-lognormal", "lbgo.FastestFirst", "feedback-lognormal", "kratos.p2c", 1.0, sizes[1:], modes, false),
		"",
	},
	{
		"FastestFirst, Pick plus report, bimodal latencies: ≤ 1.0× kratos p2c from 10 peers on, serial and parallel",
		ratioTarget("feedback-bimodal", "lbgo.FastestFirst", "feedback-bimodal", "kratos.p2c", 1.0, sizes[1:], modes, false),
		"",
	},
	{
		"FastestFirst, first 20,000 picks of a fresh picker, lognormal latencies: ≤ 1.0× kratos p2c's at every size",
		warmupTarget("lbgo.FastestFirst", "kratos.p2c", 1.0),
		"",
	},
	{
		"FastestFirst under lognormal and bimodal latencies: 0 allocs",
		zeroAllocs2([]string{"feedback-lognormal", "feedback-bimodal"}, "lbgo.FastestFirst"),
		"",
	},
}

func warmupKey(impl, n string) string { return fmt.Sprintf("Warmup/%s/peers=%s", impl, n) }

// warmupTarget checks the warm-up time of impl against other's, at every
// size.
func warmupTarget(impl, other string, limit float64) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		x, at := largest(sizes, []string{"serial"}, func(n, _ string) float64 {
			return r.ratio(warmupKey(impl, n), warmupKey(other, n))
		})
		if math.IsInf(x, -1) {
			return false, "not measured"
		}
		ok := x <= limit
		verb := "under"
		if !ok {
			verb = "over"
		}
		return ok, fmt.Sprintf("worst %s at %s: %s the %s limit by %.0f%%", fmtRatio(x), at, verb, fmtRatio(limit), math.Abs(x/limit-1)*100)
	}
}

// zeroAllocs2 is zeroAllocs over several families.
func zeroAllocs2(families []string, impls ...string) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		for _, f := range families {
			if ok, msg := zeroAllocs(f, impls...)(r); !ok {
				return false, f + ": " + msg
			}
		}
		return true, "0 allocs/op everywhere"
	}
}

// writeLatency writes the section; note, if not empty, says how its
// numbers were measured when that differs from the rest of the file.
func (r *results) writeLatency(w io.Writer, note string) {
	if _, ok := r.data[key("feedback-lognormal", "lbgo.FastestFirst", "10", "serial")]; !ok {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n", latencySection)
	fmt.Fprintf(w, "FastestFirst learns from every report, so what it costs depends on the latencies reported. Each iteration picks a peer and reports a success with the next latency of a fixed list: the constant 1 ms of the feedback table above, timed again in the same rounds as the others; a lognormal of median 1 ms and σ 1.2 (heavy-tailed, as real service times are: 4096 values drawn once from a seeded generator); a bimodal alternation of 100 µs and 20 ms (a cache hit and a miss). P2CPeakEWMA keeps the same peak EWMA. kratos.p2c measures its own latencies, so what it is fed changes nothing for it; it runs in every workload anyway, so that each ratio is taken within one round.\n")
	if note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	r.writeTargets(w, latencyTargets)

	impls := []string{"lbgo.FastestFirst", "lbgo.P2CPeakEWMA", "kratos.p2c"}
	fmt.Fprintf(w, "\n### Pick plus report by latency distribution\n\nns/op (allocs/op):\n\n| peers | mode |")
	for _, im := range impls {
		for _, d := range dists {
			fmt.Fprintf(w, " %s, %s |", im, d.name)
		}
	}
	fmt.Fprintf(w, "\n|---:|---|%s\n", strings.Repeat("---:|", len(impls)*len(dists)))
	for _, n := range sizes {
		for _, m := range modes {
			fmt.Fprintf(w, "| %s | %s |", n, m)
			for _, im := range impls {
				for _, d := range dists {
					k := key(d.family, im, n, m)
					fmt.Fprintf(w, " %s (%s) |", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
				}
			}
			fmt.Fprintln(w)
		}
	}
	for _, ours := range impls[:2] {
		fmt.Fprintf(w, "\n%s's time as a multiple of kratos.p2c's in the same workload (below 1: faster):\n\n| peers | mode |", ours)
		for _, d := range dists {
			fmt.Fprintf(w, " %s |", d.name)
		}
		fmt.Fprintf(w, "\n|---:|---|%s\n", strings.Repeat("---:|", len(dists)))
		for _, n := range sizes {
			for _, m := range modes {
				fmt.Fprintf(w, "| %s | %s |", n, m)
				for _, d := range dists {
					fmt.Fprintf(w, " %s |", fmtRatio(r.ratio(key(d.family, ours, n, m), key(d.family, "kratos.p2c", n, m))))
				}
				fmt.Fprintln(w)
			}
		}
	}

	fmt.Fprintf(w, "\n### The first 20,000 picks of a fresh picker\n\nPick plus report, serially, lognormal latencies, over the first 20,000 picks of a picker built just before (untimed), where a latency-aware picker meets each peer's first report: ns per pick (allocs per pick), and FastestFirst's time as a multiple of kratos.p2c's.\n\n| peers |")
	for _, im := range impls {
		fmt.Fprintf(w, " %s |", im)
	}
	fmt.Fprintf(w, " lbgo.FastestFirst ÷ kratos.p2c |\n|---:|%s---:|\n", strings.Repeat("---:|", len(impls)))
	for _, n := range sizes {
		fmt.Fprintf(w, "| %s |", n)
		for _, im := range impls {
			k := warmupKey(im, n)
			fmt.Fprintf(w, " %s (%s) |", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
		}
		fmt.Fprintf(w, " %s |\n", fmtRatio(r.ratio(warmupKey("lbgo.FastestFirst", n), warmupKey("kratos.p2c", n))))
	}
	fmt.Fprint(w, latencyNotes)
}

// latencyNotes explains the numbers of the section; it states no
// measurement.
const latencyNotes = `
Why the cost no longer depends on the latencies: above 32 peers a report
whose estimate leaves its band reweighs that one peer against its list's
last recompute, O(1) under the lock, and the whole list (O(n), the
fastest estimate, the scale of every weight and the draw table) is
recomputed only once every n such reweighs, or at one report in n drawn at
random, so a report costs O(1) amortized however often estimates move, and
a fresh picker's warm-up O(n) in all. Up to 32 peers the pick is an exact
scan, O(n) anyway, and a recompute when an estimate leaves its band adds
three more passes over at most 32 peers.
`

// replaceSection replaces, in the file at path, the section that starts
// with heading (up to the next heading of its level) by text, or inserts
// text before the line that starts with before if the file has no such
// section, or appends it.
func replaceSection(path, heading, before, text string) error {
	old, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	s := string(old)
	if i := strings.Index(s, "\n"+heading+"\n"); i >= 0 {
		rest := s[i+1+len(heading):]
		end := len(s)
		if j := strings.Index(rest, "\n## "); j >= 0 {
			end = i + 1 + len(heading) + j
		}
		s = s[:i] + text + s[end:]
	} else if i := strings.Index(s, "\n"+before); i >= 0 {
		s = s[:i] + text + s[i:]
	} else {
		s += text
	}
	return os.WriteFile(path, []byte(s), 0o644)
}
