package loadreport

import (
	"encoding/base64"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
)

// HeaderName is the HTTP response header that carries a report
// (canonical form of "endpoint-load-metrics").
const HeaderName = "Endpoint-Load-Metrics"

// HeaderNameBin is the header gRPC servers use for the same report, its
// value the base64 protobuf with no prefix. Envoy reads it first.
const HeaderNameBin = "Endpoint-Load-Metrics-Bin"

// Format is one of the three encodings of HeaderName's value.
type Format uint8

const (
	// Text is "TEXT " then comma-separated name=value pairs, for example
	// "TEXT cpu_utilization=0.3,named_metrics.rif=4".
	Text Format = iota
	// JSON is "JSON " then the report as proto3 JSON with the proto's
	// field names, for example `JSON {"cpu_utilization":0.3}`.
	JSON
	// Binary is "BIN " then the standard base64 (padded) of the
	// serialized OrcaLoadReport protobuf.
	Binary
)

func (f Format) String() string {
	switch f {
	case Text:
		return "TEXT"
	case JSON:
		return "JSON"
	case Binary:
		return "BIN"
	}
	return "Format(" + strconv.Itoa(int(f)) + ")"
}

func (f Format) prefix() string { return f.String() + " " }

// Field names, shared by TEXT and JSON, as Envoy's orca_parser.h spells
// them; the JSON camel-case spellings protojson also accepts are in
// parse_json.go.
const (
	nameCPU         = "cpu_utilization"
	nameMem         = "mem_utilization"
	nameApp         = "application_utilization"
	nameRPS         = "rps_fractional"
	nameEPS         = "eps"
	nameNamed       = "named_metrics"
	nameUtilization = "utilization"
	nameCost        = "request_cost"
)

// Protobuf field numbers of xds.data.orca.v3.OrcaLoadReport
// (cncf/xds xds/data/orca/v3/orca_load_report.proto).
const (
	fieldCPU         = 1 // double
	fieldMem         = 2 // double
	fieldRPS         = 3 // uint64, deprecated: read and dropped
	fieldCost        = 4 // map<string, double>
	fieldUtilization = 5 // map<string, double>
	fieldRPSFrac     = 6 // double
	fieldEPS         = 7 // double
	fieldNamed       = 8 // map<string, double>
	fieldApp         = 9 // double
)

// Header returns r encoded as HeaderName's value in format f, prefix
// included. It fails with ErrInvalidValue or ErrTooLarge if r does not
// validate, its encoding in f is longer than MaxHeaderLen (which Parse
// would refuse), or a name cannot be written in f (TEXT cannot carry
// request_cost, nor names with ',', '=', spaces or non-ASCII), and with
// ErrNoReport for a report with nothing set in TEXT or BIN (Envoy rejects
// an empty BIN value, and HTTP strips the trailing space of an empty
// TEXT one).
func (r Report) Header(f Format) (string, error) {
	b, err := r.AppendHeader(nil, f)
	return string(b), err
}

