package grpcbalancer

import (
	"google.golang.org/grpc/experimental/balancer/weight"
	"google.golang.org/grpc/resolver"
)

// weightKey is the attribute key of a peer's weight.
type weightKey struct{}

// WithWeight returns addr with weight w attached as a balancer attribute,
// for a resolver to report: the policies give the address's peer that
// weight (nginx's weight=N). An address without one has gRPC's own
// endpoint weight (weight.FromEndpoint, which gRPC's xds resolver sets
// from EDS), else weight 1. gRPC moves an address's balancer attributes
// to the endpoint it makes of it, where the policies read them. A weight out of [0, balancer.MaxWeightSum]
// makes the resolver update fail, naming the address; the policy keeps its
// previous peers.
func WithWeight(addr resolver.Address, w int) resolver.Address {
	addr.BalancerAttributes = addr.BalancerAttributes.WithValue(weightKey{}, w)
	return addr
}

// WithEndpointWeight is WithWeight for a resolver that reports endpoints.
func WithEndpointWeight(ep resolver.Endpoint, w int) resolver.Endpoint {
	ep.Attributes = ep.Attributes.WithValue(weightKey{}, w)
	return ep
}

// weightOf returns the endpoint's weight: its own attribute, else its first
// address's, else gRPC's endpoint weight (see weightsOf), else 1.
func weightOf(ep resolver.Endpoint) int {
	w, _ := endpointWeight(ep)
	return w
}

// endpointWeight is weightOf, and whether the weight is gRPC's.
func endpointWeight(ep resolver.Endpoint) (int, bool) {
	if w, ok := ep.Attributes.Value(weightKey{}).(int); ok {
		return w, false
	}
	if len(ep.Addresses) > 0 {
		if w, ok := ep.Addresses[0].BalancerAttributes.Value(weightKey{}).(int); ok {
			return w, false
		}
	}
	if w := weight.FromEndpoint(ep).Weight; w > 0 {
		return int(w), true
	}
	return 1, false
}

// grpcWeightSum is the total that weightsOf scales gRPC's endpoint weights
// to: small enough for nginx's hash (whose 15-bit hash takes the total
// modulo) and ConsistentHash's ring (160 points a unit), fine enough for
// shares of 0.1%.
const grpcWeightSum = 1000

// weightsOf returns the weights of eps (weightOf's), gRPC's own scaled to
// small integers. gRPC's xds resolver sets those from EDS: since gRFC
// A113, an endpoint's share of its locality times the locality's share,
// in 1.31 fixed point, so a priority's add up to about 2^31, past what
// nginx's algorithms take. Equal ones become 1 each; ones adding up to at
// most grpcWeightSum stay as they are (as without A113, whose weights are
// EDS's own); others become their share of grpcWeightSum, rounded, at
// least 1. Ours stay as they are.
func weightsOf(eps []resolver.Endpoint) []int {
	ws := make([]int, len(eps))
	var grpcs []int // the indexes of gRPC's
	equal := true
	var sum uint64
	for i, ep := range eps {
		var g bool
		ws[i], g = endpointWeight(ep)
		if g {
			if len(grpcs) > 0 && ws[i] != ws[grpcs[0]] {
				equal = false
			}
			grpcs = append(grpcs, i)
			sum += uint64(ws[i])
		}
	}
	switch {
	case len(grpcs) == 0 || !equal && sum <= grpcWeightSum:
	case equal:
		for _, i := range grpcs {
			ws[i] = 1
		}
	default:
		for _, i := range grpcs {
			ws[i] = max(1, int((uint64(ws[i])*grpcWeightSum+sum/2)/sum))
		}
	}
	return ws
}
