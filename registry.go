package balancer

import (
	"errors"
	"fmt"
	"strings"
)

// Algorithm is one of the package's pickers, as tools choose it by name:
// balance trace -algo, balance sim -pickers, the reverse-proxy example and
// the package's own contract, fuzz, bad-input and benchmark suites all read
// Algorithms, so a picker added here is known to all of them.
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
	// client address (Request.SetKey, Request.SetAddr).
	Keyed bool

	// NoBackups reports whether the picker refuses backup peers, as nginx
	// refuses them with its hash, ip_hash and random methods.
	NoBackups bool
}

// ErrUnknownAlgorithm is returned by AlgorithmNamed for a name no picker
// has.
var ErrUnknownAlgorithm = errors.New("balancer: unknown algorithm")

// algorithms lists every picker, one line each, in the order reports use.
var algorithms = []Algorithm{
	{Name: "RoundRobin", New: as(NewRoundRobin), Random: true},
	{Name: "SmoothWRR", New: as(NewSmoothWRR)},
	{Name: "ClassicWRR", New: as(NewClassicWRR)},
	{Name: "RandomWeighted", New: as(NewRandomWeighted), Random: true},
	{Name: "LeastConn", New: as(NewLeastConn)},
	{Name: "P2CPeakEWMA", New: as(NewP2CPeakEWMA), Random: true, Latency: true},
	{Name: "FastestFirst", New: as(NewFastestFirst), Random: true, Latency: true},
	{Name: "Hash", New: as(NewHash), Keyed: true, NoBackups: true},
	{Name: "ConsistentHash", New: as(NewConsistentHash), Keyed: true, NoBackups: true},
	{Name: "IPHash", New: as(NewIPHash), Keyed: true, NoBackups: true},
	{Name: "Random", New: as(NewRandom), Random: true, NoBackups: true},
	{Name: "RandomTwo", New: as(NewRandomTwo), Random: true, NoBackups: true},
}

// Algorithms returns every picker of the package, in a fixed order, in a new
// slice.
func Algorithms() []Algorithm { return append([]Algorithm(nil), algorithms...) }

// AlgorithmNamed returns the picker called name, matched without regard to
// case, or an error wrapping ErrUnknownAlgorithm that lists the names.
func AlgorithmNamed(name string) (Algorithm, error) {
	for _, a := range algorithms {
		if strings.EqualFold(a.Name, name) {
			return a, nil
		}
	}
	return Algorithm{}, fmt.Errorf("balancer: %q (want one of %s): %w", name, AlgorithmNames(), ErrUnknownAlgorithm)
}

// AlgorithmNames returns the pickers' names, comma-separated, for help
// texts and errors.
func AlgorithmNames() string {
	names := make([]string, len(algorithms))
	for i, a := range algorithms {
		names[i] = a.Name
	}
	return strings.Join(names, ", ")
}

// as adapts a constructor to Algorithm.New; its type parameter checks, at
// compile time, that every picker in the registry is a Balancer and a
// Connector.
func as[T interface {
	Balancer
	Connector
}](f func([]*Peer, ...Option) (T, error)) func([]*Peer, ...Option) (Balancer, error) {
	return func(peers []*Peer, opts ...Option) (Balancer, error) {
		p, err := f(peers, opts...)
		if err != nil {
			return nil, err // not a typed nil inside the interface
		}
		return p, nil
	}
}
