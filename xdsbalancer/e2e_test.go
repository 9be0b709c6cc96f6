package xdsbalancer

import (
	"context"
	"fmt"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	maglevv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/maglev/v3"
	roundrobinv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/load_balancing_policies/round_robin/v3"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/structpb"
)

// backend is a real gRPC server on loopback serving the health service; it
// names itself in a response header, can answer UNAVAILABLE, and counts
// the RPCs it got.
type backend struct {
	name string
	addr string
	fail atomic.Bool
	rpcs atomic.Int64
}

func startBackends(t *testing.T, n int) []*backend {
	t.Helper()
	var bs []*backend
	for i := range n {
		b := &backend{name: fmt.Sprintf("b%d", i)}
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		b.addr = lis.Addr().String()
		srv := grpc.NewServer(grpc.UnaryInterceptor(b.intercept))
		healthpb.RegisterHealthServer(srv, health.NewServer())
		go srv.Serve(lis)
		t.Cleanup(srv.Stop)
		bs = append(bs, b)
	}
	return bs
}

func (b *backend) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	b.rpcs.Add(1)
	if err := grpc.SetHeader(ctx, metadata.Pairs("backend", b.name)); err != nil {
		return nil, err
	}
	if b.fail.Load() {
		return nil, status.Error(codes.Unavailable, b.name+" says: try another")
	}
	return h(ctx, req)
}

func addrsOf(bs []*backend) []string {
	var addrs []string
	for _, b := range bs {
		addrs = append(addrs, b.addr)
	}
	return addrs
}

// dial returns a client of grpc-go's xds resolver, bootstrapped to cp,
// for the listener the snapshots hold, and starts its xDS stream.
func dial(t *testing.T, cp *controlPlane) healthpb.HealthClient {
	t.Helper()
	r, err := xds.NewXDSResolverWithConfigForTesting(cp.bootstrap())
	require.NoError(t, err)
	conn, err := grpc.NewClient("xds:///"+listenerName, grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	conn.Connect() // start the resolver, so that the client asks for the resources
	return healthpb.NewHealthClient(conn)
}

// call makes one RPC with the given metadata and returns the backend that
// answered it ("" if none did) and its error.
func call(t *testing.T, c healthpb.HealthClient, kv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, kv...)
	var md metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&md))
	if got := md.Get("backend"); len(got) > 0 {
		return got[0], err
	}
	return "", err
}

// keys is how many users and sessions a batch of RPCs has.
const keys = 8

// batch is where each RPC of a batch went: batch[u][s] is the backend
// that served the RPC of user u and session s, sent with metadata
// x-user: u<u>, x-session: s<s>, one RPC after the other.
type batch [keys][keys]string

func send(t *testing.T, c healthpb.HealthClient) batch {
	t.Helper()
	var b batch
	for u := range keys {
		for s := range keys {
			got, err := call(t, c, "x-user", fmt.Sprintf("u%d", u), "x-session", fmt.Sprintf("s%d", s))
			require.NoError(t, err)
			b[u][s] = got
		}
	}
	return b
}

// keyedBy reports whether the batch is what a hash of one key over the
// backends makes of it: each value of the key always on one backend
// (sticky), the values spread over more than one (a spread that a hash
// of 8 values onto 3 backends misses with probability 3/3^8). by picks
// the key's value of the RPC of user u and session s.
func (b batch) keyedBy(by func(u, s int) int) bool {
	of := map[int]string{}
	spread := map[string]bool{}
	for u := range keys {
		for s := range keys {
			k := by(u, s)
			if got, ok := of[k]; ok && got != b[u][s] {
				return false
			}
			of[k] = b[u][s]
			spread[b[u][s]] = true
		}
	}
	return len(spread) > 1
}

func (b batch) byUser() bool    { return b.keyedBy(func(u, _ int) int { return u }) }
func (b batch) bySession() bool { return b.keyedBy(func(_, s int) int { return s }) }

