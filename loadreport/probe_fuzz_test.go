package loadreport

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/lbgo/balancer"
)

// FuzzParseProbe: ParseProbe never panics, fails only with
// balancer.ErrInvalidProbe and one of the package's sentinels, and what
// it accepts is in a ProbeAnswer's bounds; an accepted answer whose rif
// is a whole number survives the encoder, appendProbe, unchanged.
func FuzzParseProbe(f *testing.F) {
	for _, s := range []string{
		"TEXT named_metrics.rif=3,named_metrics.latency_ms=1.5",
		"TEXT named_metrics.rif:4, named_metrics.latency_ms=3.6e+06,x=y",
		"TEXT named_metrics.rif=NaN",
		"TEXT named_metrics.rif=1,named_metrics.rif=1",
		"TEXT named_metrics.latency_ms=1e400",
		"BIN x",
		"",
	} {
		f.Add([]byte(s))
	}
	sentinels := []error{ErrNoReport, ErrUnknownFormat, ErrMalformed, ErrInvalidValue, ErrTooLarge}
	f.Fuzz(func(t *testing.T, body []byte) {
		rif, lat, err := ParseProbe(body)
		if err != nil {
			if !errors.Is(err, balancer.ErrInvalidProbe) || !isAny(err, sentinels) {
				t.Fatalf("ParseProbe(%q): error %v wraps no sentinel", body, err)
			}
			return
		}
		if math.IsNaN(rif) || rif < 0 || rif > balancer.MaxProbeInFlight || lat < 0 || lat > balancer.MaxProbeLatency {
			t.Fatalf("ParseProbe(%q) = %v, %v: out of bounds", body, rif, lat)
		}
		if rif != math.Trunc(rif) {
			return
		}
		b := appendProbe(nil, int64(rif), lat)
		rif2, lat2, err := ParseProbe(b)
		if err != nil || rif2 != rif || lat2 != lat {
			t.Fatalf("ParseProbe(%q) = %v, %v; its encoding %q parses to %v, %v, %v", body, rif, lat, b, rif2, lat2, err)
		}
	})
}

// FuzzProbeRoundTrip: every answer a Tracker can give (rif 0 to
// MaxProbeInFlight, latency 0 to MaxProbeLatency, to the nanosecond)
// parses back exactly.
func FuzzProbeRoundTrip(f *testing.F) {
	f.Add(uint32(0), int64(0))
	f.Add(uint32(3), int64(1500*time.Microsecond))
	f.Add(uint32(balancer.MaxProbeInFlight), int64(balancer.MaxProbeLatency))
	f.Add(uint32(7), int64(123456789))
	f.Fuzz(func(t *testing.T, n uint32, ns int64) {
		rif := int64(n % (balancer.MaxProbeInFlight + 1))
		lat := time.Duration(ns % int64(balancer.MaxProbeLatency+1))
		if lat < 0 {
			lat = -lat
		}
		b := appendProbe(nil, rif, lat)
		gotRIF, gotLat, err := ParseProbe(b)
		if err != nil || gotRIF != float64(rif) || gotLat != lat {
			t.Fatalf("%q parses to %v, %v, %v; want %d, %v", b, gotRIF, gotLat, err, rif, lat)
		}
	})
}

func isAny(err error, sentinels []error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}
