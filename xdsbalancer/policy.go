package xdsbalancer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/lbgo/balancer/internal/strictjson"
	"google.golang.org/grpc/balancer"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

// TypeURLPrefix starts the type_url of the TypedStruct that Policy
// writes, before the policy's name. gRPC takes the name after the last
// "/" of any type_url (gRFC A52); this is the prefix Envoy's own
// extensions use.
const TypeURLPrefix = "type.googleapis.com/"

// ErrBadPolicy is wrapped by every error Policy returns; the message names
// the policy and what is wrong with it or its config. A config refused by
// a registered policy's parser wraps that parser's error too
// (grpcbalancer.ErrBadConfig for an lbgo_ policy).
var ErrBadPolicy = errors.New("xdsbalancer: bad load-balancing policy")

// Policy returns the entry of an Envoy Cluster's load_balancing_policy
// list that selects the gRPC policy called name with config, as gRPC's
// custom-policy support reads it: a TypedStruct (xds.type.v3) whose
// type_url is TypeURLPrefix+name and whose value is config as a
// google.protobuf.Struct. config is a JSON object given as JSON text
// ([]byte, json.RawMessage or string), as a value that encoding/json
// marshals to an object (a map, a grpcbalancer.Config), or nil (or blank
// text) for {}.
//
// Where name is registered in this process's gRPC balancer registry (an
// lbgo_ policy is, by this package's import of grpcbalancer), Policy
// parses the config as the client will get it, after the Struct's
// conversion, and returns the parser's error: a config the client
// refuses makes it reject the whole Cluster. An unregistered name is not
// checked, since a client may have it: a client without it skips the
// entry for the next one in the list.
//
// A key given twice in one object, or a number a double rounds to 0
// (1e-400) or cannot hold (1e400), is refused; so are, by an lbgo_
// policy's parser, a key that names no field of its config and one that
// names a field only without regard to case.
//
// A Struct holds numbers as doubles: Policy refuses an integer, however
// written (3, 3.0, 30e-1), that a double does not hold exactly (some
// beyond 2^53), and a fraction that a double rounds to an integer
// (3.0000000000000000001), rather than send another number.
func Policy(name string, config any) (*clusterv3.LoadBalancingPolicy_Policy, error) {
	if name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("%w: name %q: empty or with a /", ErrBadPolicy, name)
	}
	js, err := configJSON(config)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadPolicy, name, err)
	}
	fields, err := structFields(js)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadPolicy, name, err)
	}
	s, err := structpb.NewStruct(fields)
	if err != nil { // cannot happen: fields holds only what JSON decodes to
		return nil, fmt.Errorf("%w: %s: %v", ErrBadPolicy, name, err)
	}
	if err := check(name, s); err != nil {
		return nil, err
	}
	ts, err := anypb.New(&xdstypev3.TypedStruct{TypeUrl: TypeURLPrefix + name, Value: s})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadPolicy, name, err)
	}
	return &clusterv3.LoadBalancingPolicy_Policy{
		TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: name, TypedConfig: ts},
	}, nil
}

// configJSON returns config as JSON text.
func configJSON(config any) ([]byte, error) {
	switch c := config.(type) {
	case nil:
		return []byte("{}"), nil
	case []byte:
		return orEmpty(c), nil
	case json.RawMessage:
		return orEmpty(c), nil
	case string:
		return orEmpty([]byte(c)), nil
	}
	js, err := json.Marshal(config)
	if err != nil {
		return nil, fmt.Errorf("config %T: %v", config, err)
	}
	return js, nil
}

// orEmpty returns js, or {} for blank text, as grpcbalancer reads none.
func orEmpty(js []byte) []byte {
	if len(bytes.TrimSpace(js)) == 0 {
		return []byte("{}")
	}
	return js
}

// structFields decodes a JSON object into the values structpb.NewStruct
// takes, numbers as float64, refusing an integer literal that a double
// does not hold exactly.
func structFields(js []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, fmt.Errorf("config %s: %v", clip(js), err)
	}
	if d.More() {
		return nil, fmt.Errorf("config %s: more than one JSON value", clip(js))
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("config %s: not a JSON object", clip(js))
	}
	if err := doubles(obj, ""); err != nil {
		return nil, err
	}
	// A key given twice would be lost in the Struct (its map keeps one),
	// and 1e-400 would arrive as 0.
	if err := strictjson.Check(js, nil); err != nil {
		return nil, err
	}
	return obj, nil
}

// doubles replaces every json.Number in v (a decoded object or list, at
// path) with its float64, refusing an integer literal that the double
// does not equal.
func doubles(v any, path string) error {
	convert := func(x any, at string) (any, error) {
		n, ok := x.(json.Number)
		if !ok {
			return x, doubles(x, at)
		}
		f, err := strconv.ParseFloat(string(n), 64)
		if err != nil {
			return nil, fmt.Errorf("%s %s: beyond a double", at, n)
		}
		held, _ := new(big.Float).SetFloat64(f).Int(nil)
		switch i, ok := integerLiteral(string(n)); {
		case ok && held.Cmp(i) != 0,
			// A fraction the double rounds to an integer, which an int
			// field would take.
			!ok && f != 0 && f == math.Trunc(f):
			h := held.String()
			if len(h) > 24 {
				h = strconv.FormatFloat(f, 'g', -1, 64)
			}
			return nil, fmt.Errorf("%s %s: not exact as a double (%s)", at, n, h)
		}
		return f, nil
	}
	var err error
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) { // the first bad one by name
			if x[k], err = convert(x[k], join(path, k)); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if x[i], err = convert(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// integerLiteral returns the value of lit, a JSON number whose double is
// finite, if it is an integer as written (3, 3.0, 30e-1, 9007199254740993e0).
func integerLiteral(lit string) (*big.Int, bool) {
	sign, unsigned := "", lit
	if rest, ok := strings.CutPrefix(lit, "-"); ok {
		sign, unsigned = "-", rest
	}
	mant, exp, hasExp := strings.Cut(strings.ToLower(unsigned), "e")
	intPart, frac, _ := strings.Cut(mant, ".")
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return new(big.Int), true // zero, whatever the exponent
	}
	e := 0
	if hasExp {
		var err error
		if e, err = strconv.Atoi(exp); err != nil {
			return nil, false // an exponent past an int's: no finite double's integer
		}
	}
	// The value is digits × 10^k, digits without its leading zeros.
	switch k := e - len(frac); {
	case k >= 0:
		digits += strings.Repeat("0", k) // k ≤ 308: the double is finite
	case -k >= len(digits) || strings.Trim(digits[len(digits)+k:], "0") != "":
		return nil, false // a nonzero digit after the point
	default:
		digits = digits[:len(digits)+k]
	}
	i, ok := new(big.Int).SetString(sign+digits, 10)
	return i, ok
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// check parses the config of a registered policy as gRPC will: the Struct
// marshalled to JSON (by its protojson MarshalJSON), given to the policy's
// ParseConfig.
func check(name string, s *structpb.Struct) error {
	b := balancer.Get(name)
	if b == nil {
		return nil
	}
	parser, ok := b.(balancer.ConfigParser)
	if !ok {
		return nil
	}
	js, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrBadPolicy, name, err)
	}
	if _, err := parser.ParseConfig(js); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrBadPolicy, name, err)
	}
	return nil
}

// clip returns JSON text cut to 64 bytes.
func clip(js []byte) string {
	js = bytes.TrimSpace(js)
	if len(js) > 64 {
		return string(js[:61]) + "..."
	}
	return string(js)
}
