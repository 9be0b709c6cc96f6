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

// serverVariants are the rows of the server table: the benchmark's
// variant name and what the row says it is.
var serverVariants = []struct{ name, about string }{
	{"http/bare", "net/http handler, bare (writes status 200)"},
	{"http/TEXT", "the same in loadreport's Middleware, `TEXT ` header"},
	{"http/JSON", "the same, `JSON ` header"},
	{"http/BIN", "the same, `BIN ` header"},
	{"grpc/bare", "gRPC unary handler, bare"},
	{"grpc/unary", "the same in the unary interceptor, per-call ORCA trailer"},
}

// loadTargets are the section's targets.
var loadTargets = []target{
	{
		"ReportedWRR, weights from reports in place: Pick ≤ 1.2× SmoothWRR's at every size, serial and parallel",
		ratioTarget("reported", "lbgo.ReportedWRR", "reported", "lbgo.SmoothWRR", 1.2, sizes, modes, false),
		"",
	},
	{
		"ReportedWRR, Pick and Pick plus a report: 0 allocs",
		zeroAllocs2([]string{"reported", "reported-report"}, "lbgo.ReportedWRR"),
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
	fmt.Fprintf(w, "\n### Targets\n\n| target | result | margin |\n|---|---|---|\n")
	for _, t := range loadTargets {
		ok, msg := t.check(r)
		res := "**met**"
		if !ok {
			res = "**missed**"
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", t.text, res, msg)
	}

	fmt.Fprintf(w, "\n### The server's cost per request\n\nA trivial handler, bare and inside the reporting code, on a reused ResponseWriter (HTTP) or called through the interceptor directly (gRPC), so that what is timed is the reporting and not the transport. For scale, one whole request to the bare handler over loopback (net/http client and server on 127.0.0.1) took %s serially. ns/op (allocs/op):\n\n| handler | serial | parallel | serial cost over bare |\n|---|---:|---:|---:|\n", fmtNs(r.ns(serverKey("http/loopback", "serial"))))
	for _, v := range serverVariants {
		s, p := serverKey(v.name, "serial"), serverKey(v.name, "parallel")
		if _, ok := r.data[s]; !ok {
			continue
		}
		bare := strings.SplitN(v.name, "/", 2)[0] + "/bare"
		over := "–"
		if v.name != bare {
			over = fmtNs(r.ns(s)-r.ns(serverKey(bare, "serial"))) + " ns"
		}
		fmt.Fprintf(w, "| %s | %s (%s) | %s (%s) | %s |\n", v.about, fmtNs(r.ns(s)), fmtAllocs(r.allocs(s)), fmtNs(r.ns(p)), fmtAllocs(r.allocs(p)), over)
	}

	fmt.Fprintf(w, "\n### ReportedWRR's pick\n\nReportedWRR over peers whose reports (utilization 0.1 to 1.0 by peer, 100 requests a second) have set every weight, past the blackout, against SmoothWRR over the same peers with static weights; both serve nginx's smooth order from the same precomputed cycle. Pick: the pick alone. Pick plus a report: each pick is followed by Done carrying the server's load (ReportedWRR) or none (SmoothWRR), on the real clock. ns/op (allocs/op), and ReportedWRR's time as a multiple of SmoothWRR's in the same round:\n\n| peers | mode | Pick: ReportedWRR | Pick: SmoothWRR | ratio | Pick plus a report: ReportedWRR | SmoothWRR | ratio |\n|---:|---|---:|---:|---:|---:|---:|---:|\n")
	for _, n := range sizes {
		for _, m := range modes {
			fmt.Fprintf(w, "| %s | %s |", n, m)
			for _, fam := range []string{"reported", "reported-report"} {
				a, b := key(fam, "lbgo.ReportedWRR", n, m), key(fam, "lbgo.SmoothWRR", n, m)
				fmt.Fprintf(w, " %s (%s) | %s (%s) | %s |", fmtNs(r.ns(a)), fmtAllocs(r.allocs(a)), fmtNs(r.ns(b)), fmtAllocs(r.allocs(b)), fmtRatio(r.ratio(a, b)))
			}
			fmt.Fprintln(w)
		}
	}
}
