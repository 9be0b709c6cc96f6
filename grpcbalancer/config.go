package grpcbalancer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/serviceconfig"
)

// ErrBadConfig is wrapped by every error the policies' config parser returns;
// the message names the policy, the field and the offending value. gRPC
// reports it when it applies the service config (grpc.NewClient with
// WithDefaultServiceConfig, or a resolver's update).
var ErrBadConfig = errors.New("grpcbalancer: bad load-balancing config")

// Config is the JSON a policy accepts in the service config's
// loadBalancingConfig, the fields of nginx's server line that apply to
// every peer and the picker's own options. Every field is optional; unknown
// fields are ignored, as gRPC asks of config parsers.
//
//	maxFails       int ≥ 0     nginx's max_fails (default 1; 0: off)
//	failTimeout    duration    nginx's fail_timeout (default "10s")
//	maxConns       int ≥ 0     nginx's max_conns (default 0: unlimited)
//	failureCodes   [code]      status codes that count as a failure of the
//	                           peer (default ["UNAVAILABLE", "DEADLINE_EXCEEDED"])
//	hashHeader     string      keyed pickers: the request metadata key whose
//	                           value is the hash key (IPHash: a client IP)
//	decay, failurePenalty      duration: P2CPeakEWMA, FastestFirst
//	band, exponent, tolerance  number, floor int: FastestFirst
//	warmup                     duration: RandomWeighted
//	boundedLoad                number ≥ 1: ConsistentHash
//
// A duration is a string time.ParseDuration reads ("0.5s", "250ms"); a code
// is its name ("UNAVAILABLE") or number. A picker option the picker does not
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
}

// lbConfig is a parsed, checked Config.
type lbConfig struct {
	serviceconfig.LoadBalancingConfig

	maxFails    int
	failTimeout time.Duration
	maxConns    int
	failures    codeSet
	hashHeader  string
	opts        []lbgo.Option
	optsKey     string // the picker options, canonical: a change rebuilds the picker
}

// codeSet has bit c set for each code c that counts as a failure.
type codeSet uint32

func (s codeSet) has(c codes.Code) bool { return c < 32 && s&(1<<c) != 0 }

var defaultFailures = codeSet(1<<codes.Unavailable | 1<<codes.DeadlineExceeded)

func defaultConfig() *lbConfig {
	return &lbConfig{
		maxFails:    lbgo.DefaultMaxFails,
		failTimeout: lbgo.DefaultFailTimeout,
		failures:    defaultFailures,
	}
}

// parseConfig parses and checks the JSON of policy name for algorithm alg.
func parseConfig(name string, alg lbgo.Algorithm, js []byte) (*lbConfig, error) {
	var c Config
	if len(bytes.TrimSpace(js)) > 0 {
		if err := json.Unmarshal(js, &c); err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrBadConfig, name, err)
		}
	}
	cfg := defaultConfig()
	bad := func(field string, v any, why string) error {
		return fmt.Errorf("%w: %s: %s %v: %s", ErrBadConfig, name, field, v, why)
	}
	dur := func(field string, s *string) (time.Duration, error) {
		d, err := time.ParseDuration(*s)
		if err != nil {
			return 0, bad(field, fmt.Sprintf("%q", *s), "not a duration")
		}
		return d, nil
	}
	if c.MaxFails != nil {
		cfg.maxFails = *c.MaxFails
	}
	if c.MaxConns != nil {
		cfg.maxConns = *c.MaxConns
	}
	if c.FailTimeout != nil {
		d, err := dur("failTimeout", c.FailTimeout)
		if err != nil {
			return nil, err
		}
		cfg.failTimeout = d
	}
	if c.FailureCodes != nil {
		cfg.failures = 0
		for _, code := range c.FailureCodes {
			if code == codes.OK || code >= 32 {
				return nil, bad("failureCodes", code, "cannot count as a failure")
			}
			cfg.failures |= 1 << code
		}
	}
	if c.HashHeader != "" {
		if !alg.Keyed {
			return nil, bad("hashHeader", fmt.Sprintf("%q", c.HashHeader), "the picker "+alg.Name+" does not route by key")
		}
		cfg.hashHeader = c.HashHeader
	}

	// Picker options: the picker itself rejects those it does not take.
	for _, d := range []struct {
		field string
		v     *string
		opt   func(time.Duration) lbgo.Option
	}{
		{"decay", c.Decay, lbgo.WithDecay},
		{"failurePenalty", c.FailurePenalty, lbgo.WithFailurePenalty},
		{"warmup", c.Warmup, lbgo.WithWarmup},
	} {
		if d.v != nil {
			v, err := dur(d.field, d.v)
			if err != nil {
				return nil, err
			}
			cfg.opts = append(cfg.opts, d.opt(v))
		}
	}
	for _, f := range []struct {
		v   *float64
		opt func(float64) lbgo.Option
	}{
		{c.Band, lbgo.WithBand},
		{c.Exponent, lbgo.WithExponent},
		{c.Tolerance, lbgo.WithTolerance},
		{c.BoundedLoad, lbgo.WithBoundedLoad},
	} {
		if f.v != nil {
			cfg.opts = append(cfg.opts, f.opt(*f.v))
		}
	}
	if c.Floor != nil {
		cfg.opts = append(cfg.opts, lbgo.WithFloor(*c.Floor))
	}
	key, _ := json.Marshal(struct {
		Decay, FailurePenalty, Warmup          *string
		Band, Exponent, Tolerance, BoundedLoad *float64
		Floor                                  *int
	}{c.Decay, c.FailurePenalty, c.Warmup, c.Band, c.Exponent, c.Tolerance, c.BoundedLoad, c.Floor})
	cfg.optsKey = string(key)

	// Build the picker once over one peer with these parameters: the
	// balancer package checks every value and names it.
	probe := cfg.newPeer("config-check", 1, false, nil)
	if _, err := alg.New([]*lbgo.Peer{probe}, cfg.opts...); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, name, err)
	}
	return cfg, nil
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
