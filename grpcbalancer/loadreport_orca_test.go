package grpcbalancer_test

import (
	"context"
	"encoding/base64"
	"math/rand/v2"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"

	"github.com/lbgo/balancer/loadreport"
)

// TestLoadReportReadsGRPCGoTrailer: a real grpc-go server on loopback
// records per-call metrics through grpc/orca's CallMetricsRecorder; the
// endpoint-load-metrics-bin trailer it sends, handed to loadreport as an
// HTTP header (unpadded base64, as grpc-go puts -bin values on the wire),
// decodes to the values the server recorded.
func TestLoadReportReadsGRPCGoTrailer(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	want := make(chan loadreport.Report, 1)
	record := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		r := <-want
		rec := orca.CallMetricsRecorderFromContext(ctx)
		rec.SetCPUUtilization(r.CPUUtilization)
		rec.SetMemoryUtilization(r.MemUtilization)
		rec.SetApplicationUtilization(r.ApplicationUtilization)
		rec.SetQPS(r.RPSFractional)
		rec.SetEPS(r.EPS)
		for k, v := range r.NamedMetrics {
			rec.SetNamedMetric(k, v)
		}
		for k, v := range r.Utilization {
			rec.SetNamedUtilization(k, v)
		}
		for k, v := range r.RequestCost {
			rec.SetRequestCost(k, v)
		}
		return h(ctx, req)
	}
	srv := grpc.NewServer(orca.CallMetricsServerOption(nil), grpc.ChainUnaryInterceptor(record))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	defer srv.Stop()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for i := range 50 {
		r := loadreport.Report{
			CPUUtilization: rng.Float64() * 2, MemUtilization: rng.Float64(), ApplicationUtilization: rng.Float64() * 3,
			RPSFractional: rng.Float64() * 1e4, EPS: rng.Float64() * 10,
			NamedMetrics: map[string]float64{"rif": float64(rng.IntN(100)), "queue": rng.Float64()},
			Utilization:  map[string]float64{"gpu": rng.Float64()},
			RequestCost:  map[string]float64{"db_ms": rng.Float64() * 50},
		}
		want <- r
		var tr metadata.MD
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		vals := tr.Get("endpoint-load-metrics-bin")
		if len(vals) != 1 {
			t.Fatalf("call %d: trailer %v: want one endpoint-load-metrics-bin", i, tr)
		}
		h := http.Header{loadreport.HeaderNameBin: {base64.RawStdEncoding.EncodeToString([]byte(vals[0]))}}
		got, err := loadreport.FromHeader(h)
		if err != nil || !got.Equal(r) {
			t.Fatalf("call %d: FromHeader = %+v, %v; the server recorded %+v", i, got, err, r)
		}
		if got, err := loadreport.Parse("BIN " + base64.StdEncoding.EncodeToString([]byte(vals[0]))); err != nil || !got.Equal(r) {
			t.Fatalf("call %d: Parse(BIN) = %+v, %v; the server recorded %+v", i, got, err, r)
		}
	}
}