// roundRobin reports whether every run of consecutive RPCs in the batch
// is spread over all n backends in turn, as gRPC's round_robin sends them
// once every backend is READY: no backend twice within n RPCs.
func (b batch) roundRobin(n int) bool {
	var seq []string
	for u := range keys {
		seq = append(seq, b[u][:]...)
	}
	for i := range seq {
		if j := i + n; j <= len(seq) {
			w := slices.Clone(seq[i:j])
			slices.Sort(w)
			if len(slices.Compact(w)) != n {
				return false
			}
		}
	}
	return true
}

// settle sends batches until ok holds of one, and returns it; the test
// fails after the bound. A change of policy reaches the client's channel
// shortly after the client's ACK, and the SubConns of a new policy
// become READY after that.
func settle(t *testing.T, c healthpb.HealthClient, what string, ok func(batch) bool) batch {
	t.Helper()
	var b batch
	waitFor(t, what, func() bool { b = send(t, c); return ok(b) })
	return b
}

func policies(ps ...*clusterv3.LoadBalancingPolicy_Policy) *clusterv3.LoadBalancingPolicy {
	return &clusterv3.LoadBalancingPolicy{Policies: ps}
}

func mustPolicy(t *testing.T, name string, config any) *clusterv3.LoadBalancingPolicy_Policy {
	t.Helper()
	p, err := Policy(name, config)
	require.NoError(t, err)
	return p
}

// TestXDS_chosenConfiguredAndChanged: a Cluster naming Envoy's round_robin
// gets gRPC's round_robin (consecutive RPCs over all three backends, no
// key followed); a pushed Cluster naming lbgo_hash with hashHeader x-user
// makes every RPC of a user go to one backend, users spread over several;
// a pushed change of hashHeader to x-session follows the session instead.
func TestXDS_chosenConfiguredAndChanged(t *testing.T) {
	bs := startBackends(t, 3)
	cp := startControlPlane(t)
	rr := &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "envoy.load_balancing_policies.round_robin", TypedConfig: mustAny(&roundrobinv3.RoundRobin{}),
	}}
	c := dial(t, cp)
	cp.waitACK(cp.push(addrsOf(bs), policies(rr)))

	b := settle(t, c, "round robin over the three backends", func(b batch) bool { return b.roundRobin(3) })
	require.False(t, b.byUser(), "round_robin follows x-user: %v", b)
	require.False(t, b.bySession(), "round_robin follows x-session: %v", b)

	v := cp.push(addrsOf(bs), policies(mustPolicy(t, "lbgo_hash", map[string]any{"hashHeader": "x-user"})))
	cp.waitACK(v)
	settle(t, c, "lbgo_hash by x-user", batch.byUser)
	b = send(t, c) // and it stays so
	require.True(t, b.byUser(), "lbgo_hash by x-user: %v", b)
	require.False(t, b.bySession(), "lbgo_hash by x-user follows x-session: %v", b)
	require.False(t, b.roundRobin(3), "lbgo_hash by x-user is round robin: %v", b)

	v = cp.push(addrsOf(bs), policies(mustPolicy(t, "lbgo_hash", map[string]any{"hashHeader": "x-session"})))
	cp.waitACK(v)
	settle(t, c, "lbgo_hash by x-session", batch.bySession)
	b = send(t, c)
	require.True(t, b.bySession(), "lbgo_hash by x-session: %v", b)
	require.False(t, b.byUser(), "lbgo_hash by x-session follows x-user: %v", b)
}

// typedStruct is a policy entry as any control plane may write it, without
// Policy's checks: a TypedStruct naming the gRPC policy name, its value
// fields.
func typedStruct(t *testing.T, name string, fields map[string]any) *clusterv3.LoadBalancingPolicy_Policy {
	t.Helper()
	s, err := structpb.NewStruct(fields)
	require.NoError(t, err)
	return &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name:        name,
		TypedConfig: mustAny(&xdstypev3.TypedStruct{TypeUrl: "type.googleapis.com/" + name, Value: s}),
	}}
}

