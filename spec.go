package balancer

import "slices"

// Algorithm is one of the package's pickers, as tools choose it by name:
// balance trace -algo, balance sim -pickers, the reverse-proxy example, the
// gRPC balancer and the package's own contract, fuzz, bad-input and
// benchmark suites all read Algorithms, so a picker added here is known to
// all of them. Every field but New comes from the picker's one
// declaration, which its constructor also reads.
type Algorithm struct {
	// Name is the picker's type name, the one name it goes by everywhere.
	// Command-line flags match it without regard to case.
	Name string

	// New builds the picker; it is the type's own constructor.
	New func(peers []*Peer, opts ...Option) (Balancer, error)

	// Random reports whether the picker draws random numbers, and so
	// accepts WithRand.
	Random bool

	// Latency reports whether the picker learns from Outcome.Latency.
	Latency bool

	// Keyed reports whether the picker routes by the Request's key or
	// client address (Request.SetKey, Request.SetClientAddr).
	Keyed bool

	// NoBackups reports whether the picker refuses backup peers, as nginx
	// refuses them with its hash, ip_hash and random methods.
	NoBackups bool

	// Options names, by function name ("WithRand", "WithDecay"), the
	// options the picker accepts besides WithClock, WithEvents and the
	// guards (WithPanicThreshold, WithMaxEjectionPercent), which every
	// picker accepts; New refuses every other one but the Option of the
	// picker's settings type. A field of that type goes by the name of the
	// option it replaced ("WithBand" for FastestFirstSettings.Band), the
	// name flags and config fields are derived from.
	Options []string
}

// pickerSpec is a picker's one declaration, in its file: its name, the
// options it accepts besides WithClock and WithEvents ("WithRand" among
// them makes it Random), and its traits. Its constructor passes it to
// newConfig and its peer set (peerSet.init reads noBackups); the registry
// turns it into an Algorithm.
type pickerSpec struct {
	name      string
	options   []string
	latency   bool   // learns from Outcome.Latency
	keyed     bool   // routes by the request's key or client address
	noBackups bool   // refuses backup peers, as nginx's hash and random methods do
	settings  string // its settings type ("FastestFirstSettings"), whose Option it accepts; "" if none
}

// accepts reports whether the picker takes the option called name: its
// own, and those every picker takes.
func (s pickerSpec) accepts(name string) bool {
	return name == "WithClock" || name == "WithEvents" || slices.Contains(guardOptions, name) || slices.Contains(s.options, name) ||
		name == s.settings && name != ""
}

// algorithm returns the registry's entry for the picker built by newFn.
func (s pickerSpec) algorithm(newFn func([]*Peer, ...Option) (Balancer, error)) Algorithm {
	return Algorithm{
		Name:      s.name,
		New:       newFn,
		Random:    slices.Contains(s.options, "WithRand"),
		Latency:   s.latency,
		Keyed:     s.keyed,
		NoBackups: s.noBackups,
		Options:   slices.Clone(s.options),
	}
}
