package loadreport

import (
	"errors"
	"strings"
	"testing"

	"github.com/lbgo/balancer"
)

// FuzzParse: Parse never panics, fails only with a sentinel, and what it
// accepts validates, survives a round trip through every format that
// can carry it, and converts to a ServerLoad a picker's Done accepts.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"TEXT cpu_utilization=0.7,named_metrics.foo=123,utilization.total=0.5",
		"TEXT eps:2, rps_fractional:1000",
		`JSON {"cpu_utilization":0.7,"named_metrics":{"foo":123},"request_cost":{"db":1}}`,
		"BIN CQAAAAAAAOA/MQAAAAAAAFlAOQAAAAAAAABAQg4KA3JpZhEAAAAAAAAQQA",
		"BIN CQAAAAAAAOA/eAE=",
		"BIN QgsKABEAAAAAAADwPw==",
		"TEXT cpu_utilization=-1",
		"TEXT rps_fractional=1e400",
		"BAD x",
		"",
		// Parses as JSON (7,029 bytes); its BIN encoding would be 9,360.
		`JSON {"named_metrics":{"` + strings.Repeat("a", 7000) + `":1}}`,
	} {
		f.Add(s)
	}
	sentinels := []error{ErrNoReport, ErrUnknownFormat, ErrMalformed, ErrInvalidValue, ErrTooLarge}
	peer := balancer.NewPeer("a")
	picker, err := balancer.NewRoundRobin([]*balancer.Peer{peer})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, in string) {
		r, err := Parse(in)
		if err != nil {
			for _, s := range sentinels {
				if errors.Is(err, s) {
					return
				}
			}
			t.Fatalf("Parse(%q): error %v wraps no sentinel", in, err)
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("Parse(%q) accepted a report that fails Validate: %v", in, err)
		}
		l := r.ServerLoad()
		p, err := picker.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := picker.Done(p, balancer.Outcome{Load: &l}); err != nil {
			t.Fatalf("Parse(%q) = %+v; Done refuses its ServerLoad %+v: %v", in, r, l, err)
		}
		for _, fm := range []Format{Text, JSON, Binary} {
			h, err := r.Header(fm)
			if err != nil {
				continue // TEXT cannot carry every name; nothing to send in TEXT or BIN
			}
			back, err := Parse(h)
			if err != nil || !back.Equal(r) {
				t.Fatalf("Parse(%q) = %+v; through %v %q back to %+v, %v", in, r, fm, h, back, err)
			}
		}
	})
}
