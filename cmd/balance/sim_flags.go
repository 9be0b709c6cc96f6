package main

import (
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/sim"
)

// optInt is a flag that overrides a scenario's count only when given; it
// rejects negative values, and values above max unless max is 0. Unset, it
// prints no default of its own, so the usage text can state the scenarios'
// real ones.
type optInt struct {
	v, max int
	set    bool
}

func (o *optInt) String() string {
	if o == nil || !o.set {
		return ""
	}
	return strconv.Itoa(o.v)
}

func (o *optInt) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	if v < 0 {
		return fmt.Errorf("%d is negative", v)
	}
	if o.max > 0 && v > o.max {
		return fmt.Errorf("%d is more than %d", v, o.max)
	}
	o.v, o.set = v, true
	return nil
}

// optDuration is optInt for a duration.
type optDuration struct {
	v   time.Duration
	set bool
}

func (o *optDuration) String() string {
	if o == nil || !o.set {
		return ""
	}
	return o.v.String()
}

func (o *optDuration) Set(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration")
	}
	if v < 0 {
		return fmt.Errorf("%v is negative", v)
	}
	o.v, o.set = v, true
	return nil
}

// seconds formats d as a flag would take it, in whole seconds when it is.
func seconds(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// scenarioDefault returns the "(default ...)" of an override: the value
// get reads from each built-in scenario, the most common first and the
// others with the scenarios that have them.
func scenarioDefault(get func(*sim.Scenario) string) string {
	scs := sim.Scenarios()
	names := map[string][]string{}
	var values []string
	for i := range scs {
		v := get(&scs[i])
		if _, ok := names[v]; !ok {
			values = append(values, v)
		}
		names[v] = append(names[v], scs[i].Name)
	}
	slices.SortStableFunc(values, func(a, b string) int { return len(names[b]) - len(names[a]) })
	var b strings.Builder
	b.WriteString("(default: the scenario's, " + values[0])
	if len(values) == 1 {
		b.WriteString(" in all")
	}
	for _, v := range values[1:] {
		fmt.Fprintf(&b, "; %s in %s", v, strings.Join(names[v], ", "))
	}
	b.WriteString(")")
	return b.String()
}

// peerOf returns a peer with a scenario's peer options, to read the
// failure settings they give.
func peerOf(s *sim.Scenario) *balancer.Peer { return balancer.NewPeer("default", s.PeerOptions...) }

// Defaults of the overrides, as the built-in scenarios set them.
var (
	durationDefault = scenarioDefault(func(s *sim.Scenario) string { return seconds(s.Duration) })
	loadDefault     = scenarioDefault(func(s *sim.Scenario) string {
		if s.Rate > 0 {
			return fmt.Sprintf("none, a fixed %g requests/s,", s.Rate)
		}
		return strconv.FormatFloat(s.Load, 'g', -1, 64)
	})
	clientsDefault = scenarioDefault(func(s *sim.Scenario) string { return strconv.Itoa(max(s.Clients, 1)) })
	triesDefault   = scenarioDefault(func(s *sim.Scenario) string {
		if s.Tries == 0 {
			return "0"
		}
		return strconv.Itoa(s.Tries)
	})
	timeoutDefault = scenarioDefault(func(s *sim.Scenario) string {
		if s.Timeout == 0 {
			return seconds(sim.DefaultTimeout)
		}
		return seconds(s.Timeout)
	})
	maxFailsDefault    = scenarioDefault(func(s *sim.Scenario) string { return strconv.Itoa(peerOf(s).MaxFails()) })
	failTimeoutDefault = scenarioDefault(func(s *sim.Scenario) string { return seconds(peerOf(s).FailTimeout()) })
	jitterDefault      = scenarioDefault(func(s *sim.Scenario) string {
		if s.Jitter.Every == 0 {
			return "no jitter"
		}
		return seconds(s.Jitter.Every)
	})
)

// given returns the flags of fs that args sets, each with the text it was
// given (booleans as "true"), so that an error names a value as the user
// wrote it (1e9, not 1e+09). Call it after fs.Parse(args) succeeded; a
// flag given twice has its last text, as it has its last value.
func given(fs *flag.FlagSet, args []string) map[string]string {
	set := map[string]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if len(a) < 2 || a[0] != '-' {
			continue
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			if !hasValue {
				value = "true"
			}
		} else if !hasValue && i+1 < len(args) {
			i++
			value = args[i]
		}
		set[name] = value
	}
	return set
}

// shown writes a flag's text as the shell would need it: quoted when empty
// or holding a space.
func shown(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"'") {
		return strconv.Quote(v)
	}
	return v
}

// hint is the line that follows a usage error, in place of the usage.
func hint(cmd string) string { return fmt.Sprintf("Run \"balance %s -h\" for usage.\n", cmd) }
