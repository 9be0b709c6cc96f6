package loadreport

import (
	"encoding/base64"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Parse decodes the value of an endpoint-load-metrics header: "TEXT ",
// "JSON " or "BIN " then the report, as Envoy reads it. It never trusts a
// report partly: a value that fails any rule returns the zero Report and
// an error wrapping ErrNoReport, ErrUnknownFormat, ErrMalformed,
// ErrInvalidValue or ErrTooLarge. The rules are in parse's doc.
func Parse(value string) (Report, error) {
	r, err := parse(value)
	if err != nil {
		return Report{}, err
	}
	return r, nil
}

// FromHeader reads the report from a response's headers: HeaderNameBin
// (unprefixed base64 protobuf, as gRPC servers send it) if present,
// else HeaderName, each by its first value, the order Envoy's
// parseOrcaLoadReportHeaders uses.
func FromHeader(h http.Header) (Report, error) {
	if v := h.Values(HeaderNameBin); len(v) > 0 {
		var r Report
		if err := parseBinary(v[0], &r); err != nil {
			return Report{}, err
		}
		if err := r.Validate(); err != nil {
			return Report{}, err
		}
		return r, nil
	}
	if v := h.Values(HeaderName); len(v) > 0 {
		return Parse(v[0])
	}
	return Report{}, fmt.Errorf("%w: no %s header", ErrNoReport, HeaderName)
}

// parse follows Envoy's source/common/orca/orca_parser.cc
// (parseOrcaLoadReportHeaders and its helpers) and its tests
// (test/common/orca/orca_parser_test.cc):
//   - the prefix is case-sensitive and followed by one space; any other
//     start is an unknown format, named by its first word (at most 5
//     bytes, as Envoy's message does);
//   - TEXT: pairs split on ',', each trimmed of spaces and tabs, empty
//     pairs skipped; a pair splits at its first '=' (or, with none, its
//     first ':', which Envoy also accepts); an empty name or value, a name
//     seen before, or a name other than the five scalar fields,
//     named_metrics.<key> and utilization.<key> is malformed
//     (request_cost has no TEXT name in Envoy); a value is a decimal
//     number (no hex, no "inf" or "nan" words beyond what the value check
//     rejects);
//   - JSON: one object, the proto's field names or their lowerCamelCase
//     JSON names; an unknown field is malformed (Envoy rejects it), so is
//     a field or map key given twice (protojson rejects both), a value
//     that is not a JSON number (protojson would also take numbers in
//     strings: not accepted here) and anything after the object;
//   - BIN: padded or unpadded standard base64 (Envoy accepts both since
//     grpc-go sends it unpadded); an empty value or payload is malformed
//     as in Envoy; the protobuf is read as protobuf does (unknown fields
//     skipped, the last of a repeated scalar or map key wins) except that
//     a known field of the wrong wire type, a group, a truncated field or
//     an overlong varint is malformed;
//   - then every format: Validate's value rules (Envoy's TEXT rules:
//     NaN, infinite and negative values rejected, applied to all three;
//     a number too large for a float64 counts as infinite) and the
//     MaxHeaderLen and MaxMetrics limits.
func parse(value string) (Report, error) {
	if value == "" {
		return Report{}, ErrNoReport
	}
	if len(value) > MaxHeaderLen {
		return Report{}, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(value), MaxHeaderLen)
	}
	var r Report
	var err error
	switch {
	case strings.HasPrefix(value, "TEXT "):
		err = parseText(value[len("TEXT "):], &r)
	case strings.HasPrefix(value, "JSON "):
		err = parseJSON(value[len("JSON "):], &r)
	case strings.HasPrefix(value, "BIN "):
		err = parseBinary(value[len("BIN "):], &r)
	default:
		p := value[:min(5, len(value))]
		if i := strings.IndexByte(p, ' '); i >= 0 {
			p = p[:i]
		}
		return Report{}, fmt.Errorf("%w: %q", ErrUnknownFormat, p)
	}
	if err != nil {
		return Report{}, err
	}
	if err := r.Validate(); err != nil {
		return Report{}, err
	}
	return r, nil
}

