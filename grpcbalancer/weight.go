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
// address's, else gRPC's endpoint weight (weight.FromEndpoint, which gRPC's
// xds resolver sets from EDS: since gRFC A113, the endpoint's share of its
// locality times the locality's share, in 16.16 fixed point, so the
// weights of a priority's endpoints add up to about 65536), else 1.
func weightOf(ep resolver.Endpoint) int {
	if w, ok := ep.Attributes.Value(weightKey{}).(int); ok {
		return w
	}
	if len(ep.Addresses) > 0 {
		if w, ok := ep.Addresses[0].BalancerAttributes.Value(weightKey{}).(int); ok {
			return w
		}
	}
	if w := weight.FromEndpoint(ep).Weight; w > 0 {
		return int(w)
	}
	return 1
}
