package loadreport

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// jsonFields maps each name the JSON format accepts, the proto field name
// or protojson's lowerCamelCase one, to the proto field name.
var jsonFields = map[string]string{
	nameCPU: nameCPU, "cpuUtilization": nameCPU,
	nameMem: nameMem, "memUtilization": nameMem,
	nameApp: nameApp, "applicationUtilization": nameApp,
	nameRPS: nameRPS, "rpsFractional": nameRPS,
	nameEPS:   nameEPS,
	"rps":     "rps", // deprecated uint64: read and dropped
	nameNamed: nameNamed, "namedMetrics": nameNamed,
	nameUtilization: nameUtilization,
	nameCost:        nameCost, "requestCost": nameCost,
}

func parseJSON(s string, r *Report) error {
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	seen := make(map[string]struct{})
	for dec.More() {
		key, err := jsonKey(dec)
		if err != nil {
			return err
		}
		name, ok := jsonFields[key]
		if !ok {
			return fmt.Errorf("%w: JSON: unknown field %q", ErrMalformed, key)
		}
		if _, dup := seen[name]; dup {
			return fmt.Errorf("%w: JSON: field %s given twice", ErrMalformed, name)
		}
		seen[name] = struct{}{}
		switch name {
		case nameNamed, nameUtilization, nameCost:
			m := &r.NamedMetrics
			if name == nameUtilization {
				m = &r.Utilization
			} else if name == nameCost {
				m = &r.RequestCost
			}
			if err := jsonMap(dec, r, name, m); err != nil {
				return err
			}
		case "rps":
			n, err := jsonNumber(dec, name)
			if err != nil {
				return err
			}
			if _, err := strconv.ParseUint(n.String(), 10, 64); err != nil {
				return fmt.Errorf("%w: JSON: rps=%s is not a uint64", ErrMalformed, n)
			}
		default:
			v, err := jsonFloat(dec, name)
			if err != nil {
				return err
			}
			_ = r.set(name, v) // name is one of the five scalars
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: JSON: data after the object", ErrMalformed)
	}
	return nil
}

func jsonMap(dec *json.Decoder, r *Report, field string, m *map[string]float64) error {
	if err := expectDelim(dec, '{'); err != nil {
		return fmt.Errorf("%w (field %s)", err, field)
	}
	if *m == nil {
		*m = make(map[string]float64)
	}
	for dec.More() {
		k, err := jsonKey(dec)
		if err != nil {
			return err
		}
		if _, dup := (*m)[k]; dup {
			return fmt.Errorf("%w: JSON: %s key %q given twice", ErrMalformed, field, k)
		}
		v, err := jsonFloat(dec, field+"."+k)
		if err != nil {
			return err
		}
		if err := putMetric(m, r, field, k, v); err != nil {
			return err
		}
	}
	return expectDelim(dec, '}')
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	t, err := dec.Token()
	if err != nil {
		return fmt.Errorf("%w: JSON: %v", ErrMalformed, err)
	}
	if d, ok := t.(json.Delim); !ok || d != want {
		return fmt.Errorf("%w: JSON: got %v, want %q", ErrMalformed, t, want)
	}
	return nil
}

func jsonKey(dec *json.Decoder) (string, error) {
	t, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("%w: JSON: %v", ErrMalformed, err)
	}
	k, ok := t.(string)
	if !ok {
		return "", fmt.Errorf("%w: JSON: got %v, want a name", ErrMalformed, t)
	}
	return k, nil
}

func jsonNumber(dec *json.Decoder, name string) (json.Number, error) {
	t, err := dec.Token()
	if err != nil {
		return "", fmt.Errorf("%w: JSON: %s: %v", ErrMalformed, name, err)
	}
	n, ok := t.(json.Number)
	if !ok {
		return "", fmt.Errorf("%w: JSON: %s is %T %v, want a number", ErrMalformed, name, t, t)
	}
	return n, nil
}

func jsonFloat(dec *json.Decoder, name string) (float64, error) {
	n, err := jsonNumber(dec, name)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(n.String(), 64)
	if err != nil {
		if errors.Is(err, strconv.ErrRange) && math.IsInf(v, 0) {
			return 0, fmt.Errorf("%w: JSON: %s=%s is beyond a float64", ErrInvalidValue, name, n)
		}
		return 0, fmt.Errorf("%w: JSON: %s=%s: %v", ErrMalformed, name, n, err)
	}
	if err := checkValue(name, "", v); err != nil {
		return 0, err
	}
	return v, nil
}