func parseText(s string, r *Report) error {
	seen := make(map[string]struct{})
	for pair := range strings.SplitSeq(s, ",") {
		pair = strings.Trim(pair, " \t")
		if pair == "" {
			continue
		}
		i := strings.IndexByte(pair, '=')
		if i < 0 {
			i = strings.IndexByte(pair, ':')
		}
		if i < 0 {
			return fmt.Errorf("%w: TEXT pair %q has no value", ErrMalformed, pair)
		}
		name, num := pair[:i], strings.Trim(pair[i+1:], " \t")
		if name == "" {
			return fmt.Errorf("%w: TEXT pair %q has no name", ErrMalformed, pair)
		}
		if num == "" {
			return fmt.Errorf("%w: TEXT %s has no value", ErrMalformed, name)
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%w: TEXT has %s twice", ErrMalformed, name)
		}
		seen[name] = struct{}{}
		v, err := parseDecimal(name, num)
		if err != nil {
			return err
		}
		if err := r.set(name, v); err != nil {
			return err
		}
	}
	return nil
}

// parseDecimal reads a decimal number; hex floats and Go's underscores
// (which strconv takes) are malformed, a value beyond float64 is infinite.
func parseDecimal(name, s string) (float64, error) {
	if strings.ContainsAny(s, "xXpP_") {
		return 0, fmt.Errorf("%w: %s=%q is not a decimal number", ErrMalformed, name, s)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && math.IsInf(v, 0) {
			return 0, fmt.Errorf("%w: %s=%q is beyond a float64", ErrInvalidValue, name, s)
		}
		return 0, fmt.Errorf("%w: %s=%q is not a number", ErrMalformed, name, s)
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		return 0, checkValue(name, "", v)
	}
	return v, nil
}

// set stores a TEXT name's value.
func (r *Report) set(name string, v float64) error {
	if f := scalarNamed(name); f != nil {
		*f.of(r) = v
		return nil
	}
	if k, ok := strings.CutPrefix(name, nameNamed+"."); ok {
		return putMetric(&r.NamedMetrics, r, nameNamed, k, v)
	}
	if k, ok := strings.CutPrefix(name, nameUtilization+"."); ok {
		return putMetric(&r.Utilization, r, nameUtilization, k, v)
	}
	return fmt.Errorf("%w: unsupported metric name %q", ErrMalformed, name)
}

// putMetric sets (*m)[k] = v, creating the map, and enforces MaxMetrics
// as entries arrive so a hostile report cannot grow a map unbounded.
func putMetric(m *map[string]float64, r *Report, field, k string, v float64) error {
	if err := checkKey(field, k); err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]float64)
	}
	if _, ok := (*m)[k]; !ok && len(r.NamedMetrics)+len(r.Utilization)+len(r.RequestCost) >= MaxMetrics {
		return fmt.Errorf("%w: more than %d metrics", ErrTooLarge, MaxMetrics)
	}
	(*m)[k] = v
	return nil
}

func parseBinary(s string, r *Report) error {
	if s == "" {
		return fmt.Errorf("%w: empty BIN value", ErrMalformed)
	}
	enc := base64.StdEncoding
	if len(s)%4 != 0 {
		enc = base64.RawStdEncoding
	}
	b, err := enc.DecodeString(s)
	if err != nil {
		return fmt.Errorf("%w: BIN value is not base64: %v", ErrMalformed, err)
	}
	if len(b) == 0 {
		return fmt.Errorf("%w: BIN value decodes to nothing", ErrMalformed)
	}
	return decodeProto(b, r)
}

