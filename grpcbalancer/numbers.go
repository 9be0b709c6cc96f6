package grpcbalancer

import (
	"math"
	"strconv"
	"strings"
)

// integralNumbers returns js, valid JSON, with every number that is an
// integer as written but not written as one (3.0, 7e0, 0.02E2) rewritten
// as that integer (3, 7, 2), so that encoding/json puts it in an int
// field. An xDS control plane's config arrives so: gRPC turns the
// Cluster's google.protobuf.Struct, whose numbers are doubles, into JSON,
// and other JSON writers write 3 as 3.0. Strings are left alone, and so
// is a number with a nonzero digit after the point (3.5, 35e-1,
// 3.0000000000000000001, which a double would round to 3) or beyond
// ±2^53, where a double no longer holds every integer: an int field
// still refuses those, naming them as written.
func integralNumbers(js []byte) []byte {
	var out []byte // nil until a number is rewritten
	last := 0      // js[:last] is in out
	inString, escaped := false, false
	for i := 0; i < len(js); i++ {
		c := js[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || c >= '0' && c <= '9':
			j := i
			for j < len(js) && strings.IndexByte("+-.0123456789eE", js[j]) >= 0 {
				j++
			}
			if n, ok := integerOf(string(js[i:j])); ok {
				out = append(append(out, js[last:i]...), n...)
				last = j
			}
			i = j - 1
		}
	}
	if out == nil {
		return js
	}
	return append(out, js[last:]...)
}

// integerOf returns the JSON number lit as an integer literal if it is
// one written otherwise (with a point or an exponent) whose value is an
// integer of at most 2^53 in magnitude.
func integerOf(lit string) (string, bool) {
	mant, exp, hasExp := strings.Cut(strings.ToLower(lit), "e")
	intPart, frac, hasPoint := strings.Cut(strings.TrimPrefix(mant, "-"), ".")
	if !hasExp && !hasPoint {
		return "", false // an integer literal already
	}
	e := 0
	if hasExp {
		var err error
		if e, err = strconv.Atoi(exp); err != nil || e < -400 || e > 400 {
			return "", false // far beyond 2^53, or below any integer but 0 written with ~400 digits
		}
	}
	// The digits at and after index len(intPart)+e of intPart+frac are
	// the fraction: the value is an integer when they are all zero.
	digits := intPart + frac
	if p := len(intPart) + e; p > 0 {
		if p >= len(digits) {
			digits = ""
		} else {
			digits = digits[p:]
		}
	}
	if strings.Trim(digits, "0") != "" {
		return "", false
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.Abs(f) > 1<<53 {
		return "", false
	}
	// An integer of magnitude at most 2^53 is a double exactly, and
	// ParseFloat rounds correctly, so f is the value written.
	return strconv.FormatInt(int64(f), 10), true
}
