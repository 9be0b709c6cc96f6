package grpcbalancer

import (
	"context"
	"slices"
	"testing"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
)

// TestChannel: Channel(target) reads the name and the peers of the policy
// of the open channel on target, the one built last when two share it, and nothing
// once the channels are closed; the attempts on its peers are the RPCs
// sent (no backend fails, so one attempt each).
func TestChannel(t *testing.T) {
	b1, b2, b3 := startBackend(t), startBackend(t), startBackend(t)
	sc := serviceConfig("lbgo_roundrobin", "{}", 2) // no backend fails: one attempt per RPC
	r1 := manual.NewBuilderWithScheme("chan1")
	r1.InitialState(resolver.State{Addresses: addrs(b1, b2)})
	conn1, lb1 := dial(t, r1, sc)
	const target = "chan1:///backends" // dial's target on r1's scheme

	addrsOf := func(c Channel) []string {
		var out []string
		for _, p := range c.Peers() {
			out = append(out, p.Addr())
		}
		slices.Sort(out)
		return out
	}
	want12 := []string{b1.addr, b2.addr}
	slices.Sort(want12)
	if got := addrsOf(Channel(target)); !slices.Equal(got, want12) {
		t.Fatalf("Channel(%q) peers %v, want %v", target, got, want12)
	}
	if got := Channel("other:///backends").Peers(); got != nil {
		t.Errorf("unknown target: peers %v, want nil", got)
	}
	if got := Channel(target).Policy(); got != "lbgo_roundrobin" {
		t.Errorf("Channel(%q).Policy() = %q, want lbgo_roundrobin", target, got)
	}
	if got := Channel("other:///backends").Policy(); got != "" {
		t.Errorf("unknown target: policy %q, want none", got)
	}

	if !waitFor(5*time.Second, func() bool { return allReady(lb1) }) {
		t.Fatal("the backends did not connect")
	}
	const rpcs = 20
	client := healthpb.NewHealthClient(conn1)
	for range rpcs {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	var attempts, inFlight uint64
	for _, p := range Channel(target).Peers() {
		st := p.Stats()
		attempts += st.Attempts
		inFlight += uint64(st.InFlight)
	}
	if attempts != rpcs || inFlight != 0 {
		t.Errorf("attempts %d, in flight %d; want %d, 0", attempts, inFlight, rpcs)
	}
	if got := Channel(target).Stats().NoLivePeer; got != 0 {
		t.Errorf("NoLivePeerCount %d, want 0", got)
	}

	// A second channel on the same target: Channel reads it, the newer.
	r2 := manual.NewBuilderWithScheme("chan1")
	r2.InitialState(resolver.State{Addresses: addrs(b3)})
	conn2, _ := dial(t, r2, sc)
	if got := addrsOf(Channel(target)); !slices.Equal(got, []string{b3.addr}) {
		t.Errorf("two channels on %q: peers %v, want the newer's %v", target, got, []string{b3.addr})
	}
	conn2.Close()
	if got := addrsOf(Channel(target)); !slices.Equal(got, want12) {
		t.Errorf("the newer closed: peers %v, want the older's %v", got, want12)
	}
	conn1.Close()
	if got := Channel(target).Peers(); got != nil {
		t.Errorf("both closed: peers %v, want nil", got)
	}
	if got := Channel(target).Policy(); got != "" {
		t.Errorf("both closed: policy %q, want none", got)
	}
}
