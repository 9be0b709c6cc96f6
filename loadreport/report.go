package loadreport

import (
	"errors"
	"fmt"
	"math"
	"unicode/utf8"
)

// Report is a server's load report: the fields of the ORCA message
// xds.data.orca.v3.OrcaLoadReport that a balancer reads. A zero field is
// unset (proto3 does not tell the two apart). A nil map is empty.
type Report struct {
	CPUUtilization         float64            // cpu_utilization: CPU in use, a fraction of what the server has
	MemUtilization         float64            // mem_utilization: memory in use, a fraction
	ApplicationUtilization float64            // application_utilization: the application's own utilization; A58 prefers it to CPU
	RPSFractional          float64            // rps_fractional: requests per second the server completes
	EPS                    float64            // eps: errors per second
	NamedMetrics           map[string]float64 // named_metrics: application metrics
	Utilization            map[string]float64 // utilization: named utilizations, each a fraction
	RequestCost            map[string]float64 // request_cost: this request's cost by name
}

// Errors returned by Parse, wrapped with the offending value.
var (
	// ErrNoReport: the header is empty or absent.
	ErrNoReport = errors.New("loadreport: no load report")
	// ErrUnknownFormat: the value starts with none of "TEXT ", "JSON ", "BIN ".
	ErrUnknownFormat = errors.New("loadreport: unknown report format")
	// ErrMalformed: the value does not decode (bad syntax, bad base64,
	// truncated protobuf, wrong type, unknown or duplicate name).
	ErrMalformed = errors.New("loadreport: malformed report")
	// ErrInvalidValue: a value decodes but is NaN, infinite or negative,
	// or a metric name is empty or not UTF-8.
	ErrInvalidValue = errors.New("loadreport: invalid value")
	// ErrTooLarge: the value is longer than MaxHeaderLen or has more than
	// MaxMetrics entries in its maps.
	ErrTooLarge = errors.New("loadreport: report too large")
)

// MaxHeaderLen is the longest header value Parse reads, in bytes.
const MaxHeaderLen = 8 << 10

// MaxMetrics is the most map entries (named_metrics, utilization and
// request_cost together) a report may carry.
const MaxMetrics = 64

// Validate reports whether r is a report Parse would accept: every value
// finite and not negative, every metric name non-empty UTF-8, at most
// MaxMetrics names. The error wraps ErrInvalidValue or ErrTooLarge.
func (r Report) Validate() error {
	for _, f := range scalarFields {
		if err := checkValue(f.name, "", *f.of(&r)); err != nil {
			return err
		}
	}
	if n := len(r.NamedMetrics) + len(r.Utilization) + len(r.RequestCost); n > MaxMetrics {
		return fmt.Errorf("%w: %d metrics, more than %d", ErrTooLarge, n, MaxMetrics)
	}
	for _, m := range [...]struct {
		name string
		m    map[string]float64
	}{
		{"named_metrics", r.NamedMetrics},
		{"utilization", r.Utilization},
		{"request_cost", r.RequestCost},
	} {
		for k, v := range m.m {
			if err := checkKey(m.name, k); err != nil {
				return err
			}
			if err := checkValue(m.name, k, v); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkValue is Envoy's rule for a TEXT value (orca_parser.cc rejects NaN,
// infinity and negative values), applied here to every format.
// The name is built only for the error: a valid report costs no
// allocation.
func checkValue(field, key string, v float64) error {
	if !math.IsNaN(v) && !math.IsInf(v, 0) && v >= 0 {
		return nil
	}
	name := field
	if key != "" {
		name = field + "." + key
	}
	switch {
	case math.IsNaN(v):
		return fmt.Errorf("%w: %s is NaN", ErrInvalidValue, name)
	case math.IsInf(v, 0):
		return fmt.Errorf("%w: %s is %v", ErrInvalidValue, name, v)
	case v < 0:
		return fmt.Errorf("%w: %s is negative (%v)", ErrInvalidValue, name, v)
	}
	return nil
}

func checkKey(field, key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty %s name", ErrInvalidValue, field)
	}
	if !utf8.ValidString(key) {
		return fmt.Errorf("%w: %s name %q is not UTF-8", ErrInvalidValue, field, key)
	}
	return nil
}

// Equal reports whether r and o hold the same values; a nil map equals an
// empty one.
func (r Report) Equal(o Report) bool {
	return r.CPUUtilization == o.CPUUtilization && r.MemUtilization == o.MemUtilization &&
		r.ApplicationUtilization == o.ApplicationUtilization && r.RPSFractional == o.RPSFractional &&
		r.EPS == o.EPS && mapsEqual(r.NamedMetrics, o.NamedMetrics) &&
		mapsEqual(r.Utilization, o.Utilization) && mapsEqual(r.RequestCost, o.RequestCost)
}

func mapsEqual(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// scalarField is one of a Report's five scalars: its name in TEXT and
// JSON and its field number in the protobuf.
type scalarField struct {
	name  string
	field int
}

// scalarFields are the five scalars in the order the encodings write
// them.
var scalarFields = [...]scalarField{
	{nameCPU, fieldCPU}, {nameMem, fieldMem}, {nameApp, fieldApp},
	{nameRPS, fieldRPSFrac}, {nameEPS, fieldEPS},
}

// of returns where f is in r. A method, not a function value in the
// table, so that r does not escape (Validate allocates nothing).
func (f *scalarField) of(r *Report) *float64 {
	switch f.field {
	case fieldCPU:
		return &r.CPUUtilization
	case fieldMem:
		return &r.MemUtilization
	case fieldApp:
		return &r.ApplicationUtilization
	case fieldRPSFrac:
		return &r.RPSFractional
	default: // fieldEPS
		return &r.EPS
	}
}

// scalarNamed returns the scalar called name in TEXT, or nil.
func scalarNamed(name string) *scalarField {
	for i := range scalarFields {
		if scalarFields[i].name == name {
			return &scalarFields[i]
		}
	}
	return nil
}

// scalarNumbered returns the scalar of protobuf field number n, or nil.
func scalarNumbered(n uint64) *scalarField {
	for i := range scalarFields {
		if uint64(scalarFields[i].field) == n {
			return &scalarFields[i]
		}
	}
	return nil
}
