// Command report turns the rounds of the comparison benchmarks into
// BENCHMARKS.md: the median of each benchmark over the rounds, the ratio of
// each of the library's pickers to every other implementation of its family
// and to the floor, and the performance targets, met or missed.
//
// Every ratio is the median over the rounds of the ratio within one round,
// so that both sides of it ran minutes, not hours, apart, under the same
// load. run.sh builds the benchmark binary once, runs it once per round and
// passes the outputs here, one file per round:
//
//	report -out BENCHMARKS.md -cmd 'sh benchmarks/run.sh' -cpu 'AMD EPYC' -cores 2 -go go1.26.8 -date 2026-11-29T22:00Z round1.txt round2.txt ...
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// A sample is one benchmark's result in one round.
type sample struct {
	ns, allocs, bytes float64
	pick              float64 // ns/pick, where the benchmark reports it
}

// results holds every round: results[key][round].
type results struct {
	rounds int
	procs  string // GOMAXPROCS, from the name suffix
	data   map[string]map[int]sample
	cores  *results // the rounds run with -cpu 1,N, keyed NAME@PROCS
}

// parseProcs is parse for the rounds run with -cpu 1,N: each result is
// keyed by its name and its GOMAXPROCS, NAME@PROCS.
func (r *results) parseProcs(round int, in io.Reader) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return fmt.Errorf("%q: %w", sc.Text(), err)
		}
		procs := m[2]
		if procs == "" {
			procs = "1" // go test adds no suffix for GOMAXPROCS 1
		}
		k := m[1] + "@" + procs
		if r.data[k] == nil {
			r.data[k] = map[int]sample{}
		}
		r.data[k][round] = sample{ns: ns}
	}
	return sc.Err()
}

// writeCores writes the parallel picks at GOMAXPROCS 1 and N.
func (r *results) writeCores(w io.Writer) {
	c := r.cores
	if c == nil || c.rounds == 0 {
		return
	}
	var procs []string
	seen := map[string]bool{}
	var names []string
	for k := range c.data {
		name, p, _ := strings.Cut(k, "@")
		if !seen[p] {
			seen[p] = true
			procs = append(procs, p)
		}
		if !seen["name:"+name] {
			seen["name:"+name] = true
			names = append(names, name)
		}
	}
	sort.Strings(names)
	sort.Slice(procs, func(i, j int) bool { a, _ := strconv.Atoi(procs[i]); b, _ := strconv.Atoi(procs[j]); return a < b })
	if len(procs) < 2 {
		return
	}
	lo, hi := procs[0], procs[len(procs)-1]
	fmt.Fprintf(w, "\n## Cores: GOMAXPROCS %s against %s\n\n", lo, hi)
	fmt.Fprintf(w, "The parallel picks again, with b.RunParallel on %s core and on %s (the machine's), medians of %d rounds. ns/op is wall time per pick over all goroutines, so a picker that shares nothing between cores halves it on two; the gain is the first column over the second (2.00× is perfect scaling on two cores). On a shared 2-core machine the second core is not always free, so read the gain as a lower bound.\n\n", lo, hi, c.rounds)
	fmt.Fprintf(w, "| benchmark | ns/op, %s | ns/op, %s | gain |\n|---|---:|---:|---:|\n", lo, hi)
	for _, name := range names {
		a, b := c.ns(name+"@"+lo), c.ns(name+"@"+hi)
		if a == 0 || b == 0 {
			continue
		}
		label := strings.TrimPrefix(strings.TrimSuffix(name, "/parallel"), "Compare/")
		fmt.Fprintf(w, "| %s | %s | %s | %.2f× |\n", label, fmtNs(a), fmtNs(b), a/b)
	}
}

var benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-(\d+))?\s+\d+\s+([0-9.]+) ns/op(?:\s+([0-9.]+) B/op)?(?:\s+([0-9.]+) allocs/op)?`)

// metricLine finds a line's metrics after ns/op wherever they stand: a
// benchmark's own metrics (b.ReportMetric) come between ns/op and B/op.
var metricLine = regexp.MustCompile(`\s([0-9.]+) (B/op|allocs/op|ns/pick)\b`)

func (r *results) parse(round int, in io.Reader) error {
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		ns, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			return fmt.Errorf("%q: %w", sc.Text(), err)
		}
		var allocs, bytes, pick float64
		for _, f := range metricLine.FindAllStringSubmatch(sc.Text(), -1) {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return fmt.Errorf("%q: %w", sc.Text(), err)
			}
			switch f[2] {
			case "B/op":
				bytes = v
			case "allocs/op":
				allocs = v
			default:
				pick = v
			}
		}
		if m[2] != "" {
			r.procs = m[2]
		}
		if r.data[m[1]] == nil {
			r.data[m[1]] = map[int]sample{}
		}
		r.data[m[1]][round] = sample{ns, allocs, bytes, pick}
	}
	return sc.Err()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// median returns the median over the rounds of one measure of a
// benchmark; ns, bytes and allocs are its three measures.
func (r *results) median(key string, measure func(sample) float64) float64 {
	var xs []float64
	for _, s := range r.data[key] {
		xs = append(xs, measure(s))
	}
	return median(xs)
}

func (r *results) ns(key string) float64 {
	return r.median(key, func(s sample) float64 { return s.ns })
}

func (r *results) bytes(key string) float64 {
	return r.median(key, func(s sample) float64 { return s.bytes })
}

func (r *results) allocs(key string) float64 {
	return r.median(key, func(s sample) float64 { return s.allocs })
}

// writeRingBuild writes the consistent-hash ring build times and memory,
// if the rounds have them.
func (r *results) writeRingBuild(w io.Writer) {
	impls := []string{"lbgo.ConsistentHash", "kitex.consist"}
	rk := func(impl, n string) string { return fmt.Sprintf("RingBuild/%s/peers=%s", impl, n) }
	if _, ok := r.data[rk(impls[0], "10")]; !ok {
		return
	}
	fmt.Fprintf(w, "\n## Consistent hashing: building the ring\n\nThe time to build a ring of 160 points per unit of weight over n peers (weights i%%10+1, so about 880 points a peer), and the memory allocated for it. ConsistentHash rebuilds its ring on every change of the peers or their weights (here: one peer's weight, changed back and forth), holding 8 bytes a point; kitex builds one for each discovery result it has not cached, holding 16 bytes a virtual node.\n\n| peers |")
	for _, im := range impls {
		fmt.Fprintf(w, " %s time | %s memory |", im, im)
	}
	fmt.Fprintf(w, "\n|---:|---:|---:|---:|---:|\n")
	for _, n := range sizes {
		fmt.Fprintf(w, "| %s |", n)
		for _, im := range impls {
			fmt.Fprintf(w, " %s | %s |", fmtNs(r.ns(rk(im, n))), fmtBytes(r.bytes(rk(im, n))))
		}
		fmt.Fprintln(w)
	}
}

func fmtBytes(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 1<<20:
		return fmt.Sprintf("%.1f MiB", x/(1<<20))
	case x >= 1<<10:
		return fmt.Sprintf("%.0f KiB", x/(1<<10))
	default:
		return fmt.Sprintf("%.0f B", x)
	}
}

// ratio returns the median over the rounds of a's time over b's in the same
// round.
func (r *results) ratio(a, b string) float64 {
	var xs []float64
	for round, sa := range r.data[a] {
		if sb, ok := r.data[b][round]; ok && sb.ns > 0 {
			xs = append(xs, sa.ns/sb.ns)
		}
	}
	return median(xs)
}

var (
	sizes = []string{"2", "10", "100", "1000", "10000"}
	modes = []string{"serial", "parallel"}
)

func key(family, impl, n, mode string) string {
	return fmt.Sprintf("Compare/%s/%s/peers=%s/%s", family, impl, n, mode)
}

func floorKey(floor, mode string) string { return fmt.Sprintf("Floor/%s/%s", floor, mode) }

// family describes one table of the report.
type family struct {
	name, title, about string
	floor              string // the floor its ratios are taken to
}

var familyDocs = []family{
	{"smooth", "Smooth weighted round robin, static weights", "nginx's smooth order. lbgo.SmoothWRR serves it from its precomputed cycle; kitex.WRR from its precomputed table (atomic counter and an RWMutex read lock per pick); smallnest.SW runs nginx's O(n) scan (serial: bare, as it is not safe for concurrent use; parallel: behind a mutex); kratos.wrr runs the scan over a map under a mutex and calls its done function.", "atomic.Add"},
	{"smooth-scan", "Smooth weighted round robin, weights in motion", "lbgo.SmoothWRR held in nginx's exact scan: peer 0 has a max_conns, never reached, which keeps the cycle closed as one failing or recovering peer would; from 16 peers on, where d + k <= n/2, the scan runs over the healthy peers grouped by weight, exactly as nginx's, in O(d + k + log n) for d distinct weights and k peers out of the groups (here d = min(n, 10), k = 1). smallnest.SW is the bare O(n) scan with no lock, no eligibility checks and no effective-weight recovery: the cost of nginx's scan itself.", "atomic.Add"},
	{"classic", "Classic (nginx 1.2.0) weighted round robin, static weights", "lbgo.ClassicWRR serves nginx 1.2.0's order from its precomputed cycle when it can. kitex.WRR is the smooth table, the fastest weighted round robin in the set; kitex.IWRR is kitex's interleaved WRR (queues under a mutex); smallnest.RRW is LVS's gcd round robin (parallel: behind a mutex).", "atomic.Add"},
	{"roundrobin", "Round robin", "lbgo.RoundRobin ignores weights; kitex.RR is kitex's padded-counter round robin, which its weighted balancer uses when all weights are equal (as here).", "atomic.Add"},
	{"random", "Weighted random", "lbgo.RandomWeighted draws from a Vose alias table; kitex.alias is kitex's alias method (two draws, a float threshold); kitex.random its linear scan; mroth.v2 prefix sums and a binary search.", "rand.Uint64"},
	{"feedback", "Pickers that learn from outcomes: Pick plus the report", "Each iteration picks a peer and reports a success with a latency. lbgo.RandomTwo is nginx's random two (least_conn): two weighted draws, the one with fewer attempts in flight per unit of weight. kratos.p2c is kratos's power of two choices over its EWMA nodes, with its done call.", "atomic.Add"},
	{"consistent", "Consistent hashing", "Each pick hashes the next of 4096 keys and finds its point on a ring of 160 points per unit of weight (nginx's ketama; kitex's VirtualFactor set to 160 so that both rings have the same size). lbgo.ConsistentHash is nginx's hash KEY consistent: CRC-32 of the key, an index on its top bits and a short binary search over the points, the eligibility checks and the in-flight count, lock-free for a first attempt to a healthy peer. kitex.consist is kitex's NewConsistBalancer: maphash of the key and a sort.Search over the virtual nodes, on one picker built beforehand (kitex gets one from its cache and recycles it per request). The ring build (the RingBuild benchmarks, not in this table) is timed apart.", "atomic.Add"},
}

func (r *results) impls(family string) []string {
	var out []string
	seen := map[string]bool{}
	prefix := "Compare/" + family + "/"
	for k := range r.data {
		if rest, ok := strings.CutPrefix(k, prefix); ok {
			impl, _, _ := strings.Cut(rest, "/")
			if !seen[impl] {
				seen[impl] = true
				out = append(out, impl)
			}
		}
	}
	// The library's pickers first, then the others, each by name.
	slices.SortFunc(out, func(a, b string) int {
		oa, ob := strings.HasPrefix(a, "lbgo."), strings.HasPrefix(b, "lbgo.")
		if oa != ob {
			if oa {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	return out
}

func fmtNs(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 1e6:
		return fmt.Sprintf("%.2f ms", x/1e6)
	case x >= 1e4:
		return fmt.Sprintf("%.1f µs", x/1e3)
	case x >= 100:
		return fmt.Sprintf("%.0f", x)
	default:
		return fmt.Sprintf("%.1f", x)
	}
}

func fmtRatio(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x >= 100:
		return fmt.Sprintf("%.0f×", x)
	case x >= 10:
		return fmt.Sprintf("%.1f×", x)
	case x >= 0.1:
		return fmt.Sprintf("%.2f×", x)
	default:
		return strconv.FormatFloat(x, 'g', 2, 64) + "×"
	}
}

func fmtAllocs(x float64) string {
	if math.IsNaN(x) {
		return "–"
	}
	return strconv.FormatFloat(x, 'f', -1, 64)
}

func (r *results) writeFamily(w io.Writer, f family) {
	impls := r.impls(f.name)
	if len(impls) == 0 {
		return
	}
	fmt.Fprintf(w, "\n## %s\n\n%s\n\n", f.title, f.about)
	fmt.Fprintf(w, "ns/op (allocs/op):\n\n| peers | mode |")
	for _, im := range impls {
		fmt.Fprintf(w, " %s |", im)
	}
	fmt.Fprintf(w, "\n|---:|---|%s\n", strings.Repeat("---:|", len(impls)))
	for _, n := range sizes {
		for _, m := range modes {
			fmt.Fprintf(w, "| %s | %s |", n, m)
			for _, im := range impls {
				k := key(f.name, im, n, m)
				fmt.Fprintf(w, " %s (%s) |", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
			}
			fmt.Fprintln(w)
		}
	}
	for _, ours := range impls {
		if !strings.HasPrefix(ours, "lbgo.") {
			continue
		}
		var others []string
		for _, im := range impls {
			if !strings.HasPrefix(im, "lbgo.") {
				others = append(others, im)
			}
		}
		fmt.Fprintf(w, "\n%s's time as a multiple of the others' (below 1: faster) and of the %s floor:\n\n| peers | mode |", ours, f.floor)
		for _, o := range others {
			fmt.Fprintf(w, " ÷ %s |", o)
		}
		fmt.Fprintf(w, " ÷ %s |\n|---:|---|%s\n", f.floor, strings.Repeat("---:|", len(others)+1))
		for _, n := range sizes {
			for _, m := range modes {
				k := key(f.name, ours, n, m)
				fmt.Fprintf(w, "| %s | %s |", n, m)
				for _, o := range others {
					fmt.Fprintf(w, " %s |", fmtRatio(r.ratio(k, key(f.name, o, n, m))))
				}
				fmt.Fprintf(w, " %s |\n", fmtRatio(r.ratio(k, floorKey(f.floor, m))))
			}
		}
	}
}

// A target is one of the performance goals, checked on the medians.
type target struct {
	text string
	// check returns whether the target is met and a sentence with the
	// deciding number and its margin.
	check func(r *results) (bool, string)
	// why explains a miss: the cause measured or known from the code.
	why string
}

// worst returns the largest median ratio of a to b over the sizes and
// modes given, and where it occurs.
func (r *results) worst(fa, a, fb, b string, ns, ms []string, floor bool) (float64, string) {
	return largest(ns, ms, func(n, m string) float64 {
		if floor {
			return r.ratio(key(fa, a, n, m), floorKey(b, m))
		}
		return r.ratio(key(fa, a, n, m), key(fb, b, n, m))
	})
}

// largest returns the largest of f(n, m) over the sizes and modes given,
// leaving out the unmeasured (NaN), and where it occurs; -Inf if none was
// measured.
func largest(ns, ms []string, f func(n, m string) float64) (float64, string) {
	best, at := math.Inf(-1), ""
	for _, n := range ns {
		for _, m := range ms {
			if x := f(n, m); !math.IsNaN(x) && x > best {
				best, at = x, fmt.Sprintf("%s peers, %s", n, m)
			}
		}
	}
	return best, at
}

func ratioTarget(fa, a, fb, b string, limit float64, ns, ms []string, floor bool) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		x, at := r.worst(fa, a, fb, b, ns, ms, floor)
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

func zeroAllocs(family string, impls ...string) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		worst, at := 0.0, ""
		for _, im := range impls {
			for _, n := range sizes {
				for _, m := range modes {
					if a := r.allocs(key(family, im, n, m)); a > worst {
						worst, at = a, fmt.Sprintf("%s, %s peers, %s", im, n, m)
					}
				}
			}
		}
		if worst == 0 {
			return true, "0 allocs/op everywhere"
		}
		return false, fmt.Sprintf("%s allocs/op at %s", fmtAllocs(worst), at)
	}
}

// growth checks that going from 1000 to 10000 peers costs well under the
// tenfold an O(n) pick pays: at most limit times.
func growth(family, impl, linear string, limit float64) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		worst, at := math.Inf(-1), ""
		for _, m := range modes {
			x := r.ratio(key(family, impl, "10000", m), key(family, impl, "1000", m))
			if x > worst {
				worst, at = x, m
			}
		}
		vs := r.ratio(key(family, impl, "10000", "serial"), key(family, linear, "10000", "serial"))
		ok := worst <= limit
		return ok, fmt.Sprintf("10000 peers cost %s what 1000 do (%s; O(n) is about 10×, the limit here %s); at 10000 peers %s the time of the O(n) %s", fmtRatio(worst), at, fmtRatio(limit), fmtRatio(vs), linear)
	}
}

// flat checks that a picker costs about the same at every size: its time at
// any size is at most limit times its time at 10 peers.
func flat(family, impl string, limit float64) func(*results) (bool, string) {
	return func(r *results) (bool, string) {
		worst, at := largest(sizes, modes, func(n, m string) float64 {
			return r.ratio(key(family, impl, n, m), key(family, impl, "10", m))
		})
		ok := worst <= limit
		return ok, fmt.Sprintf("worst %s its time at 10 peers, at %s (limit %s)", fmtRatio(worst), at, fmtRatio(limit))
	}
}

var small = []string{"2", "10"}

var targets = []target{
	{
		"SmoothWRR, static weights: ≤ 0.5× kitex's table, serial and parallel, at every size",
		ratioTarget("smooth", "lbgo.SmoothWRR", "smooth", "kitex.WRR", 0.5, sizes, modes, false),
		"kitex's serial pick is an atomic add, a 64-bit division and an uncontended RWMutex read lock and unlock (two more atomic adds); SmoothWRR's is the atomic add on the shared counter, two multiplications, two dependent loads and the atomic add on the chosen peer's in-flight count, which the Picker contract requires (Pick counts attempts in flight until Done). Two locked adds in a dependent chain against three leave the two about level serially; half of kitex would be less than one atomic add plus a table read. In parallel SmoothWRR is ahead: both move the shared counter's cache line between the cores on every pick, kitex also its RWMutex's reader count, written twice a pick, where SmoothWRR moves the chosen peer's line once, and keeps its counter alone on its line.",
	},
	{
		"SmoothWRR, static weights: ≤ 1.6× a bare atomic add, serial and parallel",
		ratioTarget("smooth", "lbgo.SmoothWRR", "", "atomic.Add", 1.6, sizes, modes, true),
		"the in-flight increment on the chosen peer is a second atomic add, so the floor of this pick is two atomic adds, 2×, before the table read; it can only go if the in-flight count stops being a counter on the peer (see the notes below).",
	},
	{
		"SmoothWRR, static weights: 0 allocs",
		zeroAllocs("smooth", "lbgo.SmoothWRR"),
		"",
	},
	{
		"SmoothWRR, weights in motion: no worse than nginx's O(n) scan up to 64 peers",
		ratioTarget("smooth-scan", "lbgo.SmoothWRR", "smooth-scan", "smallnest.SW", 1.0, small, modes, false),
		"serially the bare scan takes no lock, counts nothing in flight and checks no eligibility; at 2 and 10 peers SmoothWRR's fixed cost (lock, unlock and the in-flight add: three atomic operations, and the call through the slow path) is most of its pick, where the bare scan's loop is a few nanoseconds. The per-peer cost is not the issue: from 16 peers on, the grouped scan is faster than the bare one (see the 100-peer row).",
	},
	{
		"SmoothWRR, weights in motion: better than O(n) for thousands of peers",
		growth("smooth-scan", "lbgo.SmoothWRR", "smallnest.SW", 3),
		"the grouped scan costs O(d + k + log n); it grows with n only through the heap and the cache misses of a larger list.",
	},
	{
		"ClassicWRR, static weights: served from a precomputed cycle (flat cost at every size)",
		flat("classic", "lbgo.ClassicWRR", 3),
		"the pick is the cycle's: the shared counter's atomic add, a table read and the in-flight add; a larger list only adds cache misses on the chosen peer's line.",
	},
	{
		"RoundRobin: ≤ 1.3× a bare atomic add, serial and parallel",
		ratioTarget("roundrobin", "lbgo.RoundRobin", "", "atomic.Add", 1.3, sizes, modes, true),
		"the pick is the shared counter's atomic add plus the chosen peer's in-flight atomic add (the Picker contract) and the fast eligibility reads, so its floor is two atomic adds; in parallel the peer's cache line also moves between the cores.",
	},
	{
		"RandomWeighted: ≤ 0.7× kitex's alias method, serial, at every size",
		ratioTarget("random", "lbgo.RandomWeighted", "random", "kitex.alias", 0.7, sizes, []string{"serial"}, false),
		"both now draw from the runtime's per-thread wyrand (kitex twice, through bytedance/gopkg's link to runtime.cheaprand; RandomWeighted once, one call to runtime.cheaprand64, then the alias column or its alias chosen without a branch); RandomWeighted then pays the in-flight atomic add on the chosen peer, which kitex does not count, and that add is about half of kitex's whole pick. The add is also the one write the pick shares between cores: with few peers the cores write the same peer lines, so the parallel rows do not halve as kitex's do.",
	},
	{
		"LeastConn, Pick plus report: ≤ 0.2× kratos p2c",
		ratioTarget("feedback", "lbgo.LeastConn", "feedback", "kratos.p2c", 0.2, sizes, modes, false),
		"LeastConn keeps nginx's exact order through its index by load (least_conn_index.go): each pick steps the tied peers of every weight under the lock, O(d + log n) with d = 10 weights here (every peer idle between picks, so all tie), and each report takes the lock to move its peer, where kratos's p2c looks at two peers without a lock: RandomTwo is the lock-free alternative.",
	},
	{
		"P2CPeakEWMA, Pick plus report: ≤ 0.5× kratos p2c",
		ratioTarget("feedback", "lbgo.P2CPeakEWMA", "feedback", "kratos.p2c", 0.5, sizes, modes, false),
		"the pick reads no clock and takes no lock, but the report must read the clock once (tens of nanoseconds here, the largest single cost) to stamp the sample, and the two costs compare through one exponential; kratos reads the clock too, and allocates.",
	},
	{
		"RandomTwo, Pick plus report: ≤ 0.3× kratos p2c",
		ratioTarget("feedback", "lbgo.RandomTwo", "feedback", "kratos.p2c", 0.3, sizes, modes, false),
		"two alias-table draws, two in-flight reads and the in-flight add; a success on a healthy peer is one atomic decrement. At 10000 peers the two peers' cache lines miss.",
	},
	{
		"FastestFirst, Pick plus report: ≤ 1.0× kratos p2c from 10 peers on",
		ratioTarget("feedback", "lbgo.FastestFirst", "feedback", "kratos.p2c", 1.0, sizes[1:], modes, false),
		"up to 32 peers FastestFirst scans every peer under its lock, as nginx's least_conn, so that the smooth order among tied peers holds; above, the pick is the least expected delay among three peers drawn by derived weight, lock-free, and a successful report takes no lock while its estimate stays in its band; one that leaves it reweighs that peer alone under the lock, and the O(n) recompute waits for one such report in n.",
	},
	{
		"FastestFirst, Pick plus report: ≤ 2× its time at 10 peers at every size",
		flat("feedback", "lbgo.FastestFirst", 2),
		"the sampled pick costs the same at any size but for cache misses on the three peers it reads.",
	},
	{
		"Feedback pickers: 0 allocs",
		zeroAllocs("feedback", "lbgo.LeastConn", "lbgo.P2CPeakEWMA", "lbgo.FastestFirst", "lbgo.RandomTwo"),
		"",
	},
	{
		"ConsistentHash: ≤ 1.0× kitex's consistent hash per pick, serial and parallel, at every size",
		ratioTarget("consistent", "lbgo.ConsistentHash", "consistent", "kitex.consist", 1.0, sizes, modes, false),
		"a first attempt to a healthy peer is lock-free: CRC-32 of the key, one read of the top-bits index, a short binary search, the eligibility reads and the in-flight add, which kitex does not count; at 10000 peers the point, the index and the peer are cache misses.",
	},
	{
		"ConsistentHash: 0 allocs",
		zeroAllocs("consistent", "lbgo.ConsistentHash"),
		"",
	},
}

type meta struct {
	cmd, cpu, cores, goVersion, date, benchtime string
}

func (r *results) write(w io.Writer, m meta) {
	fmt.Fprintf(w, "# Benchmarks\n\n")
	fmt.Fprintf(w, "The library's pickers side by side with the fastest Go load balancers on the same workloads, and with the physical floor of a pick. Every number below comes from one run of this command, from a clean clone of the repository (Go and the Go module proxy are all it needs):\n\n")
	fmt.Fprintf(w, "```sh\n%s\n```\n\n", m.cmd)
	fmt.Fprintf(w, "- Machine: %s, %s cores (GOMAXPROCS %s); a shared machine, so expect noise of 10–30%% between rounds.\n", m.cpu, m.cores, r.procs)
	fmt.Fprintf(w, "- Go: %s. Date: %s.\n", m.goVersion, m.date)
	fmt.Fprintf(w, "- Peers: n = 2, 10, 100, 1000, 10000, peer i with weight i%%10+1; all healthy. Versions: see benchmarks/go.mod (kitex v0.16.3, smallnest/weighted 36b780e, mroth/weightedrand/v2 v2.1.0, kratos/v2 v2.9.2).\n")
	fmt.Fprintf(w, "- Method: the benchmark binary is built once and run %d times (rounds), each round the whole suite with -benchtime %s. A time is the median over the rounds; a ratio is the median over the rounds of the ratio within one round. serial: one goroutine; parallel: b.RunParallel with GOMAXPROCS goroutines, ns/op of wall time per pick over all of them.\n", r.rounds, m.benchtime)

	fmt.Fprintf(w, "\n## Targets\n\n| target | result | margin |\n|---|---|---|\n")
	var missed []target
	for _, t := range targets {
		ok, msg := t.check(r)
		res := "**met**"
		if !ok {
			res = "**missed**"
			missed = append(missed, t)
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.text, res, msg)
	}
	if len(missed) > 0 {
		fmt.Fprintf(w, "\nWhy the missed ones are missed:\n\n")
		for _, t := range missed {
			if t.why != "" {
				fmt.Fprintf(w, "- %s: %s\n", t.text, t.why)
			}
		}
	}

	fmt.Fprintf(w, "\n## The floor\n\nA bare atomic add on one shared counter (what any pick that hands out one shared sequence pays; in parallel, the goroutines contend for its cache line) and a bare draw from math/rand/v2's per-thread generator (what a random pick pays; it shares nothing).\n\n| floor | serial ns/op | parallel ns/op |\n|---|---:|---:|\n")
	for _, f := range []string{"atomic.Add", "rand.Uint64"} {
		fmt.Fprintf(w, "| %s | %s | %s |\n", f, fmtNs(r.ns(floorKey(f, "serial"))), fmtNs(r.ns(floorKey(f, "parallel"))))
	}
	for _, f := range familyDocs {
		r.writeFamily(w, f)
	}
	r.writeRingBuild(w)
	r.writeLatency(w, "")
	r.writeLoad(w, "")
	r.writeProbe(w, "")
	r.writeCores(w)
	fmt.Fprint(w, contention)
	fmt.Fprint(w, notes)
}

// contention is the model of what more cores do; it states no measurement.
const contention = `
## Contention model: 16 to 64 cores

