package grpcbalancer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/strictjson"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/serviceconfig"
)

// ErrBadConfig is wrapped by every error the policies' config parser returns;
// the message names the field and its value as written ("maxFails -1:
// negative"). gRPC reports it when it applies the service config
// (grpc.NewClient with WithDefaultServiceConfig, or a resolver's update),
// after the policy's name.
var ErrBadConfig = errors.New("grpcbalancer: bad load-balancing config")

// Config is the JSON a policy accepts in the service config's
// loadBalancingConfig, the fields of nginx's server line that apply to
// every peer and the picker's own options. Every field is optional. A key
// that names no field, one that names a field only without regard to case
// ("MAXFAILS"), a key given twice in one object, and a number that a double
// does not hold (1e400, or 1e-400, which it rounds to 0) are refused with
// ErrBadConfig, naming the key: encoding/json alone would ignore the first,
// take the second, keep the last of the third and zero the fourth, so a
// typo in a config from a resolver or a control plane would leave a
// default in force unseen.
//
//	maxFails       int ≥ 0     nginx's max_fails (default 1; 0: off)
//	failTimeout    duration    nginx's fail_timeout (default "10s")
//	maxConns       int ≥ 0     nginx's max_conns (default 0: unlimited)
//	failureCodes   [code]      status codes that count as a failure of the
//	                           peer (default ["UNAVAILABLE", "DEADLINE_EXCEEDED"])
//	hashHeader     string      keyed pickers: the request metadata key whose
//	                           value is the hash key (IPHash: a client IP)
//	decay, failurePenalty      duration
//	band, exponent, tolerance  number
//	floor                      int
//	warmup                     duration
//	boundedLoad                number ≥ 1
//	blackoutPeriod, weightExpirationPeriod, weightUpdatePeriod
//	                           duration (ReportedWRR; gRFC A58's names)
//	errorUtilizationPenalty    number ≥ 0 (ReportedWRR)
//	reportedLoad               {"window": duration, "clients": int ≥ 1}
//	                           (WithReportedLoad; clients default 1)
//	slowStart                  {"window": duration, "aggression": number,
//	                           "minWeightPercent": number} (WithSlowStart;
//	                           Envoy's defaults 1 and 10)
//	probeRate                  {"perPick": number, "perSecond": number}
//	                           (PrequalSettings' ProbesPerPick and
//	                           ProbesPerSecond; each defaults)
//	probePool                  {"size": int, "maxAge": duration}
//	                           (PrequalSettings' PoolSize and MaxAge;
//	                           each defaults)
//	hotQuantile                number in (0, 1] (Prequal)
//	probeTimeout               duration in (0, 1h]: each probe RPC's bound
//	                           (a probing policy; default "250ms")
//	probeWorkers, probeQueue   int in [1, 1024], [0, 65536]: probe RPCs at
//	                           once, probes waiting (default 16, 128)
//	subset                     {"algorithm": "deterministic", "clientIndex":
//	                           int, "clientCount": int, "size": int}, or
//	                           ring, rendezvous, random (SubsetConfig)
//
// A picker option field is the option's name less its With, its first
// letter in lower case (decay: WithDecay), as balancer.Algorithm.Options
// names it; a policy takes the fields of the options its picker accepts
// and refuses the others. A field of a picker's own setting sets that
// field of its settings type (band: balancer.FastestFirstSettings.Band),
// where 0 keeps the default unless 0 means something (exponent 0: latency
// ignored). The policy gives WithRand and its Prober itself; the probe
// fields (probeTimeout, probeWorkers, probeQueue) configure the prober it
// gives, and only a probing policy (lbgo_prequal) takes them.
// A duration is a string time.ParseDuration reads ("0.5s", "250ms"); a code
// is its name ("UNAVAILABLE") or number. An int may be written as any JSON
// number whose value is an integer (3, 3.0, 3e0), as it arrives from an xDS
// control plane, whose google.protobuf.Struct holds numbers as doubles;
// 3.5 is refused. A picker option the picker does not
// take, a value out of range or of the wrong type is rejected with
// ErrBadConfig.
//
// failureCodes matches nginx's default proxy_next_upstream "error timeout":
// UNAVAILABLE is gRPC's connection error (refused, reset, GOAWAY) and a
// server's "try elsewhere"; DEADLINE_EXCEEDED counts only when the RPC's own
// context is still live, i.e. the server or a proxy before it timed out,
// never the client's deadline. INTERNAL and UNKNOWN are left out by
// default, as nginx leaves out http_500: they are usually the
// application's answer, not the server's health.
type Config struct {
	MaxFails       *int         `json:"maxFails,omitempty"`
	FailTimeout    *string      `json:"failTimeout,omitempty"`
	MaxConns       *int         `json:"maxConns,omitempty"`
	FailureCodes   []codes.Code `json:"failureCodes,omitempty"`
	HashHeader     string       `json:"hashHeader,omitempty"`
	Decay          *string      `json:"decay,omitempty"`
	FailurePenalty *string      `json:"failurePenalty,omitempty"`
	Warmup         *string      `json:"warmup,omitempty"`
	Band           *float64     `json:"band,omitempty"`
	Exponent       *float64     `json:"exponent,omitempty"`
	Tolerance      *float64     `json:"tolerance,omitempty"`
	Floor          *int         `json:"floor,omitempty"`
	BoundedLoad    *float64     `json:"boundedLoad,omitempty"`

	BlackoutPeriod          *string       `json:"blackoutPeriod,omitempty"`
	WeightExpirationPeriod  *string       `json:"weightExpirationPeriod,omitempty"`
	WeightUpdatePeriod      *string       `json:"weightUpdatePeriod,omitempty"`
	ErrorUtilizationPenalty *float64      `json:"errorUtilizationPenalty,omitempty"`
	ReportedLoad            *ReportedLoad `json:"reportedLoad,omitempty"`
	SlowStart               *SlowStart    `json:"slowStart,omitempty"`

	ProbeRate    *ProbeRate `json:"probeRate,omitempty"`
	ProbePool    *ProbePool `json:"probePool,omitempty"`
	HotQuantile  *float64   `json:"hotQuantile,omitempty"`
	ProbeTimeout *string    `json:"probeTimeout,omitempty"`
	ProbeWorkers *int       `json:"probeWorkers,omitempty"`
	ProbeQueue   *int       `json:"probeQueue,omitempty"`

	Subset *SubsetConfig `json:"subset,omitempty"`
}

