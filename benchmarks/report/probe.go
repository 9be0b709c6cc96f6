package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
)

// The section on probes: what answering a probe costs a server
// (BenchmarkProbe in this module, BenchmarkProbeService in
// loadreport/grpcreport's, which run.sh runs beside it), each against a
// bare handler or a bare call in the same round; and the Prequal
// picker's benchmarks of the root module (BenchmarkPrequal*), when
// there are any.

// probeSection is the heading the section starts with; -only probe
// replaces the text from it to the next heading of its level.
const probeSection = "## Probes: what a server pays to answer one"

// probeRows are the rows of the table of handlers called directly: what
// the row is, its serial and parallel benchmarks (empty: not run), and
// the bare row its cost is taken over.
var probeRows = []struct{ about, serial, parallel, bare string }{
	{"net/http handler, bare (writes status 200)", "Probe/http/bare/serial", "Probe/http/bare/parallel", ""},
	{"a probe answered by loadreport's Middleware (GET " + "`/_lbgo/probe`" + ")", "Probe/http/middleware/serial", "Probe/http/middleware/parallel", "Probe/http/bare/serial"},
	{"the same by ProbeHandler", "Probe/http/handler/serial", "Probe/http/handler/parallel", "Probe/http/bare/serial"},
	{"Tracker.Probe alone, the current level holding requests", "Probe/tracker/found", "", ""},
	{"Tracker.Probe alone, worst case (21 empty levels read first)", "Probe/tracker/scan", "", ""},
	{"ParseProbe, the client's side", "Probe/parse", "", ""},
	{"gRPC: the probe service's handler called directly (Tracker.Probe and the response message)", "ProbeService/answer", "", ""},
}

// probeNetRows are the rows of the table of whole probes: what the row
// is, its benchmark, and the baselines its ratios are taken to.
var probeNetRows = []struct {
	about, key string
	over       []string
}{
	{"HTTP over loopback (net/http client and server): bare handler", "Probe/http/loopback/bare", nil},
	{"the same, a handler writing a fixed body of a probe answer's length, same headers", "Probe/http/loopback/static", []string{"Probe/http/loopback/bare"}},
	{"the same, the Middleware's probe, then ParseProbe", "Probe/http/loopback/probe", []string{"Probe/http/loopback/bare", "Probe/http/loopback/static"}},
	{"HTTP over loopback, raw TCP client (allocs: net/http's server alone): bare handler", "Probe/http/raw/bare", nil},
	{"the same, fixed body", "Probe/http/raw/static", []string{"Probe/http/raw/bare"}},
	{"the same, the Middleware's probe", "Probe/http/raw/probe", []string{"Probe/http/raw/bare", "Probe/http/raw/static"}},
	{"gRPC over bufconn (in memory): a bare unary call", "ProbeService/bufconn/bare", nil},
	{"the same, a probe (grpcreport.Probe)", "ProbeService/bufconn/probe", []string{"ProbeService/bufconn/bare"}},
	{"gRPC over loopback: a bare unary call", "ProbeService/loopback/bare", nil},
	{"the same, a probe (grpcreport.Probe)", "ProbeService/loopback/probe", []string{"ProbeService/loopback/bare"}},
}

// probeTargets are the section's targets.
var probeTargets = []target{
	{
		"a probe answered over HTTP (Middleware or ProbeHandler, reused ResponseWriter), Tracker.Probe and ParseProbe: 0 allocs",
		func(r *results) (bool, string) {
			worst, at := math.Inf(-1), ""
			for _, k := range []string{"Probe/http/middleware/serial", "Probe/http/middleware/parallel", "Probe/http/handler/serial", "Probe/http/handler/parallel", "Probe/tracker/found", "Probe/tracker/scan", "Probe/parse"} {
				if a := r.allocs(k); !math.IsNaN(a) && a > worst {
					worst, at = a, strings.TrimPrefix(k, "Probe/")
				}
			}
			if math.IsInf(worst, -1) {
				return false, "not measured"
			}
			return worst == 0, fmt.Sprintf("worst %s allocs/op at %s", fmtAllocs(worst), at)
		},
		"",
	},
	{
		"a probe over loopback (raw client) allocates no more than net/http's server serving the same body from a bare handler",
		func(r *results) (bool, string) {
			p, s := r.allocs("Probe/http/raw/probe"), r.allocs("Probe/http/raw/static")
			if math.IsNaN(p) || math.IsNaN(s) {
				return false, "not measured"
			}
			return p <= s, fmt.Sprintf("%s allocs/op against %s", fmtAllocs(p), fmtAllocs(s))
		},
		"",
	},
	{
		"a probe over loopback HTTP (net/http client) ≤ 1.2× the same fixed body from a bare handler",
		func(r *results) (bool, string) {
			x := r.ratio("Probe/http/loopback/probe", "Probe/http/loopback/static")
			if math.IsNaN(x) {
				return false, "not measured"
			}
			return x <= 1.2, fmt.Sprintf("%s (median of the rounds' ratios)", fmtRatio(x))
		},
		"",
	},
}