This machine has two cores, so the table above is all that can be measured
here. What more cores do follows from which cache lines a pick and a report
write. Reads of immutable snapshots (peer lists, cycles, alias tables,
rings) stay shared in every core's cache and cost nothing in coherence; a
written line must move to the writing core, about 50–100 ns within a socket
and 100–200 ns across sockets, and only one core can hold it for writing at
a time.

| picker | lines a pick writes | lines a report writes | prediction at 16–64 cores |
|---|---|---|---|
| SmoothWRR, ClassicWRR (cycle), RoundRobin | the shared counter; the chosen peer's slots word | the peer's slots word | the shared counter is written by every pick on every core, so throughput stays at about one pick per line transfer (5–20 M/s) however many cores; the peer lines spread over n peers. The atomic-add floor row shows the same limit. |
| RandomWeighted, Random, RandomTwo | the chosen peer's slots word (the generator is per thread) | the peer's slots word | no shared write: throughput grows with cores while n ≫ cores; with n close to the core count, picks collide on peer lines and each pays about one transfer. |
| P2CPeakEWMA | the chosen peer's slots word | the peer's slots word and its estimate (compare-and-swap) and stamp | as RandomTwo, plus two peer lines read that other cores write: about two coherence misses a pick at high core counts, still no shared line. |
| FastestFirst above 32 peers | the chosen peer's slots word (and its since stamp when it was idle) | the peer's slots word and estimate; an estimate out of its band takes the lock to reweigh its peer, and one such report in n (or one report in n at random) recomputes every weight and rewrites the table | as P2CPeakEWMA while estimates stay in their bands; when they move, the reports that take the lock serialize, O(1) each plus an O(n) recompute per n of them. |
| LeastConn; FastestFirst up to 32 peers; ConsistentHash retries and bounded loads | the picker's mutex (twice) and the current weights of tied peers | the peer's slots word; failures take the mutex (every report, with bounded loads) | every pick serializes on the mutex line: throughput flat at about 1/(critical section + transfer), falling under contention past a few cores. RandomTwo is the scalable alternative to LeastConn. |
| Hash, IPHash; ConsistentHash, first attempt to a healthy peer | the chosen peer's slots word | the peer's slots word | as RandomTwo; the round-robin fallback (no key, 20 fruitless steps) writes the shared counter of SmoothWRR's cycle while the weights are static (the SmoothWRR row), and takes the mutex otherwise. |
`

// notes explains the design behind the numbers; it states no measurement.
const notes = `
## Notes

