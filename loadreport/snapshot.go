package loadreport

import (
	"encoding/base64"
	"strconv"
)

// The named metrics a Tracker's reports carry.
const (
	// InFlightName is the named metric of the requests in flight
	// (named_metrics.rif): on a per-response report, the response's own
	// request included.
	InFlightName = "rif"
	// LatencyName is the named metric of the latency estimate
	// (named_metrics.latency_ms): the mean duration, in milliseconds, of
	// the requests completed in the window; absent (0) until one has.
	LatencyName = "latency_ms"
)

// Snapshot is a Tracker's load at one moment, what a report carries: the
// fields of Report it fills, with no map.
type Snapshot struct {
	CPUUtilization         float64 // cpu_utilization, as last set
	MemUtilization         float64 // mem_utilization, as last set
	ApplicationUtilization float64 // application_utilization, as last set or from WithUtilization or WithConcurrency
	RPSFractional          float64 // rps_fractional: requests completed per second over the window
	EPS                    float64 // eps: errors completed per second over the window
	InFlight               float64 // named_metrics.rif: requests begun and not ended
	LatencyMs              float64 // named_metrics.latency_ms: mean duration of the window's requests
}

// Report returns s as a Report; its NamedMetrics holds InFlightName, and
// LatencyName where s.LatencyMs is not 0.
func (s Snapshot) Report() Report {
	named := map[string]float64{InFlightName: s.InFlight}
	if s.LatencyMs != 0 {
		named[LatencyName] = s.LatencyMs
	}
	return Report{
		CPUUtilization: s.CPUUtilization, MemUtilization: s.MemUtilization,
		ApplicationUtilization: s.ApplicationUtilization,
		RPSFractional:          s.RPSFractional, EPS: s.EPS, NamedMetrics: named,
	}
}

// appendHeader appends the snapshot in format f, with no allocation when
// dst and scratch have room: the fields a Tracker reports have fixed
// names that TEXT can carry and finite, non-negative values. Zero values
// are left out, as proto3 does, but for rif.
func (s *Snapshot) appendHeader(dst, scratch []byte, f Format) []byte {
	dst = append(dst, f.prefix()...)
	switch f {
	case Text:
		start := len(dst)
		dst = appendTextPair(dst, start, nameCPU, "", s.CPUUtilization)
		dst = appendTextPair(dst, start, nameMem, "", s.MemUtilization)
		dst = appendTextPair(dst, start, nameApp, "", s.ApplicationUtilization)
		dst = appendTextPair(dst, start, nameRPS, "", s.RPSFractional)
		dst = appendTextPair(dst, start, nameEPS, "", s.EPS)
		dst = appendTextPair(dst, start, nameNamed+".", InFlightName, s.InFlight)
		if s.LatencyMs != 0 {
			dst = appendTextPair(dst, start, nameNamed+".", LatencyName, s.LatencyMs)
		}
	case JSON:
		dst = append(dst, '{')
		start := len(dst)
		for _, p := range [...]struct {
			name string
			v    float64
		}{
			{nameCPU, s.CPUUtilization}, {nameMem, s.MemUtilization}, {nameApp, s.ApplicationUtilization},
			{nameRPS, s.RPSFractional}, {nameEPS, s.EPS},
		} {
			if p.v != 0 {
				dst = appendJSONSep(dst, start)
				dst = append(dst, '"')
				dst = append(dst, p.name...)
				dst = append(dst, '"', ':')
				dst = strconv.AppendFloat(dst, p.v, 'g', -1, 64)
			}
		}
		dst = appendJSONSep(dst, start)
		dst = append(dst, `"named_metrics":{"`+InFlightName+`":`...)
		dst = strconv.AppendFloat(dst, s.InFlight, 'g', -1, 64)
		if s.LatencyMs != 0 {
			dst = append(dst, `,"`+LatencyName+`":`...)
			dst = strconv.AppendFloat(dst, s.LatencyMs, 'g', -1, 64)
		}
		dst = append(dst, '}', '}')
	case Binary:
		pb := scratch[:0]
		pb = appendProtoDouble(pb, fieldCPU, s.CPUUtilization)
		pb = appendProtoDouble(pb, fieldMem, s.MemUtilization)
		pb = appendProtoDouble(pb, fieldRPSFrac, s.RPSFractional)
		pb = appendProtoDouble(pb, fieldEPS, s.EPS)
		pb = appendProtoMapEntry(pb, fieldNamed, InFlightName, s.InFlight)
		if s.LatencyMs != 0 {
			pb = appendProtoMapEntry(pb, fieldNamed, LatencyName, s.LatencyMs)
		}
		pb = appendProtoDouble(pb, fieldApp, s.ApplicationUtilization)
		dst = base64.StdEncoding.AppendEncode(dst, pb)
	}
	return dst
}