// writeProbe writes the section; note, if not empty, says how its
// numbers were measured when that differs from the rest of the file.
func (r *results) writeProbe(w io.Writer, note string) {
	if _, ok := r.data["Probe/http/bare/serial"]; !ok {
		return
	}
	fmt.Fprintf(w, "\n%s\n\n", probeSection)
	fmt.Fprintf(w, "A probe (Prequal's) asks a server for its requests in flight and its latency estimate at that load; loadreport's Middleware answers it on its probe path, grpcreport's probe service over gRPC. Its cost beside a bare handler or a bare call, in the same round.\n")
	if note != "" {
		fmt.Fprintf(w, "\n%s\n", note)
	}
	r.writeTargets(w, probeTargets)

	cell := func(k string) string {
		if _, ok := r.data[k]; k == "" || !ok {
			return "–"
		}
		return fmt.Sprintf("%s (%s)", fmtNs(r.ns(k)), fmtAllocs(r.allocs(k)))
	}
	fmt.Fprintf(w, "\n### Handlers called directly\n\nOn a reused ResponseWriter (HTTP) or called as a function (gRPC), so that what is timed is the answer and not the transport. The Tracker holds a busy server's state: 4096 steps of 100 µs each beginning a request or ending the oldest, 0 to 16 in flight, 8 at the end. ns/op (allocs/op):\n\n| what | serial | parallel | serial cost over bare |\n|---|---:|---:|---:|\n")
	for _, row := range probeRows {
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

	fmt.Fprintf(w, "\n### Whole probes\n\nOne request after another on one kept-alive connection; client and server in one process, so allocs/op are both sides' but on the raw rows, whose client allocates nothing. Ratios: the median over the rounds of the row's time over each baseline's in the same round. ns/op (allocs/op):\n\n| what | serial | ratio to the baselines above it |\n|---|---:|---|\n")
	for _, row := range probeNetRows {
		if _, ok := r.data[row.key]; !ok {
			continue
		}
		var ratios []string
		for _, b := range row.over {
			name := b[strings.LastIndexByte(b, '/')+1:]
			ratios = append(ratios, fmt.Sprintf("%s over %s", fmtRatio(r.ratio(row.key, b)), name))
		}
		rs := "–"
		if len(ratios) > 0 {
			rs = strings.Join(ratios, ", ")
		}
		fmt.Fprintf(w, "| %s | %s | %s |\n", row.about, cell(row.key), rs)
	}

	var prequal []string
	for k := range r.data {
		if strings.HasPrefix(k, "Prequal") {
			prequal = append(prequal, k)
		}
	}
	if len(prequal) > 0 {
		slices.Sort(prequal)
		fmt.Fprintf(w, "\n### The Prequal picker\n\nThe root module's BenchmarkPrequal benchmarks, as their doc comments describe them. ns/op (allocs/op):\n\n| benchmark | ns/op (allocs/op) |\n|---|---:|\n")
		for _, k := range prequal {
			fmt.Fprintf(w, "| %s | %s |\n", k, cell(k))
		}
	}
	fmt.Fprint(w, probeNotes)
}

// probeNotes explains the numbers of the section; it states no
// measurement.
const probeNotes = `
What a probe costs and why. The Middleware answers a probe before it
counts anything: it reads the clock once, the requests in flight, and the
sliding windows of the current RIF's level (10 buckets each of the count,
the summed durations and the summed RIFs; lower levels when that one is
empty), formats the two numbers into a pooled buffer and writes them with
shared header values, so it allocates nothing; net/http allocates what any
handler's response with a body costs. On the gRPC side, the response is a
protobuf message with a map, which grpc-go's codec encodes and the client
decodes: those allocations are grpc-go's and the message's, the handler's
own are the message and its map. Answering probes makes every request's
End enter its level too: three more atomic add-or-resets per request, in
the Middleware's and the interceptors' cost in the section above.
`
