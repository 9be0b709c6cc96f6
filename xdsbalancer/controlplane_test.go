package xdsbalancer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/log"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// The names the xDS resources give each other: the client dials
// "xds:///"+listenerName.
const (
	nodeID       = "lbgo-xds-test"
	listenerName = "lbgo.test"
	routeName    = "lbgo-route"
	clusterName  = "lbgo-cluster"
	edsName      = "lbgo-endpoints"
)

// controlPlane is go-control-plane's management server (its v3 server over
// a snapshot cache) on loopback, with what the client told it about the
// Cluster resources it sent: the versions it accepted and the errors of
// those it rejected.
type controlPlane struct {
	t       *testing.T
	addr    string
	cache   cachev3.SnapshotCache
	version int // of the last snapshot set

	mu     sync.Mutex
	acked  string   // the Cluster version the client last accepted
	nacked []string // the client's error details for rejected Clusters
}

func startControlPlane(t *testing.T) *controlPlane {
	t.Helper()
	cp := &controlPlane{t: t}
	// ads: answer only once the client has asked for every resource of a
	// type that the snapshot holds, as an ADS client expects.
	cp.cache = cachev3.NewSnapshotCache(true, cachev3.IDHash{}, log.LoggerFuncs{})
	ctx, cancel := context.WithCancel(context.Background())
	xs := serverv3.NewServer(ctx, cp.cache, serverv3.CallbackFuncs{StreamRequestFunc: cp.request})
	gs := grpc.NewServer()
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp.addr = lis.Addr().String()
	go gs.Serve(lis)
	t.Cleanup(func() {
		cancel()
		gs.Stop()
	})
	return cp
}

// request notes the client's ACK or NACK of the Clusters it was sent.
func (cp *controlPlane) request(_ int64, req *discoveryv3.DiscoveryRequest) error {
	if req.GetTypeUrl() != resourcev3.ClusterType || req.GetResponseNonce() == "" {
		return nil // not a Cluster, or the first request, before any response
	}
	cp.mu.Lock()
	defer cp.mu.Unlock()
	if d := req.GetErrorDetail(); d != nil {
		cp.nacked = append(cp.nacked, d.GetMessage())
	} else {
		cp.acked = req.GetVersionInfo()
	}
	return nil
}

// bootstrap is grpc-go's xDS bootstrap config for a client of cp.
func (cp *controlPlane) bootstrap() []byte {
	return fmt.Appendf(nil, `{
	  "xds_servers": [{"server_uri": %q, "channel_creds": [{"type": "insecure"}], "server_features": ["xds_v3"]}],
	  "node": {"id": %q}
	}`, cp.addr, nodeID)
}

// push sets a new snapshot: the listener, route and endpoints for the
// backends at addrs, and a Cluster whose load_balancing_policy is lb (nil:
// none, so gRPC's default round_robin). It returns the snapshot's version.
func (cp *controlPlane) push(addrs []string, lb *clusterv3.LoadBalancingPolicy) string {
	cp.t.Helper()
	return cp.pushWeighted(addrs, nil, lb)
}

// pushWeighted is push with EDS weights: weights[i] is the
// load_balancing_weight of the endpoint at addrs[i] (none: unset).
func (cp *controlPlane) pushWeighted(addrs []string, weights []uint32, lb *clusterv3.LoadBalancingPolicy) string {
	cp.t.Helper()
	cp.version++
	version := strconv.Itoa(cp.version)
	snap, err := cachev3.NewSnapshot(version, map[resourcev3.Type][]types.Resource{
		resourcev3.ListenerType: {listener()},
		resourcev3.RouteType:    {route()},
		resourcev3.ClusterType:  {cluster(lb)},
		resourcev3.EndpointType: {endpoints(cp.t, addrs, weights)},
	})
	if err != nil {
		cp.t.Fatal(err)
	}
	if err := cp.cache.SetSnapshot(context.Background(), nodeID, snap); err != nil {
		cp.t.Fatal(err)
	}
	return version
}

// waitACK waits until the client has accepted the Cluster of the given
// version, failing the test after a bound.
func (cp *controlPlane) waitACK(version string) {
	cp.t.Helper()
	waitFor(cp.t, "the client's ACK of Cluster version "+version, func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return cp.acked == version
	})
}

// waitNACK waits for the client to reject a Cluster with an error detail
// that contains want, failing the test after a bound.
func (cp *controlPlane) waitNACK(want string) {
	cp.t.Helper()
	waitFor(cp.t, fmt.Sprintf("the client's NACK of a Cluster, saying %q", want), func() bool {
		cp.mu.Lock()
		defer cp.mu.Unlock()
		return slices.ContainsFunc(cp.nacked, func(msg string) bool { return strings.Contains(msg, want) })
	})
}

// waitFor polls cond every few milliseconds until it holds, failing the
// test once 20 s have passed (a bound for a loaded machine; it takes well
// under a second here).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// ads is the config source of a resource that comes on the same
// aggregated stream as the one naming it.
func ads() *corev3.ConfigSource {
	return &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // only for the messages of this file, which marshal
	}
	return a
}

// listener is the client's Listener: an API listener whose HTTP connection
// manager takes its routes from routeName, with the router filter gRPC
// requires last.
func listener() *listenerv3.Listener {
	hcm := &hcmv3.HttpConnectionManager{
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: ads(), RouteConfigName: routeName}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
		}},
	}
	return &listenerv3.Listener{Name: listenerName, ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(hcm)}}
}

// route sends every RPC to clusterName.
func route() *routev3.RouteConfiguration {
	return &routev3.RouteConfiguration{
		Name: routeName,
		VirtualHosts: []*routev3.VirtualHost{{
			Name:    "all",
			Domains: []string{"*"},
			Routes: []*routev3.Route{{
				Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
				Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: clusterName}}},
			}},
		}},
	}
}

// cluster is an EDS cluster with the load-balancing policy lb.
func cluster(lb *clusterv3.LoadBalancingPolicy) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 clusterName,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{EdsConfig: ads(), ServiceName: edsName},
		LoadBalancingPolicy:  lb,
	}
}

// endpoints puts the backends at addrs (127.0.0.1:port) in one locality,
// with the given weights if any.
func endpoints(t *testing.T, addrs []string, weights []uint32) *endpointv3.ClusterLoadAssignment {
	var lbs []*endpointv3.LbEndpoint
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			t.Fatal(err)
		}
		p, err := strconv.ParseUint(port, 10, 32)
		if err != nil {
			t.Fatal(err)
		}
		lbs = append(lbs, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address:       host,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
				}}},
			}},
			HealthStatus: corev3.HealthStatus_HEALTHY,
		})
		if weights != nil {
			lbs[i].LoadBalancingWeight = wrapperspb.UInt32(weights[i])
		}
	}
	return &endpointv3.ClusterLoadAssignment{
		ClusterName: edsName,
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Locality:            &corev3.Locality{Region: "local"},
			LoadBalancingWeight: wrapperspb.UInt32(1),
			LbEndpoints:         lbs,
		}},
	}
}