// TestXDS_fallback: gRPC skips the entries it cannot use, an Envoy policy
// it does not implement (Maglev) and a TypedStruct naming a policy not
// registered in the client, and takes the first it can: lbgo_hash by
// x-user, not its default round_robin.
func TestXDS_fallback(t *testing.T) {
	bs := startBackends(t, 3)
	cp := startControlPlane(t)
	maglev := &clusterv3.LoadBalancingPolicy_Policy{TypedExtensionConfig: &corev3.TypedExtensionConfig{
		Name: "envoy.load_balancing_policies.maglev", TypedConfig: mustAny(&maglevv3.Maglev{}),
	}}
	c := dial(t, cp)
	cp.waitACK(cp.push(addrsOf(bs), policies(
		maglev,
		mustPolicy(t, "lbgo_nosuchpolicy", map[string]any{"hashHeader": "x-session"}),
		mustPolicy(t, "lbgo_hash", map[string]any{"hashHeader": "x-user"}),
	)))
	settle(t, c, "lbgo_hash by x-user", batch.byUser)
	b := send(t, c)
	require.True(t, b.byUser(), "lbgo_hash by x-user: %v", b)
	require.False(t, b.bySession(), "the unregistered entry's config was applied: %v", b)
}

// TestXDS_numbersAreDoubles: maxFails 3 travels as the Struct's double
// and counts as nginx's max_fails=3: a backend answering UNAVAILABLE to
// everything gets exactly 3 RPCs of lbgo_roundrobin, then is out for the
// failTimeout of an hour (the default maxFails, 1, would give it 1; gRPC's
// round_robin a third of all).
func TestXDS_numbersAreDoubles(t *testing.T) {
	bs := startBackends(t, 3)
	bs[1].fail.Store(true)
	cp := startControlPlane(t)
	p := mustPolicy(t, "lbgo_roundrobin", map[string]any{"maxFails": 3, "failTimeout": "1h"})
	var ts xdstypev3.TypedStruct
	require.NoError(t, p.GetTypedExtensionConfig().GetTypedConfig().UnmarshalTo(&ts))
	require.Equal(t, 3.0, ts.GetValue().GetFields()["maxFails"].GetNumberValue()) // a double on the wire
	c := dial(t, cp)
	cp.waitACK(cp.push(addrsOf(bs), policies(p)))

	const rpcs = 60
	failed := 0
	for range rpcs {
		if got, err := call(t, c); err != nil {
			require.Equal(t, codes.Unavailable, status.Code(err), "%v", err)
			require.Equal(t, "b1", got)
			failed++
		}
	}
	require.Equal(t, 3, failed)
	require.EqualValues(t, 3, bs[1].rpcs.Load())
	require.EqualValues(t, rpcs-3, bs[0].rpcs.Load()+bs[2].rpcs.Load())
}

// TestXDS_refusedConfig: a Cluster whose lbgo_ config the policy refuses
// (an integer field holding 3.5; a duration sent as a number) is rejected
// by the client, its NACK naming the field, and the client keeps the
// Cluster it had: still by x-user, not the x-session the refused ones
// ask for.
func TestXDS_refusedConfig(t *testing.T) {
	bs := startBackends(t, 3)
	cp := startControlPlane(t)
	c := dial(t, cp)
	cp.waitACK(cp.push(addrsOf(bs), policies(mustPolicy(t, "lbgo_hash", map[string]any{"hashHeader": "x-user"}))))
	settle(t, c, "lbgo_hash by x-user", batch.byUser)

	for _, tc := range []struct {
		fields  map[string]any
		wantErr string
	}{
		{map[string]any{"hashHeader": "x-session", "maxFails": 3.5}, "maxFails 3.5: not an integer"},
		{map[string]any{"hashHeader": "x-session", "failTimeout": 10}, "failTimeout 10: not a string"},
	} {
		_, err := Policy("lbgo_hash", tc.fields)
		require.ErrorContains(t, err, tc.wantErr) // what Policy would have said
		cp.push(addrsOf(bs), policies(typedStruct(t, "lbgo_hash", tc.fields)))
		cp.waitNACK(`error parsing loadBalancingConfig for policy "lbgo_hash": grpcbalancer: bad load-balancing config: ` + tc.wantErr)
		b := send(t, c)
		require.True(t, b.byUser(), "after the NACK of %s: %v", tc.wantErr, b)
		require.False(t, b.bySession(), "after the NACK of %s: %v", tc.wantErr, b)
	}
}
