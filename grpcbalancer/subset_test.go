package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lbgo/balancer/subset"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

func must(s subset.Subsetter, err error) subset.Subsetter {
	if err != nil {
		panic(err)
	}
	return s
}

func TestParseConfig_subset(t *testing.T) {
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = "10.0.0." + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ":80"
	}
	for _, tc := range []struct {
		json    string
		want    subset.Subsetter // the same subset of keys, from the root package
		wantErr string
	}{
		{json: `{"subset":{"algorithm":"deterministic","clientIndex":3,"clientCount":300,"size":30}}`, want: must(subset.Deterministic(3, 300, 30))},
		// xDS hands numbers over as floats.
		{json: `{"subset":{"algorithm":"deterministic","clientIndex":3.0,"clientCount":3e2,"size":30.0}}`, want: must(subset.Deterministic(3, 300, 30))},
		{json: `{"subset":{"algorithm":"ring","clientIndex":7,"clientCount":10,"size":4}}`, want: must(subset.Ring(7, 10, 4))},
		{json: `{"subset":{"algorithm":"rendezvous","clientKey":"pod-a","size":5}}`, want: must(subset.Rendezvous("pod-a", 5))},
		{json: `{"subset":{"algorithm":"random","size":5,"seed":42}}`, want: must(subset.Random(5, 42))},
		{json: `{"subset":{"algorithm":"deterministic","clientIndex":3.5,"clientCount":300,"size":30}}`, wantErr: `subset.clientIndex 3.5: not an integer`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":1,"clientCount":10,"size":"4"}}`, wantErr: `subset.size "4": not a number`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":1,"clientCount":10,"size":1e30}}`, wantErr: `subset.size 1e30: out of [1, 2147483648]`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":1,"clientCount":10,"size":0}}`, wantErr: `subset.size 0: out of [1, 2147483648]`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":10,"clientCount":10,"size":3}}`, wantErr: `subset.clientIndex 10: out of [0, 10)`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":-1,"clientCount":10,"size":3}}`, wantErr: `subset.clientIndex -1: out of [0, 10)`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":0,"clientCount":0,"size":3}}`, wantErr: `subset.clientCount 0: out of [1, 2147483648]`},
		{json: `{"subset":{"algorithm":"ring","size":3}}`, wantErr: `subset.clientCount: missing`},
		{json: `{"subset":{"algorithm":"rendezvous","size":3}}`, wantErr: `subset.clientKey: missing`},
		{json: `{"subset":{"algorithm":"aperture","size":3}}`, wantErr: `subset.algorithm "aperture": not one of deterministic, ring, rendezvous, random`},
		{json: `{"subset":{"size":3}}`, wantErr: `subset.algorithm: missing`},
		{json: `{"subset":3}`, wantErr: `subset 3: not an object`},
		// As the other int fields: a fraction a double rounds away is
		// still a fraction, a quoted number is no number (the seed too),
		// and the index's range is the one that applies.
		{json: `{"subset":{"algorithm":"random","size":3.0000000000000000001}}`, wantErr: `subset.size 3.0000000000000000001: not an integer`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":"7"}}`, wantErr: `subset.seed "7": not a number`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":1.5}}`, wantErr: `subset.seed 1.5: not an integer`},
		{json: `{"subset":{"algorithm":"ring","clientIndex":1e30,"clientCount":10,"size":3}}`, wantErr: `subset.clientIndex 1e30: out of [0, 10)`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":18446744073709551615}}`, want: must(subset.Random(3, 18446744073709551615))},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":18446744073709551616}}`, wantErr: `subset.seed 18446744073709551616: out of [0, 18446744073709551615]`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":-1}}`, wantErr: `subset.seed -1: out of [0, 18446744073709551615]`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":1e16}}`, wantErr: `subset.seed 1e16: out of [0, 9007199254740992] (a float)`},
		{json: `{"subset":{"algorithm":"random","size":3,"seed":1e15}}`, want: must(subset.Random(3, 1e15))},
		{json: `{"subset":{"algorithm":"ring","clientIndex":-0.0,"clientCount":1,"size":3e0}}`, want: must(subset.Ring(0, 1, 3))},
	} {
		t.Run(tc.json, func(t *testing.T) {
			got, err := balancer.Get("lbgo_roundrobin").(balancer.ConfigParser).ParseConfig([]byte(tc.json))
			if tc.wantErr != "" {
				want := ErrBadConfig.Error() + ": " + tc.wantErr
				if !errors.Is(err, ErrBadConfig) || err.Error() != want {
					t.Fatalf("ParseConfig(%s) = %v, want ErrBadConfig saying\n%s", tc.json, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig(%s): %v", tc.json, err)
			}
			s := got.(*lbConfig).subset
			if s == nil {
				t.Fatalf("ParseConfig(%s): no subset", tc.json)
			}
			if g, w := s.subsetter(0).Subset(keys), tc.want.Subset(keys); !slices.Equal(g, w) {
				t.Errorf("ParseConfig(%s) subsets %v, want %v", tc.json, g, w)
			}
		})
	}
}

// A null subset is no subset, as a null field is its default elsewhere.
func TestParseConfig_subsetNull(t *testing.T) {
	got, err := balancer.Get("lbgo_roundrobin").(balancer.ConfigParser).ParseConfig([]byte(`{"subset":null,"maxFails":null}`))
	if err != nil {
		t.Fatalf("ParseConfig: %v", err)
	}
	if s := got.(*lbConfig).subset; s != nil {
		t.Errorf("subset %+v, want none", s)
	}
}

// check sends n health checks, each with a 3 s deadline, and fails t on
// the first error.
func check(t *testing.T, conn *grpc.ClientConn, n int) {
	t.Helper()
	client := healthpb.NewHealthClient(conn)
	for range n {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.WaitForReady(true))
		cancel()
		if err != nil {
			t.Fatalf("RPC failed: %v", err)
		}
	}
}

