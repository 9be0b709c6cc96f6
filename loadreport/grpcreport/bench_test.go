package grpcreport

import (
	"context"
	"net"
	"testing"

	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/test/bufconn"
)

var unaryInfo = &grpc.UnaryServerInfo{FullMethod: callMethod}

func trivialHandler(ctx context.Context, req any) (any, error) { return req, nil }

// BenchmarkUnaryInterceptor is the Reporter's own cost per call: its two
// unary interceptors (count, and the trailer's forcing, which finds no
// grpc/orca recorder here) around a trivial handler, called directly,
// against the bare handler, in the same run. What grpc/orca then spends
// on the trailer is in BenchmarkServer.
func BenchmarkUnaryInterceptor(b *testing.B) {
	tr, _ := loadreport.NewTracker()
	_ = tr.SetCPUUtilization(0.42)
	r, _ := New(tr)
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_, _ = trivialHandler(ctx, nil)
		}
	})
	b.Run("reporter", func(b *testing.B) {
		inner := func(ctx context.Context, req any) (any, error) {
			return r.unaryForce(ctx, req, unaryInfo, trivialHandler)
		}
		b.ReportAllocs()
		for b.Loop() {
			_, _ = r.unaryCount(ctx, nil, unaryInfo, inner)
		}
	})
	b.Run("reporter/parallel", func(b *testing.B) {
		inner := func(ctx context.Context, req any) (any, error) {
			return r.unaryForce(ctx, req, unaryInfo, trivialHandler)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				_, _ = r.unaryCount(ctx, nil, unaryInfo, inner)
			}
		})
	})
}

// benchServer serves the test service on an in-memory listener (bufconn:
// a real gRPC server and client, without the kernel's loopback noise)
// with opts, and returns a client.
func benchServer(b *testing.B, opts ...grpc.ServerOption) *grpc.ClientConn {
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&testServiceDesc, &testServer{arrived: make(chan struct{}, 1), release: make(chan struct{})})
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// BenchmarkServer is a unary call's cost end to end on a real server,
// in the same run: bare (no report); orca, an application sending the
// same fields through grpc/orca itself (CallMetricsServerOption with
// grpc/orca's own ServerMetricsRecorder, every field the Reporter sends
// set, and an interceptor asking for the recorder so that every call
// gets the trailer); reporter, the Reporter. reporter − orca is what the
// Reporter costs beyond what grpc-go's trailer costs; reporter − bare
// is the whole price of a report per call.
func BenchmarkServer(b *testing.B) {
	run := func(b *testing.B, conn *grpc.ClientConn) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if err := conn.Invoke(ctx, callMethod, &healthRequestOK, new(healthResponse)); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, benchServer(b)) })
	b.Run("orca", func(b *testing.B) {
		smr := orca.NewServerMetricsRecorder()
		smr.SetCPUUtilization(0.42)
		smr.SetQPS(812.5)
		smr.SetEPS(1.25)
		smr.SetApplicationUtilization(0.5)
		force := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
			rec := orca.CallMetricsRecorderFromContext(ctx)
			rec.SetNamedMetric(loadreport.InFlightName, 3)
			rec.SetNamedMetric(loadreport.LatencyName, 1.5)
			return h(ctx, req)
		}
		run(b, benchServer(b, orca.CallMetricsServerOption(smr), grpc.ChainUnaryInterceptor(force)))
	})
	b.Run("reporter", func(b *testing.B) {
		tr, _ := loadreport.NewTracker()
		_ = tr.SetCPUUtilization(0.42)
		_ = tr.SetApplicationUtilization(0.5)
		r, _ := New(tr)
		run(b, benchServer(b, r.ServerOptions()...))
	})
}

// BenchmarkProbeService is the probe service's cost,
// ProbeService/<variant>, against a bare unary call in the same run:
// answer, the service's handler called directly (Tracker.Probe and the
// response message, whose map and message are its allocations);
// <net>/bare, one unary call of the test service (a health check's
// request and response, a few bytes each), and <net>/probe, one Probe
// (ProbeMethod, its answer validated), on one server that has both
// services and no Reporter, over bufconn (in memory) and loopback (TCP
// on 127.0.0.1). The Tracker has 8 requests in flight and one completed
// at each RIF from 0 to 7, so a probe's level (8-15) is empty and the
// estimate is scaled from level 3's (4-7).
func BenchmarkProbeService(b *testing.B) {
	tr, _ := loadreport.NewTracker()
	var began []loadreport.Began
	for range 8 {
		began = append(began, tr.Begin())
	}
	for _, bg := range began {
		tr.End(bg, false)
	}
	for range 8 {
		tr.Begin()
	}
	register := func(s *grpc.Server) {
		s.RegisterService(&testServiceDesc, &testServer{arrived: make(chan struct{}, 1), release: make(chan struct{})})
		if err := RegisterProbe(s, tr); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("answer", func(b *testing.B) {
		p := &probeServer{tr}
		b.ReportAllocs()
		for b.Loop() {
			_ = p.answer()
		}
	})
	run := func(b *testing.B, conn *grpc.ClientConn, probe bool) {
		ctx := context.Background()
		b.ReportAllocs()
		for b.Loop() {
			if probe {
				if _, _, err := Probe(ctx, conn); err != nil {
					b.Fatal(err)
				}
				continue
			}
			if err := conn.Invoke(ctx, callMethod, &healthRequestOK, new(healthResponse)); err != nil {
				b.Fatal(err)
			}
		}
	}
	for _, probe := range []bool{false, true} {
		name := map[bool]string{false: "bare", true: "probe"}[probe]
		b.Run("bufconn/"+name, func(b *testing.B) { run(b, bufconnServer(b, register), probe) })
		b.Run("loopback/"+name, func(b *testing.B) { run(b, loopbackServer(b, register), probe) })
	}
}

// loopbackServer serves what register registers on 127.0.0.1 and returns
// a client of it.
func loopbackServer(b *testing.B, register func(*grpc.Server)) *grpc.ClientConn {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	register(srv)
	go srv.Serve(lis)
	b.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}
