// Package strictjson checks JSON text against the fields of a Go struct
// before encoding/json decodes it into one, refusing what encoding/json lets
// pass silently: a key that names no field, a key that names one only
// without regard to case ("MAXFAILS" for maxFails), a key repeated in one
// object (encoding/json keeps the last), and a number that a float64 does
// not hold (beyond its range, or not zero but so small that it rounds to
// zero). Type mismatches are left to encoding/json, which names them. The
// policies' config parsers read configs from the network (a resolver's
// service config, an xDS control plane): a typo there must not leave a
// default in force unseen.
package strictjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Error is a key or value that Check refuses.
type Error struct {
	Path  string // the key, after its objects' keys: "reportedLoad.clients", "[2].size"
	Value string // the number as written, or ""
	Why   string
}

func (e *Error) Error() string {
	if e.Value != "" {
		return fmt.Sprintf("%s %s: %s", e.Path, e.Value, e.Why)
	}
	return e.Path + ": " + e.Why
}

// Check returns an *Error for the first key or number in js that it
// refuses, reading js as a value of type shape: an object against a struct
// shape must use the struct's JSON field names exactly, once each, and its
// fields' values are read against their types; shape nil reads any JSON,
// refusing only repeated keys and numbers out of a float64's range. Text
// that is not JSON is an error too; one of the wrong type is not.
func Check(js []byte, shape reflect.Type) error {
	if !json.Valid(js) {
		var v any
		return json.Unmarshal(js, &v) // says where and why
	}
	d := json.NewDecoder(bytes.NewReader(js))
	d.UseNumber()
	return value(d, shape, &path{}) // json.Valid holds one value only
}

// path is where a value is: its objects' keys and arrays' indexes, made a
// string only for an error, since building it at every level would cost
// time and memory quadratic in the depth of the text.
type path struct{ segs []seg }

type seg struct {
	key   string
	index int // for an array's element, where key is ""
	elem  bool
}

func (p *path) push(s seg) { p.segs = append(p.segs, s) }
func (p *path) pop()       { p.segs = p.segs[:len(p.segs)-1] }

func (p *path) String() string {
	var b strings.Builder
	for i, s := range p.segs {
		switch {
		case s.elem:
			fmt.Fprintf(&b, "[%d]", s.index)
		case i > 0:
			b.WriteString(".")
			fallthrough
		default:
			b.WriteString(s.key)
		}
	}
	return b.String()
}

// value reads one value of d against shape (nil: any), at path.
func value(d *json.Decoder, shape reflect.Type, path *path) error {
	for shape != nil && shape.Kind() == reflect.Pointer {
		shape = shape.Elem()
	}
	tok, err := d.Token()
	if err != nil {
		return err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			var elem reflect.Type
			if shape != nil && (shape.Kind() == reflect.Slice || shape.Kind() == reflect.Array) {
				elem = shape.Elem()
			}
			for i := 0; d.More(); i++ {
				path.push(seg{index: i, elem: true})
				if err := value(d, elem, path); err != nil {
					return err
				}
				path.pop()
			}
		} else if err := object(d, shape, path); err != nil {
			return err
		}
		_, err := d.Token() // the closing delimiter
		return err
	case json.Number:
		return number(t, path)
	}
	return nil
}

// object reads the keys and values of an object whose '{' was read.
func object(d *json.Decoder, shape reflect.Type, path *path) error {
	var fields map[string]reflect.Type // nil: any key
	var elem reflect.Type
	switch {
	case shape == nil:
	case shape.Kind() == reflect.Struct:
		fields = jsonFields(shape)
	case shape.Kind() == reflect.Map:
		elem = shape.Elem()
	}
	seen := map[string]bool{}
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return err
		}
		key := tok.(string) // an object's keys are strings, or Token fails
		path.push(seg{key: key})
		if seen[key] {
			return &Error{Path: path.String(), Why: "given twice"}
		}
		seen[key] = true
		t := elem
		if fields != nil {
			ft, ok := fields[key]
			if !ok {
				for name := range fields {
					if strings.EqualFold(name, key) {
						return &Error{Path: path.String(), Why: fmt.Sprintf("no such field; the field is %s (names match exactly)", name)}
					}
				}
				return &Error{Path: path.String(), Why: "no such field"}
			}
			t = ft
		}
		if err := value(d, t, path); err != nil {
			return err
		}
		path.pop()
	}
	return nil
}

// jsonFields returns a struct's fields by their JSON names.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	fields := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fields[name] = f.Type
	}
	return fields
}

// number refuses a number that a float64 does not hold.
func number(n json.Number, path *path) error {
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return &Error{Path: path.String(), Value: string(n), Why: "beyond a double's range"}
	}
	if f == 0 && strings.ContainsAny(mantissa(string(n)), "123456789") {
		return &Error{Path: path.String(), Value: string(n), Why: "not zero, but a double rounds it to zero"}
	}
	return nil
}

// mantissa returns a JSON number's digits before its exponent.
func mantissa(n string) string {
	if i := strings.IndexAny(n, "eE"); i >= 0 {
		return n[:i]
	}
	return n
}
