// Package xdsbalancer lets an xDS control plane choose and configure the
// load-balancing policies of github.com/lbgo/balancer/grpcbalancer for
// gRPC clients, through gRPC's custom policies (gRFC A52).
//
// Importing it (or grpcbalancer) registers the lbgo_ policies. A Cluster
// selects one by an entry of its load_balancing_policy list holding a
// TypedStruct (xds.type.v3) whose type_url ends in the policy's name, its
// value the policy's config as a google.protobuf.Struct: the JSON object
// that the service config's loadBalancingConfig holds for that policy
// (grpcbalancer.Config). gRPC takes the first entry it can: an entry whose
// name is not registered in the client is skipped for the next, so a list
// can end with a policy every client has:
//
//	fastest, err := xdsbalancer.Policy("lbgo_fastestfirst", map[string]any{"maxFails": 3, "failTimeout": "10s"})
//	cluster.LoadBalancingPolicy = &clusterv3.LoadBalancingPolicy{
//		Policies: []*clusterv3.LoadBalancingPolicy_Policy{fastest, roundRobin},
//	}
//
// A config the chosen policy refuses makes the client reject the Cluster
// (a NACK): it keeps the one it had. Policy checks a config as the client
// will, so a control plane built in Go learns of it before sending.
//
// Numbers: a Struct holds every number as a double; gRPC writes an
// integral one as an integer (3.0 arrives as 3), and grpcbalancer's int
// fields take any number whose value is an integer as written (3, 3.0,
// 3e0), refusing 3.5 with the field's name. Durations are strings
// (time.ParseDuration's "10s", "250ms"), as in the service config: a
// number there is refused, naming the field. EDS's endpoint weights reach
// the weighted policies (see grpcbalancer.WithWeight).
//
// The package's test runs the whole path: a go-control-plane management
// server on loopback, a gRPC client of grpc-go's xds resolver, and real
// servers, for the policy's choice, its config, a pushed change, the
// fallback past an unregistered name, a refused config, every lbgo_ policy
// and EDS weights.
package xdsbalancer

import _ "github.com/lbgo/balancer/grpcbalancer" // registers the lbgo_ policies
