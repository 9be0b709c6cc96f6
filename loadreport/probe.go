package loadreport

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/lbgo/balancer"
)

// DefaultProbePath is the path on which the Middleware answers probes
// (WithProbePath changes it).
const DefaultProbePath = "/_lbgo/probe"

// MaxProbeLen is the longest probe answer ParseProbe reads, in bytes; a
// client reads at most this much of the body (and one byte more, to
// tell a longer one).
const MaxProbeLen = 1 << 10

// The TEXT names of a probe answer's two values.
const (
	probeInFlightKey = nameNamed + "." + InFlightName
	probeLatencyKey  = nameNamed + "." + LatencyName
)

// Probe returns the Tracker's answer to a probe (Prequal's): the
// requests in flight now, from 0 to balancer.MaxProbeInFlight, and its
// estimate of how long a request that begins now takes, at most
// balancer.MaxProbeLatency. The estimate comes from the requests that
// completed within the probe window (WithProbeWindow, default 1 s),
// grouped by the RIF each began at (the requests already in flight) into
// levels RIF 0, 1, 2-3, 4-7, ...: the mean duration of the current RIF's
// level; if it has none, that of the highest lower level that has some,
// times (RIF+1) / (that level's mean RIF + 1); if none has, LatencyMs's
// mean over the report window; 0 if nothing completed. It takes no lock
// and allocates nothing. The reasons for the rule are in the package's
// source (latencyByLevel).
func (t *Tracker) Probe() (inFlight int64, latency time.Duration) {
	e := t.elapsed()
	n := max(0, min(t.inFlight.Load(), balancer.MaxProbeInFlight))
	if d, ok := t.byLevel.estimate(e, n); ok {
		return n, d
	}
	sum := t.lat.sum(e) // before the count, as latencyMs reads them
	c := t.reqs.count(e)
	if c == 0 {
		return n, 0
	}
	return n, capLatency(float64(sum) / float64(c))
}

// appendProbe appends a probe answer's body:
// "TEXT named_metrics.rif=<n>,named_metrics.latency_ms=<ms>".
func appendProbe(dst []byte, inFlight int64, latency time.Duration) []byte {
	dst = append(dst, "TEXT "+probeInFlightKey+"="...)
	dst = strconv.AppendInt(dst, inFlight, 10)
	dst = append(dst, ","+probeLatencyKey+"="...)
	return strconv.AppendFloat(dst, float64(latency)/float64(time.Millisecond), 'g', -1, 64)
}

// ParseProbe reads a probe answer's body, the value of a TEXT report
// ("TEXT named_metrics.rif=3,named_metrics.latency_ms=1.5"): the server's
// requests in flight and its latency estimate. named_metrics.rif is
// required, named_metrics.latency_ms is 0 if absent, other names are
// ignored; pairs are split as Parse splits them. It allocates nothing
// for an answer it accepts. It refuses, with an error wrapping
// balancer.ErrInvalidProbe and one of ErrNoReport (empty, or no rif),
// ErrUnknownFormat (not "TEXT "), ErrMalformed (bad syntax, a value that
// is not a decimal number, rif or latency_ms given twice), ErrTooLarge
// (longer than MaxProbeLen) or ErrInvalidValue (a value NaN, infinite,
// negative, a rif above balancer.MaxProbeInFlight or a latency above
// balancer.MaxProbeLatency), naming the value.
func ParseProbe(body []byte) (inFlight float64, latency time.Duration, err error) {
	if len(body) == 0 {
		return 0, 0, fmt.Errorf("%w: %w: empty probe answer", balancer.ErrInvalidProbe, ErrNoReport)
	}
	if len(body) > MaxProbeLen {
		return 0, 0, fmt.Errorf("%w: %w: probe answer of %d bytes, more than %d", balancer.ErrInvalidProbe, ErrTooLarge, len(body), MaxProbeLen)
	}
	rest, ok := bytes.CutPrefix(body, []byte("TEXT "))
	if !ok {
		p := body[:min(5, len(body))]
		if i := bytes.IndexByte(p, ' '); i >= 0 {
			p = p[:i]
		}
		return 0, 0, fmt.Errorf("%w: %w: %q", balancer.ErrInvalidProbe, ErrUnknownFormat, p)
	}
	var rif, ms float64
	var haveRIF, haveMs bool
	for len(rest) > 0 {
		var pair []byte
		pair, rest, _ = bytes.Cut(rest, []byte(","))
		pair = bytes.Trim(pair, " \t\r\n")
		if len(pair) == 0 {
			continue
		}
		i := bytes.IndexByte(pair, '=')
		if i < 0 {
			i = bytes.IndexByte(pair, ':')
		}
		if i <= 0 {
			return 0, 0, fmt.Errorf("%w: %w: TEXT pair %q has no name or no value", balancer.ErrInvalidProbe, ErrMalformed, pair)
		}
		name, num := pair[:i], bytes.Trim(pair[i+1:], " \t")
		var dst *float64
		var seen *bool
		switch {
		case string(name) == probeInFlightKey:
			dst, seen = &rif, &haveRIF
		case string(name) == probeLatencyKey:
			dst, seen = &ms, &haveMs
		default:
			continue
		}
		if *seen {
			return 0, 0, fmt.Errorf("%w: %w: TEXT has %s twice", balancer.ErrInvalidProbe, ErrMalformed, name)
		}
		*seen = true
		v, err := parseProbeValue(name, num)
		if err != nil {
			return 0, 0, err
		}
		*dst = v
	}
	if !haveRIF {
		return 0, 0, fmt.Errorf("%w: %w: no %s in %q", balancer.ErrInvalidProbe, ErrNoReport, probeInFlightKey, body)
	}
	return checkProbe(rif, ms)
}