// decodeProto reads an OrcaLoadReport from the protobuf wire format.
func decodeProto(b []byte, r *Report) error {
	for len(b) > 0 {
		tag, n := readVarint(b)
		if n <= 0 {
			return fmt.Errorf("%w: BIN: bad field tag", ErrMalformed)
		}
		b = b[n:]
		field, wt := tag>>3, tag&7
		if field == 0 || field > math.MaxInt32 {
			return fmt.Errorf("%w: BIN: field number %d", ErrMalformed, field)
		}
		if f := scalarNumbered(field); f != nil {
			if wt != 1 {
				return fmt.Errorf("%w: BIN: field %d has wire type %d, want 1 (double)", ErrMalformed, field, wt)
			}
			if len(b) < 8 {
				return fmt.Errorf("%w: BIN: field %d truncated", ErrMalformed, field)
			}
			*f.of(r) = math.Float64frombits(fixed64(b))
			b = b[8:]
			continue
		}
		switch field {
		case fieldRPS:
			if wt != 0 {
				return fmt.Errorf("%w: BIN: field %d has wire type %d, want 0 (uint64)", ErrMalformed, field, wt)
			}
			if _, n := readVarint(b); n <= 0 {
				return fmt.Errorf("%w: BIN: field %d truncated", ErrMalformed, field)
			} else {
				b = b[n:]
			}
		case fieldCost, fieldUtilization, fieldNamed:
			if wt != 2 {
				return fmt.Errorf("%w: BIN: field %d has wire type %d, want 2 (map entry)", ErrMalformed, field, wt)
			}
			entry, rest, err := readBytes(b, field)
			if err != nil {
				return err
			}
			b = rest
			k, v, err := decodeEntry(entry, field)
			if err != nil {
				return err
			}
			switch field {
			case fieldCost:
				err = putMetric(&r.RequestCost, r, nameCost, k, v)
			case fieldUtilization:
				err = putMetric(&r.Utilization, r, nameUtilization, k, v)
			default:
				err = putMetric(&r.NamedMetrics, r, nameNamed, k, v)
			}
			if err != nil {
				return err
			}
		default:
			rest, err := skipField(b, field, wt)
			if err != nil {
				return err
			}
			b = rest
		}
	}
	return nil
}

// decodeEntry reads a map<string, double> entry; a missing key or value
// is the zero value, as protobuf has it (an empty key then fails
// Validate).
func decodeEntry(b []byte, outer uint64) (string, float64, error) {
	var k string
	var v float64
	for len(b) > 0 {
		tag, n := readVarint(b)
		if n <= 0 {
			return "", 0, fmt.Errorf("%w: BIN: bad tag in field %d's entry", ErrMalformed, outer)
		}
		b = b[n:]
		field, wt := tag>>3, tag&7
		switch {
		case field == 1 && wt == 2:
			s, rest, err := readBytes(b, outer)
			if err != nil {
				return "", 0, err
			}
			if !utf8.Valid(s) {
				return "", 0, fmt.Errorf("%w: BIN: field %d key %q is not UTF-8", ErrInvalidValue, outer, s)
			}
			k, b = string(s), rest
		case field == 2 && wt == 1:
			if len(b) < 8 {
				return "", 0, fmt.Errorf("%w: BIN: field %d's value truncated", ErrMalformed, outer)
			}
			v, b = math.Float64frombits(fixed64(b)), b[8:]
		case field == 1 || field == 2:
			return "", 0, fmt.Errorf("%w: BIN: field %d's entry field %d has wire type %d", ErrMalformed, outer, field, wt)
		case field == 0:
			return "", 0, fmt.Errorf("%w: BIN: field number 0 in field %d's entry", ErrMalformed, outer)
		default:
			rest, err := skipField(b, field, wt)
			if err != nil {
				return "", 0, err
			}
			b = rest
		}
	}
	return k, v, nil
}

func skipField(b []byte, field, wt uint64) ([]byte, error) {
	switch wt {
	case 0:
		if _, n := readVarint(b); n > 0 {
			return b[n:], nil
		}
	case 1:
		if len(b) >= 8 {
			return b[8:], nil
		}
	case 2:
		_, rest, err := readBytes(b, field)
		return rest, err
	case 5:
		if len(b) >= 4 {
			return b[4:], nil
		}
	default:
		return nil, fmt.Errorf("%w: BIN: field %d has wire type %d (groups and unknown types are not read)", ErrMalformed, field, wt)
	}
	return nil, fmt.Errorf("%w: BIN: field %d truncated", ErrMalformed, field)
}

func readBytes(b []byte, field uint64) (val, rest []byte, err error) {
	l, n := readVarint(b)
	if n <= 0 || l > uint64(len(b)-n) {
		return nil, nil, fmt.Errorf("%w: BIN: field %d's length runs past the end", ErrMalformed, field)
	}
	return b[n : n+int(l)], b[n+int(l):], nil
}

// readVarint returns the value and its length, or n <= 0 if b ends first
// or the varint is longer than 10 bytes or overflows 64 bits.
func readVarint(b []byte) (uint64, int) {
	var v uint64
	for i := 0; i < len(b) && i < 10; i++ {
		c := b[i]
		if i == 9 && c > 1 {
			return 0, -1
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, i + 1
		}
	}
	return 0, -1
}

func fixed64(b []byte) uint64 {
	return uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 |
		uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
}
