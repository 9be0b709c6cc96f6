package grpcbalancer

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/lbgo/balancer/internal/strictjson"
	"google.golang.org/grpc/codes"
)

// ErrBadHedgingConfig is wrapped by every error NewHedging returns for its
// service config; the message names the key as a path from the top
// ("methodConfig[0].hedgingPolicy.maxAttempts") and its value as written.
var ErrBadHedgingConfig = errors.New("grpcbalancer: bad hedging config")

// MaxHedgedAttempts is the cap gRFC A6 puts on a hedgingPolicy's
// maxAttempts: a larger value is taken as this.
const MaxHedgedAttempts = 5

// MaxHedgingDelay bounds a hedgingPolicy's hedgingDelay: a longer one is
// refused as a slip of units (a delay past the RPC's deadline sends no
// hedge anyway).
const MaxHedgingDelay = time.Hour

// The service config as NewHedging reads it: the keys grpc-go 1.85 knows,
// spelled exactly. What grpc-go checks itself is kept raw (any value, no
// key repeated); the hedging policy is checked here, since grpc-go ignores
// it.
type hedgeServiceConfig struct {
	LoadBalancingPolicy json.RawMessage     `json:"loadBalancingPolicy"`
	LoadBalancingConfig json.RawMessage     `json:"loadBalancingConfig"`
	MethodConfig        []hedgeMethodConfig `json:"methodConfig"`
	RetryThrottling     json.RawMessage     `json:"retryThrottling"`
	HealthCheckConfig   json.RawMessage     `json:"healthCheckConfig"`
}

type hedgeMethodConfig struct {
	Name                    []hedgeName     `json:"name"`
	WaitForReady            json.RawMessage `json:"waitForReady"`
	Timeout                 json.RawMessage `json:"timeout"`
	MaxRequestMessageBytes  json.RawMessage `json:"maxRequestMessageBytes"`
	MaxResponseMessageBytes json.RawMessage `json:"maxResponseMessageBytes"`
	RetryPolicy             json.RawMessage `json:"retryPolicy"`
	HedgingPolicy           *hedgeJSON      `json:"hedgingPolicy"`
}

type hedgeName struct {
	Service *string `json:"service"`
	Method  *string `json:"method"`
}

// hedgeJSON is gRFC A6's hedgingPolicy, each field as written.
type hedgeJSON struct {
	MaxAttempts         json.RawMessage `json:"maxAttempts"`
	HedgingDelay        json.RawMessage `json:"hedgingDelay"`
	NonFatalStatusCodes json.RawMessage `json:"nonFatalStatusCodes"`
}

// hedgePolicy is a checked hedgingPolicy.
type hedgePolicy struct {
	maxAttempts int // in [2, MaxHedgedAttempts]
	delay       time.Duration
	nonFatal    codeSet
}

// hedgePolicies maps a method path to its policy, as grpc-go finds a
// method's config: "/service/method", else "/service/", else "" (the
// default). A nil policy is a method config without hedging, which hides
// a less specific one's.
type hedgePolicies map[string]*hedgePolicy

func (m hedgePolicies) lookup(method string) *hedgePolicy {
	if p, ok := m[method]; ok {
		return p
	}
	if i := strings.LastIndexByte(method, '/'); i > 0 {
		if p, ok := m[method[:i+1]]; ok {
			return p
		}
	}
	return m[""]
}

// parseHedging reads the hedging policies of a service config.
func parseHedging(js string) (hedgePolicies, error) {
	if err := strictjson.Check([]byte(js), reflect.TypeFor[hedgeServiceConfig]()); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadHedgingConfig, err)
	}
	var sc hedgeServiceConfig
	if err := json.Unmarshal([]byte(js), &sc); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			return nil, fmt.Errorf("%w: %s: not %s", ErrBadHedgingConfig, ute.Field, kindName(ute.Type))
		}
		return nil, fmt.Errorf("%w: %v", ErrBadHedgingConfig, err)
	}
	m := hedgePolicies{}
	for i, mc := range sc.MethodConfig {
		at := fmt.Sprintf("methodConfig[%d]", i)
		var p *hedgePolicy
		if mc.HedgingPolicy != nil {
			if len(mc.RetryPolicy) > 0 && string(mc.RetryPolicy) != "null" {
				return nil, fmt.Errorf("%w: %s: both retryPolicy and hedgingPolicy (gRFC A6 allows one)", ErrBadHedgingConfig, at)
			}
			var err error
			if p, err = checkHedge(at+".hedgingPolicy", mc.HedgingPolicy); err != nil {
				return nil, err
			}
		}
		for j, n := range mc.Name {
			svc, meth := deref(n.Service), deref(n.Method)
			path := ""
			switch {
			case svc == "" && meth != "":
				return nil, fmt.Errorf("%w: %s.name[%d]: a method (%q) without a service", ErrBadHedgingConfig, at, j, meth)
			case svc != "":
				path = "/" + svc + "/" + meth
			}
			if _, dup := m[path]; dup {
				return nil, fmt.Errorf("%w: %s.name[%d]: %s named twice", ErrBadHedgingConfig, at, j, nameOf(svc, meth))
			}
			m[path] = p
		}
	}
	return m, nil
}

