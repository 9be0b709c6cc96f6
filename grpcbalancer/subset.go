package grpcbalancer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/lbgo/balancer/subset"
	"google.golang.org/grpc/resolver"
)

// SubsetConfig is Config's subset: the client connects to, and balances
// over, only its subset of the resolver's endpoints, chosen by one of the
// subset package's subsetters from the endpoints' keys (an endpoint's
// addresses, comma-separated: its peer's address). Algorithm is
// "deterministic" (subset.Deterministic, the SRE book's; with clientIndex,
// clientCount, size), "ring" (subset.Ring; the same fields), "rendezvous"
// (subset.Rendezvous; clientKey, size) or "random" (subset.Random, gRFC
// A68's; size and an optional seed, else one drawn for each channel). A
// number may be written as a float (3.0, as xDS sends it) but must be an
// integer.
type SubsetConfig struct {
	Algorithm   string      `json:"algorithm,omitempty"`
	ClientIndex json.Number `json:"clientIndex,omitempty"`
	ClientCount json.Number `json:"clientCount,omitempty"`
	Size        json.Number `json:"size,omitempty"`
	ClientKey   string      `json:"clientKey,omitempty"`
	Seed        json.Number `json:"seed,omitempty"`
}

// subsetSpec is a checked SubsetConfig.
type subsetSpec struct {
	alg                string
	index, count, size int
	key                string
	seed               uint64
	seeded             bool // seed given; else the channel's
}

// subsetter returns the spec's Subsetter, with channelSeed as the random
// algorithm's seed if the config gave none. Every value was checked.
func (s *subsetSpec) subsetter(channelSeed uint64) subset.Subsetter {
	var by subset.Subsetter
	switch s.alg {
	case "deterministic":
		by, _ = subset.Deterministic(s.index, s.count, s.size)
	case "ring":
		by, _ = subset.Ring(s.index, s.count, s.size)
	case "rendezvous":
		by, _ = subset.Rendezvous(s.key, s.size)
	default:
		if s.seeded {
			channelSeed = s.seed
		}
		by, _ = subset.Random(s.size, channelSeed)
	}
	return by
}

// parseSubsetField parses and checks the subset field of a policy's JSON,
// nil if there is none. JSON that is not an object is left to
// parseConfig, which says so.
func parseSubsetField(js []byte) (*subsetSpec, error) {
	var raw map[string]json.RawMessage
	if len(bytes.TrimSpace(js)) == 0 || json.Unmarshal(js, &raw) != nil {
		return nil, nil
	}
	if _, v := rawField(raw, "subset"); v != nil && string(bytes.TrimSpace(v)) != "null" {
		return parseSubset(v)
	}
	return nil, nil
}

