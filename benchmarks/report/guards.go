package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// The section on the guards: the root module's BenchmarkGuard<Name>
// benchmarks (panic mode and the ejection cap, and any other guard's),
// which run.sh's ONLY=guards runs. Each is named
// Guard<Name>/<picker>/peers=<n>/<mode>; the mode "plain" or "off" (no
// guard), or else the first mode seen, is the baseline every other mode of
// the same name, picker and size is divided by, round by round. Other
// names are listed as they are.

// guardsSection is the heading the section starts with; -only guards
// replaces the text from it to the next heading of its level.
const guardsSection = "## Guards: panic mode, the ejection cap and the others"

// guardKey is one benchmark of the section, split.
type guardKey struct {
	name, picker string
	peers        int
	mode         string
}

// parseGuardKey splits k, or reports false for a key not of the form.
func parseGuardKey(k string) (guardKey, bool) {
	parts := strings.Split(k, "/")
	if len(parts) != 4 || !strings.HasPrefix(parts[0], "Guard") || !strings.HasPrefix(parts[2], "peers=") {
		return guardKey{}, false
	}
	n, err := strconv.Atoi(strings.TrimPrefix(parts[2], "peers="))
	if err != nil {
		return guardKey{}, false
	}
	return guardKey{parts[0], parts[1], n, parts[3]}, true
}

func (g guardKey) String() string {
	return fmt.Sprintf("%s/%s/peers=%d/%s", g.name, g.picker, g.peers, g.mode)
}

// writeGuards writes the section, if the rounds have Guard benchmarks;
// note, if not empty, says how they were measured.
func (r *results) writeGuards(w io.Writer, note string) {
	type row struct {
		picker string
		peers  int
	}
	rows := map[string][]row{}     // by name, in first-seen order
	modes := map[string][]string{} // by name: the baseline first, then as seen
	seen := map[string]bool{}
	var names, other []string
	keys := make([]string, 0, len(r.data))
	for k := range r.data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		g, ok := parseGuardKey(k)
		if !ok {
			if strings.HasPrefix(k, "Guard") {
				other = append(other, k)
			}
			continue
		}
		if _, ok := rows[g.name]; !ok {
			names = append(names, g.name)
		}
		if !slices.Contains(modes[g.name], g.mode) {
			modes[g.name] = append(modes[g.name], g.mode)
		}
		rk := fmt.Sprintf("%s/%s/%d", g.name, g.picker, g.peers)
		if !seen[rk] {
			seen[rk] = true
			rows[g.name] = append(rows[g.name], row{g.picker, g.peers})
		}
	}
	if len(names) == 0 && len(other) == 0 {
		return
	}
	for _, name := range names {
		ms := modes[name]
		for _, base := range []string{"plain", "off"} {
			if i := slices.Index(ms, base); i > 0 {
				ms = append([]string{base}, slices.Delete(ms, i, i+1)...)
				break
			}
		}
		modes[name] = ms
	}
	fmt.Fprintf(w, "\n%s\n\nThe root module's BenchmarkGuard benchmarks (their doc comments say what each mode does): Pick+Done of each picker with a guard and without, at each size, in the same rounds. ns/op (allocs/op) and, after ×, the median over the rounds of the mode's time over the baseline's (the first column: the mode without the guard, plain or off) at the same picker and size in the same round.\n", guardsSection)
	if note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	cell := func(k string) string {
		if _, ok := r.data[k]; !ok {
			return "–"
		}
		return fmt.Sprintf("%s (%s)", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
	}
	for _, name := range names {
		ms := modes[name]
		fmt.Fprintf(w, "\n### Benchmark%s\n\n| picker | peers |", name)
		for i, m := range ms {
			if i == 0 {
				fmt.Fprintf(w, " %s |", m)
			} else {
				fmt.Fprintf(w, " %s | × %s |", m, ms[0])
			}
		}
		fmt.Fprintf(w, "\n|---|---:|%s\n", strings.Repeat("---:|", 2*len(ms)-1))
		rs := rows[name]
		slices.SortStableFunc(rs, func(a, b row) int {
			if a.picker != b.picker {
				return 0 // keep the benchmark's order of pickers
			}
			return a.peers - b.peers
		})
		for _, rw := range rs {
			fmt.Fprintf(w, "| %s | %d |", rw.picker, rw.peers)
			base := guardKey{name, rw.picker, rw.peers, ms[0]}.String()
			for i, m := range ms {
				k := guardKey{name, rw.picker, rw.peers, m}.String()
				if i == 0 {
					fmt.Fprintf(w, " %s |", cell(k))
					continue
				}
				ratio := "–"
				if x := r.ratio(k, base); !math.IsNaN(x) {
					ratio = fmtRatio(x)
				}
				fmt.Fprintf(w, " %s | %s |", cell(k), ratio)
			}
			fmt.Fprintln(w)
		}
	}
	if len(other) > 0 {
		fmt.Fprintf(w, "\nOther guard benchmarks, ns/op (allocs/op):\n\n")
		for _, k := range other {
			fmt.Fprintf(w, "- %s: %s\n", k, cell(k))
		}
	}
}
