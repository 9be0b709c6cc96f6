package xdsbalancer_test

import (
	"encoding/json"
	"fmt"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	"github.com/lbgo/balancer/xdsbalancer"
	"google.golang.org/protobuf/types/known/anypb"
)

// A Cluster for gRPC clients: lbgo_fastestfirst where the client has it
// (it imports grpcbalancer or xdsbalancer), gRPC's round_robin elsewhere.
func ExamplePolicy() {
	fastest, err := xdsbalancer.Policy("lbgo_fastestfirst", map[string]any{"maxFails": 3, "failTimeout": "10s"})
	if err != nil {
		panic(err)
	}
	rr, err := anypb.New(&roundrobinv3.RoundRobin{})
	if err != nil {
		panic(err)
	}
	cluster := &clusterv3.Cluster{
		Name: "api",
		LoadBalancingPolicy: &clusterv3.LoadBalancingPolicy{Policies: []*clusterv3.LoadBalancingPolicy_Policy{
			fastest,
			{TypedExtensionConfig: &corev3.TypedExtensionConfig{Name: "envoy.load_balancing_policies.round_robin", TypedConfig: rr}},
		}},
	}

	for _, p := range cluster.GetLoadBalancingPolicy().GetPolicies() {
		typed := p.GetTypedExtensionConfig().GetTypedConfig()
		var ts xdstypev3.TypedStruct
		if typed.UnmarshalTo(&ts) != nil {
			fmt.Println(typed.GetTypeUrl())
			continue
		}
		config, _ := json.Marshal(ts.GetValue().AsMap())
		fmt.Println(typed.GetTypeUrl(), ts.GetTypeUrl(), string(config))
	}
	// Output:
	// type.googleapis.com/xds.type.v3.TypedStruct type.googleapis.com/lbgo_fastestfirst {"failTimeout":"10s","maxFails":3}
	// type.googleapis.com/envoy.extensions.load_balancing_policies.round_robin.v3.RoundRobin
}

// A config the policy refuses is refused here, as the client would refuse
// the Cluster: a Struct's number is a double, and 3.5 is no max_fails.
func ExamplePolicy_refused() {
	_, err := xdsbalancer.Policy("lbgo_fastestfirst", map[string]any{"maxFails": 3.5})
	fmt.Println(err)
	// Output:
	// xdsbalancer: bad load-balancing policy: lbgo_fastestfirst: grpcbalancer: bad load-balancing config: maxFails 3.5: not an integer
}
