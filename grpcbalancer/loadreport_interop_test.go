package grpcbalancer_test

import (
	"encoding/base64"
	"encoding/json"
	"maps"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/lbgo/balancer/loadreport"
)

// The real OrcaLoadReport protobuf type (cncf/xds, with google.golang.org/
// protobuf's wire and JSON codecs) is the oracle for loadreport's
// hand-written BIN and JSON encodings, both ways.

// randomReport draws a report: each scalar zero a quarter of the time,
// else a value spread over 12 orders of magnitude; up to 5 entries in each
// map, names of 1 to 12 bytes of any UTF-8 (TEXT is not tested here).
func randomReport(rng *rand.Rand) loadreport.Report {
	val := func() float64 {
		if rng.IntN(4) == 0 {
			return 0
		}
		return rng.Float64() * math.Pow(10, float64(rng.IntN(13)-6))
	}
	name := func() string {
		const alphabet = "abcXYZ019_.-:/ é日\"\\,="
		r := []rune(alphabet)
		var b strings.Builder
		for range 1 + rng.IntN(12) {
			b.WriteRune(r[rng.IntN(len(r))])
		}
		return b.String()
	}
	m := func() map[string]float64 {
		n := rng.IntN(6)
		if n == 0 {
			return nil
		}
		out := make(map[string]float64, n)
		for range n {
			out[name()] = val()
		}
		return out
	}
	return loadreport.Report{
		CPUUtilization: val(), MemUtilization: val(), ApplicationUtilization: val(),
		RPSFractional: val(), EPS: val(),
		NamedMetrics: m(), Utilization: m(), RequestCost: m(),
	}
}

func toProto(r loadreport.Report) *v3orcapb.OrcaLoadReport {
	return &v3orcapb.OrcaLoadReport{
		CpuUtilization: r.CPUUtilization, MemUtilization: r.MemUtilization,
		ApplicationUtilization: r.ApplicationUtilization, RpsFractional: r.RPSFractional, Eps: r.EPS,
		NamedMetrics: r.NamedMetrics, Utilization: r.Utilization, RequestCost: r.RequestCost,
	}
}

func fromProto(p *v3orcapb.OrcaLoadReport) loadreport.Report {
	return loadreport.Report{
		CPUUtilization: p.GetCpuUtilization(), MemUtilization: p.GetMemUtilization(),
		ApplicationUtilization: p.GetApplicationUtilization(), RPSFractional: p.GetRpsFractional(), EPS: p.GetEps(),
		NamedMetrics: p.GetNamedMetrics(), Utilization: p.GetUtilization(), RequestCost: p.GetRequestCost(),
	}
}

const interopReports = 2000

func TestLoadReportBinaryInterop(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 1))
	for i := range interopReports {
		r := randomReport(rng)
		if r.Equal(loadreport.Report{}) {
			continue // BIN has no empty report (Envoy rejects an empty value)
		}
		// Ours to the real type.
		h, err := r.Header(loadreport.Binary)
		if err != nil {
			t.Fatalf("report %d %+v: %v", i, r, err)
		}
		wire, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(h, "BIN "))
		if err != nil {
			t.Fatalf("report %d: %q is not padded standard base64: %v", i, h, err)
		}
		var p v3orcapb.OrcaLoadReport
		if err := proto.Unmarshal(wire, &p); err != nil {
			t.Fatalf("report %d: proto.Unmarshal(%q): %v", i, h, err)
		}
		if got := fromProto(&p); !got.Equal(r) {
			t.Fatalf("report %d: proto decoded %+v from our %q, want %+v", i, got, h, r)
		}

		// The real type to ours, as a BIN header (padded) and as grpc-go's
		// endpoint-load-metrics-bin (unpadded, no prefix); the deprecated
		// rps field must be skipped.
		q := toProto(r)
		q.Rps = rng.Uint64() //nolint:staticcheck // deprecated field, set to check it is skipped
		wire, err = proto.Marshal(q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := loadreport.Parse("BIN " + base64.StdEncoding.EncodeToString(wire))
		if err != nil || !got.Equal(r) {
			t.Fatalf("report %d: Parse of proto.Marshal = %+v, %v; want %+v", i, got, err, r)
		}
		hdr := http.Header{loadreport.HeaderNameBin: {base64.RawStdEncoding.EncodeToString(wire)}}
		got, err = loadreport.FromHeader(hdr)
		if err != nil || !got.Equal(r) {
			t.Fatalf("report %d: FromHeader(%s unpadded) = %+v, %v; want %+v", i, loadreport.HeaderNameBin, got, err, r)
		}
	}
}

func TestLoadReportJSONInterop(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 2))
	for i := range interopReports {
		r := randomReport(rng)
		h, err := r.Header(loadreport.JSON)
		if err != nil {
			t.Fatalf("report %d %+v: %v", i, r, err)
		}
		var p v3orcapb.OrcaLoadReport
		if err := protojson.Unmarshal([]byte(strings.TrimPrefix(h, "JSON ")), &p); err != nil {
			t.Fatalf("report %d: protojson.Unmarshal(%q): %v", i, h, err)
		}
		if got := fromProto(&p); !got.Equal(r) {
			t.Fatalf("report %d: protojson decoded %+v from our %q, want %+v", i, got, h, r)
		}
		for _, opts := range []protojson.MarshalOptions{{UseProtoNames: true}, {}} {
			js, err := opts.Marshal(toProto(r))
			if err != nil {
				t.Fatal(err)
			}
			got, err := loadreport.Parse("JSON " + string(js))
			if err != nil || !got.Equal(r) {
				t.Fatalf("report %d: Parse of protojson (proto names %v) %s = %+v, %v; want %+v", i, opts.UseProtoNames, js, got, err, r)
			}
		}
	}
}

// TestLoadReportJSONFieldNames: for a report with every field set, the
// top-level names of our JSON are those protojson writes with the
// proto's field names.
func TestLoadReportJSONFieldNames(t *testing.T) {
	r := loadreport.Report{
		CPUUtilization: 0.1, MemUtilization: 0.2, ApplicationUtilization: 0.3, RPSFractional: 4, EPS: 5,
		NamedMetrics: map[string]float64{"a": 1}, Utilization: map[string]float64{"b": 1}, RequestCost: map[string]float64{"c": 1},
	}
	ours, err := r.Header(loadreport.JSON)
	if err != nil {
		t.Fatal(err)
	}
	theirs, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(toProto(r))
	if err != nil {
		t.Fatal(err)
	}
	keys := func(s []byte) []string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(s, &m); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		return slices.Sorted(maps.Keys(m))
	}
	if o, p := keys([]byte(strings.TrimPrefix(ours, "JSON "))), keys(theirs); !slices.Equal(o, p) {
		t.Fatalf("our JSON names %v, protojson's %v", o, p)
	}
}