// parseSubset checks the subset field, written as raw.
func parseSubset(raw json.RawMessage) (*subsetSpec, error) {
	var c SubsetConfig
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&c); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) && ute.Field != "" {
			var fields map[string]json.RawMessage
			_ = json.Unmarshal(raw, &fields)
			name, v := rawField(fields, ute.Field)
			want := "a string"
			if ute.Type.Name() == "Number" {
				want = "a number"
			}
			return nil, configError("subset."+name, clip(v), "not "+want)
		}
		return nil, configError("subset", clip(raw), "not an object")
	}
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(raw, &fields) // an object: decoded above
	s := &subsetSpec{alg: c.Algorithm}
	// integer reads a field as the other int fields are read (see
	// integralNumbers): an integer literal, or one written with a point or
	// an exponent whose fraction is zero as written, within 2^53 of 0.
	integer := func(field string, n json.Number, lo, hi int64, outOf string) (int64, error) {
		name, v := rawField(fields, field)
		if n == "" {
			return 0, missing(field)
		}
		if bytes.HasPrefix(v, []byte(`"`)) {
			return 0, configError("subset."+name, clip(v), "not a number")
		}
		lit := string(n)
		if m, ok := integerOf(lit); ok {
			lit = m
		}
		i, err := strconv.ParseInt(lit, 10, 64)
		if err != nil {
			f, _ := strconv.ParseFloat(lit, 64) // a JSON number: ±Inf past the doubles
			if !errors.Is(err, strconv.ErrRange) && math.Abs(f) <= 1<<53 {
				return 0, configError("subset."+name, clip(v), "not an integer")
			}
			return 0, configError("subset."+name, clip(v), outOf)
		}
		if i < lo || i > hi {
			return 0, configError("subset."+name, clip(v), outOf)
		}
		return i, nil
	}
	count := func(field string, n json.Number) (int, error) {
		const most = min(subset.MaxClients, math.MaxInt) // an int of 32 bits holds 2^31-1
		i, err := integer(field, n, 1, most, fmt.Sprintf("out of [1, %d]", int64(most)))
		return int(i), err
	}
	var err error
	switch c.Algorithm {
	case "deterministic", "ring":
		if s.count, err = count("clientCount", c.ClientCount); err != nil {
			return nil, err
		}
		i, err := integer("clientIndex", c.ClientIndex, 0, int64(s.count)-1, fmt.Sprintf("out of [0, %d)", s.count))
		if err != nil {
			return nil, err
		}
		s.index = int(i)
	case "rendezvous":
		if c.ClientKey == "" {
			return nil, missing("clientKey")
		}
		s.key = c.ClientKey
	case "random":
		if c.Seed != "" {
			name, v := rawField(fields, "seed")
			u, err := strconv.ParseUint(string(c.Seed), 10, 64)
			switch {
			case err == nil && !bytes.HasPrefix(v, []byte(`"`)):
			case !strings.ContainsAny(string(c.Seed), ".eE") && !bytes.HasPrefix(v, []byte(`"`)):
				return nil, configError("subset."+name, clip(v), fmt.Sprintf("out of [0, %d]", uint64(math.MaxUint64)))
			default: // a float: exact only up to 2⁵³
				f, ferr := integer("seed", c.Seed, 0, 1<<53, fmt.Sprintf("out of [0, %d] (a float)", uint64(1<<53)))
				if ferr != nil {
					return nil, ferr
				}
				u = uint64(f)
			}
			s.seed, s.seeded = u, true
		}
	case "":
		return nil, missing("algorithm")
	default:
		return nil, configError("subset.algorithm", strconv.Quote(c.Algorithm), "not one of deterministic, ring, rendezvous, random")
	}
	if s.size, err = count("size", c.Size); err != nil {
		return nil, err
	}
	return s, nil
}

// missing is the error for a subset field the algorithm needs.
func missing(field string) error {
	return fmt.Errorf("%w: subset.%s: missing", ErrBadConfig, field)
}

// subsetEndpoints returns the endpoints of eps in by's subset, in their
// order; endpoints without an address are left out, and one listed again
// is counted once, as the policy makes one peer of it.
func subsetEndpoints(by subset.Subsetter, eps []resolver.Endpoint) []resolver.Endpoint {
	var with []resolver.Endpoint
	var keys []string
	seen := make(map[string]bool, len(eps))
	for _, ep := range eps {
		if k := endpointKey(ep); len(ep.Addresses) > 0 && !seen[k] {
			seen[k] = true
			with = append(with, ep)
			keys = append(keys, k)
		}
	}
	out := make([]resolver.Endpoint, 0, len(with))
	for _, i := range by.Subset(keys) {
		out = append(out, with[i])
	}
	return out
}

// subsetOf is b's config's subset of eps, or eps without one. Requires
// b.mu.
func (b *lbBalancer) subsetOf(cfg *lbConfig, eps []resolver.Endpoint) []resolver.Endpoint {
	if cfg.subset == nil {
		return eps
	}
	return subsetEndpoints(cfg.subset.subsetter(b.seed), eps)
}