- **The in-flight count.** Every picker of this library counts each attempt
  in flight on the chosen peer until its report (Peer.InFlight, nginx's
  conns), which max_conns, the load-aware pickers and the reports rely on;
  none of the other libraries here counts anything. It is an atomic add on
  the chosen peer's slots word (which also counts the picks, for
  Peer.Stats, in the same add), and which peer depends on the shared
  counter's value, so a cycle or round-robin pick is two atomic adds in
  sequence, and on x86 a locked instruction lets nothing after it start
  before it completes. That is why SmoothWRR, ClassicWRR and RoundRobin sit
  at several times the atomic-add floor, and why RandomWeighted pays an
  atomic add that kitex's alias method does not.
- **Memory.** SmoothWRR's and ClassicWRR's cycle holds W entries of 4 bytes
  and at most W checkpoint counts of 4 bytes, W <= 65536 (the cycle's bound): 512 KiB
  at most. SmoothWRR builds it in O(W·d) for d distinct weights, ClassicWRR
  in O(n + W·(n/4096+1)) by an incremental form of nginx 1.2.0's scan, once
  per change of the peer list. kitex's table holds Σw/gcd interface values
  of 16 bytes, with no bound. Past the cap both run the exact scan.
- **SmoothWRR's scan.** From 16 primaries on, the scan keeps the peers at
  full health in one heap per weight under a shared offset: a pick adds to
  every group at once, compares the d group leaders and the k other peers,
  and sinks the winner, so it costs O(d + k + log n) and gives nginx's picks
  and weights exactly (checked against a literal model of nginx's module).
- **LeastConn** keeps nginx's exact picks and weights through an index of
  its peers by load: one heap per weight ordered by in-flight count, the
  smooth step among the tied peers of one weight and count applied lazily,
  the peers failed or recovering scanned one by one; a pick costs
  O(d + k + log n) under the lock, and a report takes the lock to move its
  peer (O(log n)). RandomTwo is its O(1), lock-free alternative.
- **FastestFirst** keeps nginx's exact scan, and its smooth order among tied
  peers, up to 32 peers; above, a pick takes the least loaded of three peers
  drawn by derived weight from an alias table, a successful report takes no
  lock while its estimate stays in its band, and one that leaves it
  reweighs its peer alone; every weight and the table are recomputed once
  per n such reports, so a report is O(1) amortized whatever the latencies
  (see the section on real latencies).
- **P2CPeakEWMA** reads no clock on a pick: the two costs compare at the
  later of their two stamps, one exponential between them; a report reads
  the clock once and moves the estimate by compare-and-swap.
- **ConsistentHash** takes no lock on a first attempt whose point's server
  has one healthy peer at full effective weight (nginx's smooth step then
  changes nothing), and finds the point through an index on the hash's top
  bits; retries, shared server texts and recovering peers take the lock.
`

func main() {
	var m meta
	out := flag.String("out", "BENCHMARKS.md", "file to write")
	flag.StringVar(&m.cmd, "cmd", "sh benchmarks/run.sh", "the command that produced the rounds")
	flag.StringVar(&m.cpu, "cpu", "unknown CPU", "CPU model")
	flag.StringVar(&m.cores, "cores", "?", "number of cores")
	flag.StringVar(&m.goVersion, "go", "?", "Go version")
	flag.StringVar(&m.date, "date", "?", "date of the run")
	flag.StringVar(&m.benchtime, "benchtime", "?", "-benchtime of each round")
	coreFiles := flag.String("cores-rounds", "", "comma-separated rounds run with -cpu 1,N, for the table of cores")
	load := flag.String("load", "", "the load average when the rounds started, for -only's note")
	only := flag.String("only", "", "rewrite only this section of -out: fastest (FastestFirst under real latencies), load (server-reported load), probe (probes) or guards (the guards; added before the section on cores if -out has none)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "report: no round files")
		os.Exit(2)
	}
	r := &results{data: map[string]map[int]sample{}}
	r.rounds = readRounds(flag.Args(), r.parse)
	r.cores = &results{data: map[string]map[int]sample{}}
	r.cores.rounds = readRounds(strings.Split(strings.Trim(*coreFiles, ","), ","), r.cores.parseProcs)
	var b strings.Builder
	switch *only {
	case "":
	case "fastest", "load", "probe", "guards":
		note := fmt.Sprintf("This section was measured apart from the rest of the file, with `%s`: %d round(s) of -benchtime %s, medians and within-round ratios as above, on %s, %s cores, %s, %s. The rest of the file is from its own run, dated at the top.", m.cmd, r.rounds, m.benchtime, m.cpu, m.cores, m.goVersion, m.date)
		if *load != "" {
			note += fmt.Sprintf(" The load average (1, 5, 15 minutes) was %s when the rounds started; other work may share the cores of this machine at any time, so compare the ratios, taken within a round, rather than times across sections.", *load)
		}
		heading := latencySection
		switch *only {
		case "fastest":
			r.writeLatency(&b, note)
		case "load":
			heading = loadSection
			r.writeLoad(&b, note)
		case "guards":
			heading = guardsSection
			r.writeGuards(&b, note)
		default:
			heading = probeSection
			r.writeProbe(&b, note)
		}
		if err := replaceSection(*out, heading, "## Cores", b.String()); err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		return
	default:
		fmt.Fprintf(os.Stderr, "report: -only %q: want fastest, load, probe or guards\n", *only)
		os.Exit(2)
	}
	r.write(&b, m)
	if err := writeFull(*out, b.String()); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// writeFull writes a full run's text to path, keeping the sections of
// the file already there that the run does not measure (the guards and
// hedging, which their own commands write) where they were.
func writeFull(path, text string) error {
	switch old, err := os.ReadFile(path); {
	case err == nil:
		text = keepSections(string(old), text)
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	return os.WriteFile(path, []byte(text), 0o644)
}

// readRounds parses each named file (an empty name is none) as one round,
// numbered from 0, and returns how many it read; it exits on an error.
func readRounds(names []string, parse func(round int, in io.Reader) error) int {
	rounds := 0
	for i, name := range names {
		if name == "" {
			continue
		}
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "report:", err)
			os.Exit(1)
		}
		err = parse(i, f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "report: %s: %v\n", name, err)
			os.Exit(1)
		}
		rounds++
	}
	return rounds
}
