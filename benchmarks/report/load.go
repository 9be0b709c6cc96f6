package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// The section on server-reported load: what reporting costs a server per
// request (BenchmarkServerLoad in this module, and the gRPC interceptors'
// benchmark in their own module, which run.sh runs beside it), and what
// ReportedWRR's pick costs next to SmoothWRR's, whose cycle it runs
// (families reported and reported-report).

// loadSection is the heading the section starts with; -only load replaces
// the text from it to the next heading of its level.
const loadSection = "## Server-reported load"

func serverKey(variant, mode string) string { return fmt.Sprintf("ServerLoad/%s/%s", variant, mode) }

// serverRows are the rows of the server table: what the row is, its
// serial and parallel benchmarks (empty: not run), and the bare row its
// cost is taken over. The http rows are this module's BenchmarkServerLoad;
// the grpc rows are loadreport/grpcreport's BenchmarkUnaryInterceptor (the
// interceptors called directly) and BenchmarkServer (one unary call through
// a real gRPC server and client over an in-memory listener).
var serverRows = []struct{ about, serial, parallel, bare string }{
	{"net/http handler, bare (writes status 200)", "ServerLoad/http/bare/serial", "ServerLoad/http/bare/parallel", ""},
	{"the same in loadreport's Middleware, `TEXT ` header", "ServerLoad/http/TEXT/serial", "ServerLoad/http/TEXT/parallel", "ServerLoad/http/bare/serial"},
	{"the same, `JSON ` header", "ServerLoad/http/JSON/serial", "ServerLoad/http/JSON/parallel", "ServerLoad/http/bare/serial"},
	{"the same, `BIN ` header", "ServerLoad/http/BIN/serial", "ServerLoad/http/BIN/parallel", "ServerLoad/http/bare/serial"},
	{"gRPC unary handler, bare, called directly", "UnaryInterceptor/bare", "", ""},
	{"the same through grpcreport's interceptors, called directly", "UnaryInterceptor/reporter", "UnaryInterceptor/reporter/parallel", "UnaryInterceptor/bare"},
	{"one unary call through a real gRPC server and client (in-memory listener), no report", "Server/bare", "", ""},
	{"the same, the application filling grpc/orca's own recorder (per-call trailer)", "Server/orca", "", "Server/bare"},
	{"the same, grpcreport's Reporter (per-call trailer)", "Server/reporter", "", "Server/bare"},
}

// loadTargets are the section's targets.
var loadTargets = []target{
	{
		"ReportedWRR, weights from reports in place: Pick ≤ 1.2× SmoothWRR's at every size, serial and parallel",
		ratioTarget("reported", "lbgo.ReportedWRR", "reported", "lbgo.SmoothWRR", 1.2, sizes, modes, false),
		"",
	},
	{
		"ReportedWRR, Pick and Pick plus a report, steady or moving: 0 allocs",
		zeroAllocs2([]string{"reported", "reported-report", "reported-moving"}, "lbgo.ReportedWRR"),
		"",
	},
	{
		"loadreport's HTTP Middleware: at most 2 allocs a request (the header value and its slice, what Header().Set allocates)",
		func(r *results) (bool, string) {
			worst, at := math.Inf(-1), ""
			for _, v := range []string{"http/TEXT", "http/JSON", "http/BIN"} {
				for _, m := range modes {
					if a := r.allocs(serverKey(v, m)); !math.IsNaN(a) && a > worst {
						worst, at = a, v+", "+m
					}
				}
			}
			if math.IsInf(worst, -1) {
				return false, "not measured"
			}
			return worst <= 2, fmt.Sprintf("worst %s allocs/op at %s", fmtAllocs(worst), at)
		},
		"",
	},
}