// AppendHeader is Header appending to dst.
func (r Report) AppendHeader(dst []byte, f Format) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return dst, err
	}
	if f > Binary {
		return dst, fmt.Errorf("%w: %v", ErrUnknownFormat, f)
	}
	if f != JSON && r.Equal(Report{}) {
		return dst, fmt.Errorf("%w: nothing to send in %v", ErrNoReport, f)
	}
	type scalar struct {
		name  string
		field int
		v     float64
	}
	var scalars [len(scalarFields)]scalar
	for i, f := range scalarFields {
		scalars[i] = scalar{f.name, f.field, *f.of(&r)}
	}
	mapsOf := [...]struct {
		name  string
		field int
		m     map[string]float64
	}{
		{nameNamed, fieldNamed, r.NamedMetrics},
		{nameUtilization, fieldUtilization, r.Utilization},
		{nameCost, fieldCost, r.RequestCost},
	}
	begin := len(dst)
	dst = append(dst, f.prefix()...)
	switch f {
	case Text:
		if len(r.RequestCost) > 0 {
			return dst[:len(dst)-len(f.prefix())], fmt.Errorf("%w: TEXT has no request_cost", ErrInvalidValue)
		}
		start := len(dst)
		for _, s := range scalars {
			dst = appendTextPair(dst, start, s.name, "", s.v)
		}
		for _, m := range mapsOf {
			for _, k := range slices.Sorted(maps.Keys(m.m)) {
				if !textKey(k) {
					return dst[:start-len(f.prefix())], fmt.Errorf("%w: %s name %q cannot be written in TEXT", ErrInvalidValue, m.name, k)
				}
				dst = appendTextPair(dst, start, m.name+".", k, m.m[k])
			}
		}
	case JSON:
		dst = append(dst, '{')
		start := len(dst)
		for _, s := range scalars {
			if s.v != 0 || math.Signbit(s.v) {
				dst = appendJSONSep(dst, start)
				dst = appendJSONString(dst, s.name)
				dst = append(dst, ':')
				dst = strconv.AppendFloat(dst, s.v, 'g', -1, 64)
			}
		}
		for _, m := range mapsOf {
			if len(m.m) == 0 {
				continue
			}
			dst = appendJSONSep(dst, start)
			dst = appendJSONString(dst, m.name)
			dst = append(dst, ':', '{')
			inner := len(dst)
			for _, k := range slices.Sorted(maps.Keys(m.m)) {
				dst = appendJSONSep(dst, inner)
				dst = appendJSONString(dst, k)
				dst = append(dst, ':')
				dst = strconv.AppendFloat(dst, m.m[k], 'g', -1, 64)
			}
			dst = append(dst, '}')
		}
		dst = append(dst, '}')
	case Binary:
		var pb []byte
		for _, s := range scalars {
			pb = appendProtoDouble(pb, s.field, s.v)
		}
		for _, m := range mapsOf {
			for _, k := range slices.Sorted(maps.Keys(m.m)) {
				pb = appendProtoMapEntry(pb, m.field, k, m.m[k])
			}
		}
		dst = base64.StdEncoding.AppendEncode(dst, pb)
	}
	// Validate bounds the names' count, not their length: a value Parse
	// would refuse is refused here too.
	if n := len(dst) - begin; n > MaxHeaderLen {
		return dst[:begin], fmt.Errorf("%w: %v value of %d bytes, more than %d", ErrTooLarge, f, n, MaxHeaderLen)
	}
	return dst, nil
}

// appendTextPair appends ",name+key=v" (no comma at start), skipping a
// zero v as proto3 does.
func appendTextPair(dst []byte, start int, name, key string, v float64) []byte {
	if v == 0 && !math.Signbit(v) && key == "" {
		return dst
	}
	if len(dst) > start {
		dst = append(dst, ',')
	}
	dst = append(dst, name...)
	dst = append(dst, key...)
	dst = append(dst, '=')
	return strconv.AppendFloat(dst, v, 'g', -1, 64)
}

// textKey reports whether a metric name survives TEXT: visible ASCII, no
// ',' (Envoy splits pairs on it) and no '=' (it splits name from value).
func textKey(k string) bool {
	for i := 0; i < len(k); i++ {
		c := k[i]
		if c <= ' ' || c >= 0x7f || c == ',' || c == '=' {
			return false
		}
	}
	return true
}

func appendJSONSep(dst []byte, start int) []byte {
	if len(dst) > start {
		dst = append(dst, ',')
	}
	return dst
}

// appendJSONString quotes s as a JSON string, escaping control bytes and
// DEL so the result is a valid HTTP header value.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c == 0x7f:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// appendProtoDouble appends a double field (wire type 1), skipping zero
// as proto3 does (negative zero is not zero there).
func appendProtoDouble(dst []byte, field int, v float64) []byte {
	bits := math.Float64bits(v)
	if bits == 0 {
		return dst
	}
	dst = appendVarint(dst, uint64(field)<<3|1)
	return appendFixed64(dst, bits)
}

// appendProtoMapEntry appends one map<string, double> entry: a
// length-delimited message with key as field 1 and value as field 2.
func appendProtoMapEntry(dst []byte, field int, k string, v float64) []byte {
	n := 1 + varintLen(uint64(len(k))) + len(k) + 1 + 8
	dst = appendVarint(dst, uint64(field)<<3|2)
	dst = appendVarint(dst, uint64(n))
	dst = append(dst, 1<<3|2)
	dst = appendVarint(dst, uint64(len(k)))
	dst = append(dst, k...)
	dst = append(dst, 2<<3|1)
	return appendFixed64(dst, math.Float64bits(v))
}

func appendVarint(dst []byte, v uint64) []byte {
	for v >= 0x80 {
		dst = append(dst, byte(v)|0x80)
		v >>= 7
	}
	return append(dst, byte(v))
}

func varintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func appendFixed64(dst []byte, v uint64) []byte {
	return append(dst, byte(v), byte(v>>8), byte(v>>16), byte(v>>24),
		byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56))
}
