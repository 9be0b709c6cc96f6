package grpcreport_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/lbgo/balancer/loadreport"
	"github.com/lbgo/balancer/loadreport/grpcreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// A server answering probes beside its reports; the client probes it.
// The Tracker's clock stands still and one request of 2 ms completed at
// RIF 0; with 3 in flight the estimate is 2 ms × (3+1)/(0+1).
func ExampleRegisterProbe() {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	t, _ := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return now }))
	b := t.Begin()
	now = now.Add(2 * time.Millisecond)
	t.End(b, false)
	for range 3 {
		t.Begin()
	}
	rep, _ := grpcreport.New(t)
	srv := grpc.NewServer(rep.ServerOptions()...)
	_ = grpcreport.RegisterProbe(srv, t)
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	fmt.Println(grpcreport.Probe(ctx, conn))
	// Output:
	// 3 8ms <nil>
}
