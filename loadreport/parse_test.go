package loadreport

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// envoyExample is the report of Envoy's test/common/orca/orca_parser_test.cc
// (exampleOrcaLoadReport), which its TEXT, JSON and BIN cases decode to.
var envoyExample = Report{
	CPUUtilization: 0.7, ApplicationUtilization: 0.8, MemUtilization: 0.9,
	EPS: 2, RPSFractional: 1000,
	NamedMetrics: map[string]float64{"foo": 123, "bar": 0.2},
	Utilization:  map[string]float64{"total": 0.5},
}

func TestParseAccepts(t *testing.T) {
	tests := []struct {
		name, in string
		want     Report
	}{
		{"envoy TEXT with =", "TEXT cpu_utilization=0.7,application_utilization=0.8,mem_utilization=0.9," +
			"rps_fractional=1000,eps=2,named_metrics.foo=123,named_metrics.bar=0.2,utilization.total=0.5", envoyExample},
		{"envoy TEXT with :", "TEXT cpu_utilization:0.7,application_utilization:0.8,mem_utilization:0.9," +
			"rps_fractional:1000,eps:2,named_metrics.foo:123,named_metrics.bar:0.2,utilization.total:0.5", envoyExample},
		{"envoy JSON", `JSON {"cpu_utilization": 0.7, "application_utilization": 0.8, "mem_utilization": 0.9, ` +
			`"rps_fractional": 1000, "eps": 2, "named_metrics": {"foo": 123,"bar": 0.2}, "utilization": {"total": 0.5}}`, envoyExample},
		// Captured from a grpc-go backend (unpadded), quoted in Envoy's
		// LegacyBinaryHeaderFromGrpcGo test with its expected report.
		{"grpc-go BIN unpadded", "BIN CQAAAAAAAOA/MQAAAAAAAFlAOQAAAAAAAABAQg4KA3JpZhEAAAAAAAAQQA",
			Report{CPUUtilization: 0.5, RPSFractional: 100, EPS: 2, NamedMetrics: map[string]float64{"rif": 4}}},
		{"grpc-go BIN padded", "BIN CQAAAAAAAOA/MQAAAAAAAFlAOQAAAAAAAABAQg4KA3JpZhEAAAAAAAAQQA==",
			Report{CPUUtilization: 0.5, RPSFractional: 100, EPS: 2, NamedMetrics: map[string]float64{"rif": 4}}},
		{"TEXT spaces and empty pairs", "TEXT  cpu_utilization=0.25 , ,eps= 1e-3,", Report{CPUUtilization: 0.25, EPS: 0.001}},
		{"TEXT named key with colon", "TEXT named_metrics.a:b=3", Report{NamedMetrics: map[string]float64{"a:b": 3}}},
		{"JSON camel names", `JSON {"cpuUtilization":0.5,"namedMetrics":{"x":1},"rps":7}`,
			Report{CPUUtilization: 0.5, NamedMetrics: map[string]float64{"x": 1}}},
		{"JSON empty", "JSON {}", Report{}},
		// 0x09 cpu=0.5, then an unknown field 15 (varint 1) skipped as protobuf does.
		{"BIN unknown field skipped", "BIN CQAAAAAAAOA/eAE=", Report{CPUUtilization: 0.5}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if !got.Equal(tt.want) {
				t.Fatalf("Parse(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	long := "TEXT " + strings.Repeat("eps=1,", MaxHeaderLen/6+1)
	var many strings.Builder
	many.WriteString("TEXT ")
	for i := range MaxMetrics + 1 {
		many.WriteString("named_metrics.m" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + "=1,")
	}
	tests := []struct {
		name, in string
		want     error
	}{
		{"empty", "", ErrNoReport},
		{"unknown prefix", "BAD random-value", ErrUnknownFormat},
		{"lower-case prefix", "text cpu_utilization=1", ErrUnknownFormat},
		{"prefix without space", "TEXT", ErrUnknownFormat},
		{"TEXT negative", "TEXT cpu_utilization=-1", ErrInvalidValue},
		{"TEXT NaN", "TEXT cpu_utilization=NaN", ErrInvalidValue},
		{"TEXT infinite", "TEXT cpu_utilization=+Inf", ErrInvalidValue},
		{"TEXT huge", "TEXT rps_fractional=1e400", ErrInvalidValue},
		{"TEXT quoted (wrong type)", `TEXT cpu_utilization="0.7"`, ErrMalformed},
		{"TEXT hex", "TEXT eps=0x10", ErrMalformed},
		{"TEXT underscore", "TEXT eps=1_000", ErrMalformed},
		{"TEXT duplicate", "TEXT cpu_utilization=0.7,cpu_utilization=0.8", ErrMalformed},
		{"TEXT duplicate = and :", "TEXT eps=1,eps:2", ErrMalformed},
		{"TEXT duplicate named", "TEXT named_metrics.foo=123,named_metrics.duplicate=123,named_metrics.duplicate=0.2", ErrMalformed},
		{"TEXT unsupported name", "TEXT cpu_utilization=0.7,unsupported_metric=0.8", ErrMalformed},
		{"TEXT request_cost", "TEXT request_cost.x=1", ErrMalformed},
		{"TEXT empty named key", "TEXT named_metrics.=123", ErrInvalidValue},
		{"TEXT empty utilization key", "TEXT utilization.=0.9", ErrInvalidValue},
		{"TEXT no pair", "TEXT not-a-list-of-key-value-pairs", ErrMalformed},
		{"TEXT no value", "TEXT eps=", ErrMalformed},
		{"TEXT no name", "TEXT =1", ErrMalformed},
		{"TEXT too long", long, ErrTooLarge},
		{"TEXT too many metrics", many.String(), ErrTooLarge},
		{"JSON not json", "JSON not-a-valid-json-string", ErrMalformed},
		{"JSON unknown field", `JSON {"cpu_utilization": 0.7, "unknown_field": 2}`, ErrMalformed},
		{"JSON string value", `JSON {"cpu_utilization": "0.7"}`, ErrMalformed},
		{"JSON truncated", `JSON {"cpu_utilization": 0.7`, ErrMalformed},
		{"JSON negative", `JSON {"eps": -2}`, ErrInvalidValue},
		{"JSON huge", `JSON {"eps": 1e999}`, ErrInvalidValue},
		{"JSON null", `JSON {"eps": null}`, ErrMalformed},
		{"JSON map not object", `JSON {"named_metrics": 3}`, ErrMalformed},
		{"JSON duplicate field", `JSON {"eps": 1, "eps": 2}`, ErrMalformed},
		{"JSON duplicate across spellings", `JSON {"cpu_utilization": 1, "cpuUtilization": 2}`, ErrMalformed},
		{"JSON duplicate map key", `JSON {"named_metrics": {"a": 1, "a": 2}}`, ErrMalformed},
		{"JSON trailing data", `JSON {"eps": 1} {}`, ErrMalformed},
		{"JSON array", `JSON [1]`, ErrMalformed},
		{"JSON empty key", `JSON {"utilization": {"": 1}}`, ErrInvalidValue},
		{"BIN empty", "BIN ", ErrMalformed},
		{"BIN not base64", "BIN !!!!", ErrMalformed},
		{"BIN url alphabet", "BIN _w==", ErrMalformed},
		// 0x09 (cpu, double) then 4 of its 8 bytes.
		{"BIN truncated double", "BIN CQAAAAA=", ErrMalformed},
		// 0x42 (named_metrics) with length 14 and 2 bytes.
		{"BIN truncated map", "BIN Qg4KAw==", ErrMalformed},
		// 0x08: cpu (field 1) as a varint: the wrong type.
		{"BIN wrong wire type", "BIN CAE=", ErrMalformed},
		// 0x0b: field 1, start group.
		{"BIN group", "BIN Cw==", ErrMalformed},
		// field 15 varint of 11 bytes of 0xff.
		{"BIN overlong varint", "BIN eP//////////////AQ==", ErrMalformed},
		// 0x09 then -1.0 (0xbff0000000000000 little-endian).
		{"BIN negative", "BIN CQAAAAAAAPC/", ErrInvalidValue},
		// 0x39 (eps) then NaN 0x7ff8000000000000.
		{"BIN NaN", "BIN OQAAAAAAAPh/", ErrInvalidValue},
		// 0x39 (eps) then +Inf 0x7ff0000000000000.
		{"BIN infinite", "BIN OQAAAAAAAPB/", ErrInvalidValue},
		// 0x42 entry {key "" value 1}: an empty key.
		{"BIN empty key", "BIN QgsKABEAAAAAAADwPw==", ErrInvalidValue},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Parse(%.60q) error = %v, want %v", tt.in, err, tt.want)
			}
			if !got.Equal(Report{}) {
				t.Fatalf("Parse(%.60q) = %+v with an error, want the zero Report", tt.in, got)
			}
		})
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	reports := []Report{
		envoyExample,
		{CPUUtilization: 1e-300, EPS: math.MaxFloat64, NamedMetrics: map[string]float64{"rif": 0}},
		{RPSFractional: 1.0 / 3, RequestCost: map[string]float64{"db": 2.5}},
	}
	for _, r := range reports {
		for _, f := range []Format{Text, JSON, Binary} {
			h, err := r.Header(f)
			if f == Text && len(r.RequestCost) > 0 {
				if !errors.Is(err, ErrInvalidValue) {
					t.Errorf("Header(Text) of a request_cost: error %v, want ErrInvalidValue", err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%+v Header(%v): %v", r, f, err)
			}
			if !strings.HasPrefix(h, f.String()+" ") {
				t.Errorf("Header(%v) = %q: no prefix", f, h)
			}
			got, err := Parse(h)
			if err != nil || !got.Equal(r) {
				t.Errorf("Parse(Header(%v) = %q) = %+v, %v; want %+v", f, h, got, err, r)
			}
		}
	}
}

func TestHeaderRejects(t *testing.T) {
	tests := []struct {
		name string
		r    Report
		f    Format
		want error
	}{
		{"negative", Report{EPS: -1}, JSON, ErrInvalidValue},
		{"NaN", Report{CPUUtilization: math.NaN()}, Binary, ErrInvalidValue},
		{"empty TEXT", Report{}, Text, ErrNoReport},
		{"empty BIN", Report{}, Binary, ErrNoReport},
		{"TEXT comma key", Report{NamedMetrics: map[string]float64{"a,b": 1}}, Text, ErrInvalidValue},
		{"TEXT space key", Report{NamedMetrics: map[string]float64{"a b": 1}}, Text, ErrInvalidValue},
		{"unknown format", Report{EPS: 1}, Format(7), ErrUnknownFormat},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := tt.r.Header(tt.f); !errors.Is(err, tt.want) {
				t.Fatalf("Header(%v) error = %v, want %v", tt.f, err, tt.want)
			}
		})
	}
}

func TestEmptyJSONHeader(t *testing.T) {
	if h, err := (Report{}).Header(JSON); err != nil || h != "JSON {}" {
		t.Fatalf(`Header(JSON) of the zero Report = %q, %v; want "JSON {}"`, h, err)
	}
}

// TestHeaderLength: Header refuses with ErrTooLarge a value Parse would
// refuse for its length, whatever the metric count, and gives one that
// fits whole. A name of k > 127 bytes (its length a 2-byte varint) is one
// named_metrics entry of 1 (tag) + 2 (entry length) + 1 + 2 + k (key) +
// 1 + 8 (value) = k+15 protobuf bytes: base64 writes 4 bytes per 3, so
// "BIN " + base64 is 4 + 4*ceil((k+15)/3) bytes. At k = 6126 that is
// 4 + 4*2047 = 8192, MaxHeaderLen exactly; at k = 6127, 8196. At
// k = 7000, 9360 in BIN, while JSON, `JSON {"named_metrics":{"` + k +
// `":1}}`, is 29+k = 7029 bytes and TEXT, "TEXT named_metrics." + k +
// "=1", 21+k = 7021.
func TestHeaderLength(t *testing.T) {
	tests := []struct {
		k       int
		f       Format
		wantLen int // 0: refused with ErrTooLarge
	}{
		{6126, Binary, 8192},
		{6127, Binary, 0},
		{7000, Binary, 0},
		{7000, JSON, 7029},
		{7000, Text, 7021},
		{8200, JSON, 0},
		{8200, Text, 0},
	}
	for _, tt := range tests {
		r := Report{NamedMetrics: map[string]float64{strings.Repeat("a", tt.k): 1}}
		h, err := r.Header(tt.f)
		if tt.wantLen == 0 {
			if !errors.Is(err, ErrTooLarge) || h != "" {
				t.Errorf("%d-byte name in %v: Header = %d bytes, %v; want ErrTooLarge", tt.k, tt.f, len(h), err)
			}
			continue
		}
		if err != nil || len(h) != tt.wantLen {
			t.Errorf("%d-byte name in %v: Header = %d bytes, %v; want %d bytes", tt.k, tt.f, len(h), err, tt.wantLen)
			continue
		}
		if back, err := Parse(h); err != nil || !back.Equal(r) {
			t.Errorf("%d-byte name in %v: Parse(Header) = %v; want the report back", tt.k, tt.f, err)
		}
	}
}