// ReportedLoad is Config's reportedLoad: the arguments of
// balancer.WithReportedLoad. Window is required; Clients defaults to 1.
type ReportedLoad struct {
	Window  *string `json:"window,omitempty"`
	Clients *int    `json:"clients,omitempty"`
}

// SlowStart is Config's slowStart: the arguments of
// balancer.WithSlowStart, Envoy's SlowStartConfig. Window is required;
// Aggression defaults to 1 and MinWeightPercent to 10, Envoy's defaults.
type SlowStart struct {
	Window           *string  `json:"window,omitempty"`
	Aggression       *float64 `json:"aggression,omitempty"`
	MinWeightPercent *float64 `json:"minWeightPercent,omitempty"`
}

// ProbeRate is Config's probeRate: balancer.PrequalSettings'
// ProbesPerPick and ProbesPerSecond. A missing one keeps its default,
// as the field's doc states it (3 a pick, at most 10000 a second).
type ProbeRate struct {
	PerPick   *float64 `json:"perPick,omitempty"`
	PerSecond *float64 `json:"perSecond,omitempty"`
}

// ProbePool is Config's probePool: balancer.PrequalSettings' PoolSize and
// MaxAge. A missing one keeps its default, as the field's doc states it
// (4 answers, 1 s).
type ProbePool struct {
	Size   *int    `json:"size,omitempty"`
	MaxAge *string `json:"maxAge,omitempty"`
}

// lbConfig is a parsed, checked Config.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig

	maxFails    int
	failTimeout time.Duration
	maxConns    int
	failures    codeSet
	hashHeader  string
	subset      *subsetSpec // nil: every endpoint
	probe       probeSettings
	opts        []lbgo.Option
	optsKey     string // the picker options, canonical: a change rebuilds the picker
	js          []byte // the JSON parsed, for MarshalJSON
}

// codeSet has bit c set for each code c that counts as a failure.
type codeSet uint32

