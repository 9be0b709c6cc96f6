package grpcreport_test

import (
	"context"
	"fmt"
	"net"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/lbgo/balancer/loadreport"
	"github.com/lbgo/balancer/loadreport/grpcreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// A server reporting its load on every response; the client reads the
// trailer grpc-go's weighted_round_robin reads. The clock stands still
// at 2 s after the start, so the output does not depend on the timing.
func ExampleReporter() {
	start := time.Now()
	now := start
	t, _ := loadreport.NewTracker(loadreport.WithClock(func() time.Time { return now }))
	now = start.Add(2 * time.Second)
	_ = t.SetCPUUtilization(0.5)
	rep, _ := grpcreport.New(t)
	srv := grpc.NewServer(rep.ServerOptions()...)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	for range 3 {
		var tr metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
		cancel()
		if err != nil {
			fmt.Println(err)
			return
		}
		r := new(v3orcapb.OrcaLoadReport)
		_ = proto.Unmarshal([]byte(tr.Get("endpoint-load-metrics-bin")[0]), r)
		fmt.Println(r.CpuUtilization, r.RpsFractional, r.NamedMetrics["rif"])
	}
	// Output:
	// 0.5 0 1
	// 0.5 0.5 1
	// 0.5 1 1
}
