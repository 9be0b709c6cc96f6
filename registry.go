package balancer

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrUnknownAlgorithm is returned by AlgorithmNamed for a name no picker
// has.
var ErrUnknownAlgorithm = errors.New("balancer: unknown algorithm")

// algorithms lists every picker, one line each, in the order reports use.
var algorithms = []Algorithm{
	roundRobinSpec.algorithm(as(NewRoundRobin)),
	smoothWRRSpec.algorithm(as(NewSmoothWRR)),
	classicWRRSpec.algorithm(as(NewClassicWRR)),
	randomWeightedSpec.algorithm(as(NewRandomWeighted)),
	leastConnSpec.algorithm(as(NewLeastConn)),
	p2cSpec.algorithm(as(NewP2CPeakEWMA)),
	fastestFirstSpec.algorithm(as(NewFastestFirst)),
	hashSpec.algorithm(as(NewHash)),
	consistentHashSpec.algorithm(as(NewConsistentHash)),
	ipHashSpec.algorithm(as(NewIPHash)),
	randomSpec.algorithm(as(NewRandom)),
	randomTwoSpec.algorithm(as(NewRandomTwo)),
	reportedWRRSpec.algorithm(as(NewReportedWRR)),
	prequalSpec.algorithm(as(NewPrequal)),
}

// Algorithms returns every picker of the package, in a fixed order, in a new
// slice.
func Algorithms() []Algorithm {
	all := make([]Algorithm, len(algorithms))
	for i, a := range algorithms {
		a.Options = slices.Clone(a.Options)
		all[i] = a
	}
	return all
}

// AlgorithmNamed returns the picker called name, matched without regard to
// case, or an error wrapping ErrUnknownAlgorithm that lists the names.
func AlgorithmNamed(name string) (Algorithm, error) {
	for _, a := range algorithms {
		if strings.EqualFold(a.Name, name) {
			a.Options = slices.Clone(a.Options)
			return a, nil
		}
	}
	return Algorithm{}, fmt.Errorf("balancer: %q (want one of %s): %w", name, algorithmNames(), ErrUnknownAlgorithm)
}

// AlgorithmNames returns the pickers' names, comma-separated, for help
// texts and errors.
//
// Deprecated: use Algorithms and each one's Name; AlgorithmNamed's error
// lists the names.
func AlgorithmNames() string { return algorithmNames() }

// algorithmNames returns the pickers' names, comma-separated.
func algorithmNames() string {
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