// checkHedge checks one hedgingPolicy, at the path at.
func checkHedge(at string, h *hedgeJSON) (*hedgePolicy, error) {
	bad := func(field string, v json.RawMessage, why string) error {
		return fmt.Errorf("%w: %s.%s %s: %s", ErrBadHedgingConfig, at, field, clip(v), why)
	}
	p := &hedgePolicy{}
	if len(h.MaxAttempts) == 0 {
		return nil, fmt.Errorf("%w: %s: no maxAttempts (required)", ErrBadHedgingConfig, at)
	}
	f, err := strconv.ParseFloat(string(h.MaxAttempts), 64)
	switch {
	case err != nil || h.MaxAttempts[0] == '"':
		return nil, bad("maxAttempts", h.MaxAttempts, "not a number")
	case f != float64(int64(f)):
		return nil, bad("maxAttempts", h.MaxAttempts, "not an integer")
	case f < 2:
		return nil, bad("maxAttempts", h.MaxAttempts, "must be greater than 1")
	}
	p.maxAttempts = int(min(f, MaxHedgedAttempts))

	if len(h.HedgingDelay) > 0 && string(h.HedgingDelay) != "null" {
		var s string
		if json.Unmarshal(h.HedgingDelay, &s) != nil {
			return nil, bad("hedgingDelay", h.HedgingDelay, "not a string")
		}
		d, err := protoDuration(s)
		if err != nil {
			return nil, bad("hedgingDelay", h.HedgingDelay, err.Error())
		}
		if d < 0 || d > MaxHedgingDelay {
			return nil, bad("hedgingDelay", h.HedgingDelay, fmt.Sprintf("out of [0s, %ds]", int(MaxHedgingDelay.Seconds())))
		}
		p.delay = d
	}

	if len(h.NonFatalStatusCodes) > 0 && string(h.NonFatalStatusCodes) != "null" {
		var elems []json.RawMessage
		if json.Unmarshal(h.NonFatalStatusCodes, &elems) != nil {
			return nil, bad("nonFatalStatusCodes", h.NonFatalStatusCodes, "not a list")
		}
		for k, e := range elems {
			c, err := statusCode(e)
			if err != nil {
				return nil, bad(fmt.Sprintf("nonFatalStatusCodes[%d]", k), e, err.Error())
			}
			p.nonFatal |= 1 << c
		}
	}
	return p, nil
}

// protoDurationRE is google.protobuf.Duration's JSON form: seconds with up
// to nine decimals and an "s".
var protoDurationRE = regexp.MustCompile(`^-?[0-9]+(\.[0-9]{1,9})?s$`)

// protoDuration parses a duration in google.protobuf.Duration's JSON form
// ("0.05s"), the form gRFC A6 and grpc-go's service config use.
func protoDuration(s string) (time.Duration, error) {
	if !protoDurationRE.MatchString(s) {
		return 0, errors.New(`not a duration in seconds ("0.05s")`)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("out of [0s, %ds]", int(MaxHedgingDelay.Seconds()))
	}
	return d, nil
}

// statusCode reads a status code: a name, in any case ("unavailable"), or
// its number. OK cannot be non-fatal: it ends the RPC.
func statusCode(e json.RawMessage) (codes.Code, error) {
	var c codes.Code
	var s string
	if json.Unmarshal(e, &s) == nil {
		if err := c.UnmarshalJSON([]byte(strconv.Quote(strings.ToUpper(s)))); err != nil {
			return 0, errors.New("not a status code")
		}
	} else {
		f, err := strconv.ParseFloat(string(e), 64)
		if err != nil || f != float64(int64(f)) || f < 0 || f > float64(codes.Unauthenticated) {
			return 0, errors.New("not a status code")
		}
		c = codes.Code(f)
	}
	if c == codes.OK {
		return 0, errors.New("OK ends the RPC; it cannot be non-fatal")
	}
	return c, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func nameOf(svc, meth string) string {
	if svc == "" {
		return "the default (no service)"
	}
	if meth == "" {
		return fmt.Sprintf("service %q", svc)
	}
	return fmt.Sprintf("method %q of service %q", meth, svc)
}

func kindName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Slice:
		return "a list"
	case reflect.Struct, reflect.Pointer:
		return "an object"
	case reflect.String:
		return "a string"
	}
	return t.String()
}