// writeLoad writes the section; note, if not empty, says how its numbers
// were measured when that differs from the rest of the file.
func (r *results) writeLoad(w io.Writer, note string) {
	if _, ok := r.data[serverKey("http/bare", "serial")]; !ok {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n", loadSection)
	fmt.Fprintf(w, "What a server pays to report its load on every response, and what a client pays to balance by the reports.\n")
	if note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	r.writeTargets(w, loadTargets)

	fmt.Fprintf(w, "\n### The server's cost per request\n\nA trivial handler, bare and inside the reporting code: on a reused ResponseWriter (HTTP) or called through the interceptors directly (gRPC), so that what is timed is the reporting and not the transport; and, for gRPC, one whole unary call through a real server and client, where grpc/orca encodes the per-call trailer. For scale, one whole request to the bare handler over loopback (net/http client and server on 127.0.0.1) took %s serially. ns/op (allocs/op):\n\n| handler | serial | parallel | serial cost over bare |\n|---|---:|---:|---:|\n", fmtNs(r.ns(serverKey("http/loopback", "serial"))))
	cell := func(k string) string {
		if _, ok := r.data[k]; k == "" || !ok {
			return "–"
		}
		return fmt.Sprintf("%s (%s)", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
	}
	for _, row := range serverRows {
		if _, ok := r.data[row.serial]; !ok {
			continue
		}
		over := "–"
		if row.bare != "" {
			over = fmtNs(r.ns(row.serial) - r.ns(row.bare))
			if !strings.HasSuffix(over, "s") {
				over += " ns"
			}
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", row.about, cell(row.serial), cell(row.parallel), over)
	}

	fmt.Fprintf(w, "\n### ReportedWRR's pick\n\nReportedWRR over peers whose reports (utilization 0.1 to 1.0 by peer, 100 requests a second) have set every weight, past the blackout, against SmoothWRR over the same peers with static weights; both serve nginx's smooth order from the same precomputed cycle, and ReportedWRR runs the short settings (no blackout, 100 ms updates) on the real clock. Pick: the pick alone. Steady report: each pick is followed by Done carrying the peer's same report (ReportedWRR) or none (SmoothWRR). Moving report: Done carries the next of 4096 reports whose utilization is drawn from a lognormal (median 0.5, σ 0.5), so every recompute, one per 100 ms, finds the weights moved and builds a new cycle, whose cost the picks share (a new cycle is the only allocation: bytes/op above 0 at large sizes, allocs/op 0). ns/op (allocs/op), and ReportedWRR's time as a multiple of SmoothWRR's in the same round:\n\n| peers | mode | Pick: ReportedWRR | SmoothWRR | ratio | steady report: ReportedWRR | SmoothWRR | ratio | moving report: ReportedWRR | ratio |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range sizes {
		for _, m := range modes {
			fmt.Fprintf(w, "| %s | %s |", n, m)
			for _, fam := range []string{"reported", "reported-report"} {
				a, b := key(fam, "lbgo.ReportedWRR", n, m), key(fam, "lbgo.SmoothWRR", n, m)
				fmt.Fprintf(w, " %s (%s) | %s (%s) | %s |", fmtNs(r.ns(a)), fmtAllocs(r.allocs(a)), fmtNs(r.ns(b)), fmtAllocs(r.allocs(b)), fmtRatio(r.ratio(a, b)))
			}
			a, b := key("reported-moving", "lbgo.ReportedWRR", n, m), key("reported-moving", "lbgo.SmoothWRR", n, m)
			fmt.Fprintf(w, " %s (%s) | %s |\n", fmtNs(r.ns(a)), fmtAllocs(r.allocs(a)), fmtRatio(r.ratio(a, b)))
		}
	}
	fmt.Fprint(w, loadNotes)
}

// loadNotes explains the numbers of the section; it states no measurement.
const loadNotes = `
Why a report costs more than the pick: Done with a server's load reads
the clock (a report's time decides its blackout and expiry), computes the
peer's A58 weight and stores it with atomic writes on the peer's own
state; at most once per update period (100 ms here) the Done that finds
the period over recomputes every weight, O(n), under the lock, and builds
a new cycle outside it if they moved. SmoothWRR's Done without a load only
ends the attempt. On the server, the middleware and the interceptors read
the clock at the start and at the end of each request (for the latency
estimate); a trailer through grpc/orca costs what its encoding and
metadata cost, whoever fills it.
`

// writeTargets writes a section's table of targets, as "### Targets".
func (r *results) writeTargets(w io.Writer, ts []target) {
	fmt.Fprintf(w, "\n### Targets\n\n| target | result | margin |\n|---|---|---|\n")
	for _, t := range ts {
		ok, msg := t.check(r)
		res := "**met**"
		if !ok {
			res = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.text, res, msg)
	}
}