func (s codeSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

var defaultFailures = codeSet(1<<codes.Unavailable | 1<<codes.DeadlineExceeded)

// nginxDefaults is a peer with no server parameter given: its max_fails
// and fail_timeout are the library's defaults (nginx's).
var nginxDefaults = lbgo.NewPeer("defaults")

func defaultConfig() *lbConfig {
	return &lbConfig{
		maxFails:    nginxDefaults.MaxFails(),
		failTimeout: nginxDefaults.FailTimeout(),
		failures:    defaultFailures,
		probe:       defaultProbeSettings,
	}
}

// parseConfig parses and checks the JSON of a policy for algorithm alg. An
// error names the field as the JSON spells it and its value as written, not
// the policy, which gRPC's message around it names ("error parsing config
// for policy ...").
func parseConfig(alg lbgo.Algorithm, js []byte) (*lbConfig, error) {
	if len(bytes.TrimSpace(js)) > 0 {
		if err := strictjson.Check(js, reflect.TypeFor[Config]()); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
	}
	subset, err := parseSubsetField(js) // first: its own messages name its fields
	if err != nil {
		return nil, err
	}
	var c Config
	var raw map[string]json.RawMessage // the fields as written, for errors
	if len(bytes.TrimSpace(js)) > 0 {
		if err := json.Unmarshal(js, &raw); err != nil {
			var ute *json.UnmarshalTypeError
			if errors.As(err, &ute) {
				return nil, fmt.Errorf("%w: %s: not a JSON object", ErrBadConfig, clip(js))
			}
			return nil, fmt.Errorf("%w: %v", ErrBadConfig, err)
		}
		if err := json.Unmarshal(integralNumbers(js), &c); err != nil {
			return nil, unmarshalError(raw, err)
		}
	}
	cfg := defaultConfig()
	cfg.js = bytes.Clone(js)
	bad := func(field, why string) error {
		name, v := rawField(raw, field)
		return configError(name, clip(v), why)
	}
	dur := func(field string, s *string) (time.Duration, error) {
		d, err := time.ParseDuration(*s)
		if err != nil {
			return 0, bad(field, "not a duration")
		}
		return d, nil
	}
	if c.MaxFails != nil {
		if *c.MaxFails < 0 {
			return nil, bad("maxFails", "negative")
		}
		cfg.maxFails = *c.MaxFails
	}
	if c.MaxConns != nil {
		if *c.MaxConns < 0 {
			return nil, bad("maxConns", "negative")
		}
		cfg.maxConns = *c.MaxConns
	}
	if c.FailTimeout != nil {
		d, err := dur("failTimeout", c.FailTimeout)
		if err != nil {
			return nil, err
		}
		if d < 0 {
			return nil, bad("failTimeout", "negative")
		}
		cfg.failTimeout = d
	}
	if c.FailureCodes != nil {
		cfg.failures = 0
		for _, code := range c.FailureCodes {
			if code == codes.OK || code >= 32 {
				return nil, configError("failureCodes", fmt.Sprintf("%q", code.String()), "cannot count as a failure")
			}
			cfg.failures |= 1 << code
		}
	}
	if c.HashHeader != "" {
		if !alg.Keyed {
			return nil, bad("hashHeader", "the picker "+alg.Name+" does not route by key")
		}
		cfg.hashHeader = c.HashHeader
	}

	if err := parseProbeSettings(alg, &c, &cfg.probe, bad, dur); err != nil {
		return nil, err
	}

	// Picker options, each tried alone on the picker, which checks it (and
	// refuses one it does not take), so the error names its field.
	type option struct {
		field string
		value any // as parsed, for optsKey
		opt   lbgo.Option
	}
	var opts []option
	for _, d := range []struct {
		field string
		v     *string
		opt   func(time.Duration) lbgo.Option
	}{
		{"decay", c.Decay, lbgo.WithDecay},
		{"failurePenalty", c.FailurePenalty, lbgo.WithFailurePenalty},
		{"warmup", c.Warmup, func(d time.Duration) lbgo.Option { return lbgo.RandomWeightedSettings{Warmup: d}.Option() }},
		{"blackoutPeriod", c.BlackoutPeriod, func(d time.Duration) lbgo.Option {
			return lbgo.ReportedWRRSettings{BlackoutPeriod: none(d)}.Option()
		}},
		{"weightExpirationPeriod", c.WeightExpirationPeriod, func(d time.Duration) lbgo.Option {
			return lbgo.ReportedWRRSettings{WeightExpirationPeriod: d}.Option()
		}},
		{"weightUpdatePeriod", c.WeightUpdatePeriod, func(d time.Duration) lbgo.Option {
			return lbgo.ReportedWRRSettings{WeightUpdatePeriod: d}.Option()
		}},
	} {
		if d.v != nil {
			v, err := dur(d.field, d.v)
			if err != nil {
				return nil, err
			}
			opts = append(opts, option{d.field, v, d.opt(v)})
		}
	}
	for _, f := range []struct {
		field string
		v     *float64
		opt   func(float64) lbgo.Option
	}{
		{"band", c.Band, func(x float64) lbgo.Option { return lbgo.FastestFirstSettings{Band: x}.Option() }},
		{"exponent", c.Exponent, func(x float64) lbgo.Option { return lbgo.FastestFirstSettings{Exponent: none(x)}.Option() }},
		{"tolerance", c.Tolerance, func(x float64) lbgo.Option { return lbgo.FastestFirstSettings{Tolerance: x}.Option() }},
		{"boundedLoad", c.BoundedLoad, func(x float64) lbgo.Option { return lbgo.ConsistentHashSettings{BoundedLoad: x}.Option() }},
		{"errorUtilizationPenalty", c.ErrorUtilizationPenalty, func(x float64) lbgo.Option {
			return lbgo.ReportedWRRSettings{ErrorUtilizationPenalty: none(x)}.Option()
		}},
		{"hotQuantile", c.HotQuantile, func(x float64) lbgo.Option { return lbgo.PrequalSettings{HotQuantile: x}.Option() }},
	} {
		if f.v != nil {
			opts = append(opts, option{f.field, *f.v, f.opt(*f.v)})
		}
	}
	if c.Floor != nil {
		opts = append(opts, option{"floor", *c.Floor, lbgo.FastestFirstSettings{Floor: *c.Floor}.Option()})
	}
	if r := c.ReportedLoad; r != nil {
		if r.Window == nil {
			return nil, bad("reportedLoad", "no window")
		}
		w, err := dur("reportedLoad", r.Window)
		if err != nil {
			return nil, err
		}
		clients := 1
		if r.Clients != nil {
			clients = *r.Clients
		}
		v := fmt.Sprintf("{%v %d}", w, clients)
		opts = append(opts, option{"reportedLoad", v, lbgo.WithReportedLoad(w, clients)})
	}
	if s := c.SlowStart; s != nil {
		if s.Window == nil {
			return nil, bad("slowStart", "no window")
		}
		w, err := dur("slowStart", s.Window)
		if err != nil {
			return nil, err
		}
		aggression, minPct := 1.0, 10.0
		if s.Aggression != nil {
			aggression = *s.Aggression
		}
		if s.MinWeightPercent != nil {
			minPct = *s.MinWeightPercent
		}
		v := fmt.Sprintf("{%v %v %v}", w, aggression, minPct)
		opts = append(opts, option{"slowStart", v, lbgo.WithSlowStart(w, aggression, minPct)})
	}
	if r := c.ProbeRate; r != nil {
		var s lbgo.PrequalSettings // a field left 0 keeps its default
		if r.PerPick != nil {
			s.ProbesPerPick = none(*r.PerPick)
		}
		if r.PerSecond != nil {
			s.ProbesPerSecond = *r.PerSecond
		}
		opts = append(opts, option{"probeRate", fmt.Sprintf("{%v %v}", s.ProbesPerPick, s.ProbesPerSecond), s.Option()})
	}
	if p := c.ProbePool; p != nil {
		var s lbgo.PrequalSettings // a field left 0 keeps its default
		if p.Size != nil {
			s.PoolSize = *p.Size
		}
		if p.MaxAge != nil {
			d, err := dur("probePool", p.MaxAge)
			if err != nil {
				return nil, err
			}
			s.MaxAge = d
		}
		opts = append(opts, option{"probePool", fmt.Sprintf("{%d %v}", s.PoolSize, s.MaxAge), s.Option()})
	}
	// probe is one peer with the server parameters (a peer belongs to one
	// picker, so a new one for each).
	probe := func() []*lbgo.Peer { return []*lbgo.Peer{cfg.newPeer("config-check", 1, false, nil)} }
	for _, o := range opts {
		if !slices.Contains(alg.Options, optionOf(o.field)) {
			return nil, bad(o.field, "not an option of "+alg.Name)
		}
		if _, err := alg.New(probe(), o.opt); err != nil {
			return nil, bad(o.field, optionReason(err))
		}
		cfg.opts = append(cfg.opts, o.opt)
	}
	// The key is made from the options as parsed, so that an option added
	// to the lists above is in it without another list to keep.
	var key strings.Builder
	for _, o := range opts {
		fmt.Fprintf(&key, "%s=%v;", o.field, o.value)
	}
	cfg.optsKey = key.String()

	// And all together, over one peer with the server parameters: every
	// value was checked above, so this refuses nothing today.
	if _, err := alg.New(probe(), cfg.opts...); err != nil {
		return nil, fmt.Errorf("%w: %s", ErrBadConfig, optionReason(err))
	}
	cfg.subset = subset
	return cfg, nil
}

// none is a value v as a settings field takes it where 0 is meaningful
// (exponent 0, blackoutPeriod "0s"): 0 is the field's default, and -1
// stands for 0.
func none[T ~int64 | ~float64](v T) T {
	if v == 0 {
		return -1
	}
	return v
}

// optionOf returns the name of the picker option a Config field sets, as
// the picker's declaration (Algorithm.Options) spells it: "WithDecay" for
// "decay".
func optionOf(field string) string {
	return "With" + strings.ToUpper(field[:1]) + field[1:]
}

// configError is the error for field whose value, as written, is value.
func configError(field, value, why string) error {
	return fmt.Errorf("%w: %s %s: %s", ErrBadConfig, field, value, why)
}

// rawField returns field as written in raw and its value: encoding/json
// matches a key to a field without regard to case ("MAXFAILS" sets
// maxFails), preferring the exact spelling, and so does rawField; nil if
// raw has no such key.
func rawField(raw map[string]json.RawMessage, field string) (string, json.RawMessage) {
	if v, ok := raw[field]; ok {
		return field, v
	}
	keys := slices.Sorted(maps.Keys(raw))
	for _, k := range keys {
		if strings.EqualFold(k, field) {
			return k, raw[k]
		}
	}
	return field, nil
}

// unmarshalError names the field of a JSON type error, or the failure
// codes' element that is not a code.
func unmarshalError(raw map[string]json.RawMessage, err error) error {
	var ute *json.UnmarshalTypeError
	if errors.As(err, &ute) {
		// A field of an object field ("reportedLoad.clients") is named
		// after the object's value, as its other errors are.
		field, inner, _ := strings.Cut(ute.Field, ".")
		if name, v := rawField(raw, field); v != nil {
			want := map[reflect.Kind]string{reflect.Int: "an integer", reflect.Float64: "a number", reflect.String: "a string", reflect.Slice: "a list", reflect.Struct: "an object"}[ute.Type.Kind()]
			if want == "" {
				want = ute.Type.String()
			}
			if inner != "" {
				inner += " "
			}
			return configError(name, clip(v), inner+"not "+want)
		}
	}
	var elems []json.RawMessage
	if _, v := rawField(raw, "failureCodes"); json.Unmarshal(v, &elems) == nil {
		for _, e := range elems {
			var code codes.Code
			if json.Unmarshal(e, &code) != nil {
				return configError("failureCodes", clip(e), "not a status code")
			}
		}
	}
	return fmt.Errorf("%w: %v", ErrBadConfig, err)
}

// optionReason is what the balancer package's error for a picker option
// says is wrong, without its prefixes (the package, the picker, the
// option's or settings field's Go name) and its sentinel's text: "out of
// (1, 16]" from "balancer: FastestFirst: FastestFirstSettings.Band(0.5):
// out of (1, 16]: balancer: invalid configuration".
func optionReason(err error) string {
	msg := strings.TrimSuffix(err.Error(), ": "+lbgo.ErrInvalidConfig.Error())
	if i := strings.LastIndex(msg, "): "); i >= 0 {
		return msg[i+len("): "):]
	}
	return msg
}

// clip returns a JSON value as written, cut to 64 bytes.
func clip(v []byte) string {
	v = bytes.TrimSpace(v)
	if len(v) > 64 {
		return string(v[:61]) + "..."
	}
	return string(v)
}

// newPeer returns a peer for addr with the config's server parameters.
func (c *lbConfig) newPeer(addr string, weight int, down bool, v any) *lbgo.Peer {
	opts := []lbgo.PeerOption{
		lbgo.Weight(weight),
		lbgo.MaxFails(c.maxFails),
		lbgo.FailTimeout(c.failTimeout),
		lbgo.MaxConns(c.maxConns),
	}
	if v != nil {
		opts = append(opts, lbgo.Value(v))
	}
	if down {
		opts = append(opts, lbgo.Down())
	}
	return lbgo.NewPeer(addr, opts...)
}