// parseProbeValue is parseDecimal on bytes, with no allocation for a
// value it accepts.
func parseProbeValue(name, num []byte) (float64, error) {
	if len(num) == 0 {
		return 0, fmt.Errorf("%w: %w: TEXT %s has no value", balancer.ErrInvalidProbe, ErrMalformed, name)
	}
	if bytes.ContainsAny(num, "xXpP_") {
		return 0, fmt.Errorf("%w: %w: %s=%q is not a decimal number", balancer.ErrInvalidProbe, ErrMalformed, name, num)
	}
	v, err := strconv.ParseFloat(string(num), 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange && math.IsInf(v, 0) {
			return 0, fmt.Errorf("%w: %w: %s=%q is beyond a float64", balancer.ErrInvalidProbe, ErrInvalidValue, name, num)
		}
		return 0, fmt.Errorf("%w: %w: %s=%q is not a number", balancer.ErrInvalidProbe, ErrMalformed, name, num)
	}
	return v, nil
}

// ProbeFromNamedMetrics reads a probe answer from a report's
// named_metrics (as a gRPC probe carries it, in an OrcaLoadReport):
// InFlightName required, LatencyName in milliseconds and 0 if absent,
// refused as ParseProbe refuses values, with ErrNoReport when the rif is
// missing.
func ProbeFromNamedMetrics(named map[string]float64) (inFlight float64, latency time.Duration, err error) {
	rif, ok := named[InFlightName]
	if !ok {
		return 0, 0, fmt.Errorf("%w: %w: no %s in the named metrics", balancer.ErrInvalidProbe, ErrNoReport, probeInFlightKey)
	}
	return checkProbe(rif, named[LatencyName])
}

// checkProbe applies a probe answer's bounds to its rif and its latency
// in milliseconds, and converts the latency.
func checkProbe(rif, ms float64) (float64, time.Duration, error) {
	if math.IsNaN(rif) || math.IsInf(rif, 0) || rif < 0 || rif > balancer.MaxProbeInFlight {
		return 0, 0, fmt.Errorf("%w: %w: %s=%v, want 0 to %d", balancer.ErrInvalidProbe, ErrInvalidValue, probeInFlightKey, rif, balancer.MaxProbeInFlight)
	}
	const maxMs = float64(balancer.MaxProbeLatency) / float64(time.Millisecond)
	if math.IsNaN(ms) || math.IsInf(ms, 0) || ms < 0 || ms > maxMs {
		return 0, 0, fmt.Errorf("%w: %w: %s=%v, want 0 to %v", balancer.ErrInvalidProbe, ErrInvalidValue, probeLatencyKey, ms, maxMs)
	}
	return rif + 0, time.Duration(math.Round(ms * float64(time.Millisecond))), nil // + 0 turns -0 into 0
}