// subsetOf is the expected subset, from the root package's subsetter over
// the backends' addresses (the endpoints' keys).
func subsetOf(s subset.Subsetter, bs []*backend) map[*backend]bool {
	keys := make([]string, len(bs))
	for i, b := range bs {
		keys[i] = b.addr
	}
	out := map[*backend]bool{}
	for _, i := range s.Subset(keys) {
		out[bs[i]] = true
	}
	return out
}

// Ten real servers, subsets of 3: the client connects to its three only
// and its RPCs reach them only; a resolver update that drops one member and
// adds a server changes the subset as the subsetter says (rendezvous: at
// most one member per backend changed).
func TestSubset_endToEnd(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config string
		by     subset.Subsetter
	}{
		{"rendezvous", `{"subset":{"algorithm":"rendezvous","clientKey":"client-a","size":3}}`, must(subset.Rendezvous("client-a", 3))},
		{"deterministic", `{"subset":{"algorithm":"deterministic","clientIndex":2.0,"clientCount":6,"size":3}}`, must(subset.Deterministic(2, 6, 3))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var bs []*backend
			for range 11 {
				bs = append(bs, startBackend(t))
			}
			first := bs[:10]
			r := manual.NewBuilderWithScheme("subset")
			r.InitialState(resolver.State{Addresses: addrs(first...)})
			conn, lb := dial(t, r, serviceConfig(PolicyName("RoundRobin"), tc.config, 2))
			want := subsetOf(tc.by, first)
			if !waitFor(5*time.Second, func() bool { return len(peersOf(lb)) == 3 && allReady(lb) }) {
				t.Fatalf("the subset's peers did not all become ready: %v", peersOf(lb))
			}
			check(t, conn, 60)
			for _, b := range first {
				if got := b.ok.Load(); want[b] != (got > 0) {
					t.Errorf("%s served %d, in the subset: %v", b.addr, got, want[b])
				}
			}
			lb.mu.Lock()
			conns := len(lb.ends)
			lb.mu.Unlock()
			if conns != 3 {
				t.Errorf("%d SubConns, want the subset's 3", conns)
			}

			// Drop a member, add the eleventh server.
			var next []*backend
			dropped := false
			for _, b := range first {
				if want[b] && !dropped {
					dropped = true
					continue
				}
				next = append(next, b)
			}
			next = append(next, bs[10])
			r.UpdateState(resolver.State{Addresses: addrs(next...)})
			want2 := subsetOf(tc.by, next)
			if !waitFor(5*time.Second, func() bool {
				peers := peersOf(lb)
				for b := range want2 {
					if peers[b.addr] == nil {
						return false
					}
				}
				return len(peers) == 3 && allReady(lb)
			}) {
				t.Fatalf("the picker holds %v, want the new subset", peersOf(lb))
			}
			before := served(bs...)
			check(t, conn, 60)
			after := served(bs...)
			for i, b := range bs {
				if got := after[i] - before[i]; want2[b] != (got > 0) {
					t.Errorf("after the update %s served %d, in the subset: %v", b.addr, got, want2[b])
				}
			}
			changed := 0
			for b := range want {
				if !want2[b] {
					changed++
				}
			}
			t.Logf("%s: %d of 3 members changed by one server removed and one added", tc.name, changed)
			if tc.name == "rendezvous" && changed > 2 {
				t.Errorf("%d members changed, want at most 2 (one per backend)", changed)
			}
		})
	}
}

// An endpoint the resolver lists twice is one peer (the policy dedupes
// it): the subset counts it once, so a subset of 4 of 5 distinct
// endpoints holds 4, whichever client key ranks the duplicate.
func TestSubsetEndpoints_duplicate(t *testing.T) {
	ep := func(addr string) resolver.Endpoint {
		return resolver.Endpoint{Addresses: []resolver.Address{{Addr: addr}}}
	}
	eps := []resolver.Endpoint{ep("10.0.0.1:80"), ep("10.0.0.1:80"), ep("10.0.0.2:80"), ep("10.0.0.3:80"), ep("10.0.0.4:80"), ep("10.0.0.5:80")}
	for c := range 20 {
		by := must(subset.Rendezvous(fmt.Sprint("client-", c), 4))
		keys := map[string]bool{}
		for _, e := range subsetEndpoints(by, eps) {
			keys[endpointKey(e)] = true
		}
		if len(keys) != 4 {
			t.Errorf("client-%d: subset of %d distinct endpoints, want 4: %v", c, len(keys), keys)
		}
	}
}
