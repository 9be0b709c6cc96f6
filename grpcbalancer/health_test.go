package grpcbalancer

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/health" // client-side health checking
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"
)

// TestHealthChecking runs every lbgo_* policy, and grpc-go's own
// round_robin as the reference, against three real servers whose health
// service is toggled, with client-side health checking on
// ("healthCheckConfig" in the service config) and off.
//
// On: gRPC watches each server's health service on its connection, and a
// server NOT_SERVING must get no RPC once its update has arrived, as
// round_robin (through pick_first's health listener) does: each phase
// first waits, in bounded batches, for a batch that reaches only the
// expected server, then requires every one of the next RPCs to go there. A
// server SERVING again must get the traffic back; with none SERVING,
// fail-fast RPCs fail with UNAVAILABLE and a wait-for-ready RPC succeeds as
// soon as one server is SERVING again.
//
// Off: the health service's status is no signal, as before: with every
// server NOT_SERVING all RPCs succeed and no peer is down.
func TestHealthChecking(t *testing.T) {
	policies := []string{"round_robin"}
	for _, a := range lbgo.Algorithms() {
		policies = append(policies, PolicyName(a.Name))
	}
	const (
		batch = 20  // RPCs per probe while waiting for a health update
		rpcs  = 500 // RPCs whose every one must reach the expected server
		wait  = 3 * time.Second
	)
	for _, policy := range policies {
		t.Run(policy+"/on", func(t *testing.T) {
			bs := []*backend{startBackend(t), startBackend(t), startBackend(t)}
			conn, lb := dialHealth(t, policy, true, bs)
			client := healthpb.NewHealthClient(conn)
			if _, err := send(client, 1, grpc.WaitForReady(true)); err != nil {
				t.Fatalf("first RPC: %v", err)
			}

			// onlyTo waits for a batch that reaches only bs[want], then
			// sends rpcs RPCs and requires all of them there. The batches
			// wait for a ready peer: health updates from two servers may
			// arrive in either order, leaving none SERVING for a moment.
			onlyTo := func(phase string, want int) {
				t.Helper()
				end := time.Now().Add(wait)
				for {
					got, err := sendCounted(client, bs, batch, grpc.WaitForReady(true))
					if err != nil {
						t.Fatalf("%s: %v", phase, err)
					}
					if got[want] == batch {
						break
					}
					if time.Now().After(end) {
						t.Fatalf("%s: after %v a batch of %d RPCs still served %v, want all by server %d", phase, wait, batch, got, want)
					}
				}
				got, err := sendCounted(client, bs, rpcs)
				if err != nil {
					t.Fatalf("%s: %v", phase, err)
				}
				if got[want] != rpcs {
					t.Errorf("%s: %d RPCs served %v, want all by server %d", phase, rpcs, got, want)
				}
			}

			bs[1].setServing(false)
			bs[2].setServing(false)
			onlyTo("servers 1 and 2 NOT_SERVING", 0)

			bs[1].setServing(true)
			bs[0].setServing(false)
			onlyTo("server 0 NOT_SERVING, server 1 SERVING again", 1)

			// None SERVING: the channel fails fail-fast RPCs.
			bs[1].setServing(false)
			end := time.Now().Add(wait)
			for {
				_, err := send(client, 1)
				if status.Code(err) == codes.Unavailable {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("none SERVING: after %v an RPC still ended with %v, want UNAVAILABLE", wait, err)
				}
			}

			// A wait-for-ready RPC goes through once server 2 is SERVING.
			before := served(bs...)
			done := make(chan error, 1)
			go func() {
				_, err := send(client, 1, grpc.WaitForReady(true))
				done <- err
			}()
			bs[2].setServing(true)
			if err := <-done; err != nil {
				t.Fatalf("wait-for-ready RPC after server 2 SERVING: %v", err)
			}
			after := served(bs...)
			if d := after[2] - before[2]; d != 1 || after[0] != before[0] || after[1] != before[1] {
				t.Errorf("wait-for-ready RPC: served %v then %v, want one more by server 2 only", before, after)
			}

			// Health marks peers down; it is not an nginx failure.
			if lb != nil {
				for addr, p := range peersOf(lb) {
					if s := p.State(); s.Fails != 0 {
						t.Errorf("peer %s: %d failures counted, want 0: %+v", addr, s.Fails, s)
					}
				}
			}
		})

		t.Run(policy+"/off", func(t *testing.T) {
			bs := []*backend{startBackend(t), startBackend(t), startBackend(t)}
			for _, b := range bs {
				b.setServing(false)
			}
			conn, lb := dialHealth(t, policy, false, bs)
			client := healthpb.NewHealthClient(conn)
			if lb != nil {
				// Every SubConn connects and its peer comes up, whatever
				// the health service says.
				if !waitFor(wait, func() bool {
					m := peersOf(lb)
					for _, p := range m {
						if p.State().Down {
							return false
						}
					}
					return len(m) == len(bs)
				}) {
					t.Fatalf("health checking off: peers still down after %v", wait)
				}
			}
			got, err := sendCounted(client, bs, rpcs, grpc.WaitForReady(true))
			if err != nil {
				t.Fatalf("every server NOT_SERVING, health checking off: %v", err)
			}
			if got[0]+got[1]+got[2] != rpcs {
				t.Errorf("%d RPCs served %v in all", rpcs, got)
			}
		})
	}
}

// dialHealth returns a client of policy over the backends, with client-side
// health checking of the whole server (service name "") when health is set,
// and for an lbgo_* policy the instance it built.
func dialHealth(t *testing.T, policy string, health bool, bs []*backend) (*grpc.ClientConn, *lbBalancer) {
	t.Helper()
	built := make(chan *lbBalancer, 1)
	testBuilt = func(b *lbBalancer) { built <- b }
	t.Cleanup(func() { testBuilt = nil })
	r := manual.NewBuilderWithScheme("health")
	r.InitialState(resolver.State{Addresses: addrs(bs...)})
	sc := fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}]}`, policy)
	if health {
		sc = fmt.Sprintf(`{"loadBalancingConfig":[{%q:{}}],"healthCheckConfig":{"serviceName":""}}`, policy)
	}
	conn, err := grpc.NewClient(r.Scheme()+":///backends",
		grpc.WithResolvers(r),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultServiceConfig(sc))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	conn.Connect()
	if !strings.HasPrefix(policy, Prefix) {
		return conn, nil
	}
	select {
	case lb := <-built:
		return conn, lb
	case <-time.After(5 * time.Second):
		t.Fatal("the policy was not built")
	}
	return nil, nil
}

// send sends n health checks one after another, each with a 2 s deadline,
// and returns how many succeeded and the first error.
func send(client healthpb.HealthClient, n int, opts ...grpc.CallOption) (int, error) {
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, opts...)
		cancel()
		if err != nil {
			return i, err
		}
	}
	return n, nil
}

// sendCounted sends n health checks from four goroutines and returns how
// many each backend served, or the first error.
func sendCounted(client healthpb.HealthClient, bs []*backend, n int, opts ...grpc.CallOption) ([]int64, error) {
	before := served(bs...)
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			if _, err := send(client, n/workers+boolInt(w < n%workers), opts...); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return nil, err
	}
	after := served(bs...)
	for i := range after {
		after[i] -= before[i]
	}
	return after, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
