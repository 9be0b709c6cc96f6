package grpcreport

import (
	"context"
	"errors"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// TestProbeLoopback: a real server on loopback with the Reporter's
// interceptors and the probe service, its Tracker on a fake clock at 1 s.
// One call lasts 2 ms (it moves the clock), at rif 0. Five calls held:
// 16 clients probing at once each read rif 5 and 2 ms × (5+1)/(0+1) =
// 12 ms (levels 1 to 3 empty, level 0 scaled), with no ORCA trailer.
// Once the five are released and done (0 ms each, at rif 0 to 4, one at
// level 0), a probe reads rif 0 and level 0's (2+0)/2 = 1 ms. The Tracker
// counted the 6 calls and none of the 81 probes: at 2 s its window spans
// 2 s, so rps is 6/2.
func TestProbeLoopback(t *testing.T) {
	s := startServer(t, time.Second, nil)
	conn := dialDirect(t, s.addr)
	ctx := context.Background()
	if _, err := call(ctx, conn, "advance:2ms"); err != nil {
		t.Fatal(err)
	}
	var held sync.WaitGroup
	for range 5 {
		held.Go(func() {
			if _, err := call(ctx, conn, "hold"); err != nil {
				t.Error(err)
			}
		})
	}
	timeout := time.After(10 * time.Second)
	for range 5 {
		select {
		case <-s.arrived:
		case <-timeout:
			t.Fatal("the five calls did not arrive in 10 s")
		}
	}
	probe := func() (float64, time.Duration, metadata.MD, error) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var tr metadata.MD
		rif, lat, err := Probe(ctx, conn, grpc.Trailer(&tr))
		return rif, lat, tr, err
	}
	var probers sync.WaitGroup
	for range 16 {
		probers.Go(func() {
			for range 5 {
				rif, lat, tr, err := probe()
				if err != nil || rif != 5 || lat != 12*time.Millisecond {
					t.Errorf("Probe = %v, %v, %v; want 5, 12ms", rif, lat, err)
					return
				}
				if v := tr.Get("endpoint-load-metrics-bin"); len(v) != 0 {
					t.Errorf("a probe carries a report trailer: %q", v)
					return
				}
			}
		})
	}
	probers.Wait()
	close(s.release)
	held.Wait()
	if rif, lat, _, err := probe(); err != nil || rif != 0 || lat != time.Millisecond {
		t.Fatalf("after: Probe = %v, %v, %v; want 0, 1ms", rif, lat, err)
	}
	s.clk.set(2 * time.Second)
	if rps := s.tracker.RPS(); rps != 3 {
		t.Fatalf("rps %v, want 3: 6 calls (not the probes) over 2 s", rps)
	}
}

// TestProbeBufconn: the probe service alone, on a server without the
// Reporter, over an in-memory listener: the answer is the Tracker's
// Probe, 3 in flight and nothing completed (0 ms).
func TestProbeBufconn(t *testing.T) {
	tr, err := loadreport.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		tr.Begin()
	}
	conn := bufconnServer(t, func(s *grpc.Server) {
		if err := RegisterProbe(s, tr); err != nil {
			t.Fatal(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if rif, lat, err := Probe(ctx, conn); err != nil || rif != 3 || lat != 0 {
		t.Fatalf("Probe = %v, %v, %v; want 3, 0", rif, lat, err)
	}
}

// bufconnServer serves what register registers on an in-memory listener
// and returns a client of it.
func bufconnServer(t testing.TB, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(opts...)
	register(srv)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// fakeProbe answers ProbeMethod with a fixed report, for the client's
// checks of what a server sends.
type fakeProbe struct{ named map[string]float64 }

func (f *fakeProbe) answer() *v3orcapb.OrcaLoadReport {
	return &v3orcapb.OrcaLoadReport{NamedMetrics: f.named}
}

// TestProbeRefuses: Probe refuses what loadreport.ParseProbe refuses,
// with balancer.ErrInvalidProbe naming the value, and returns the
// call's error for a server without the service (UNIMPLEMENTED) or a
// deadline already past.
func TestProbeRefuses(t *testing.T) {
	for _, tt := range []struct {
		name     string
		named    map[string]float64 // the server's answer
		none     bool               // no probe service on the server
		expired  bool               // the call's deadline already past
		sentinel error
		code     codes.Code
		want     string
	}{
		{name: "rif NaN", named: map[string]float64{"rif": math.NaN(), "latency_ms": 1}, sentinel: loadreport.ErrInvalidValue, want: "named_metrics.rif=NaN"},
		{name: "rif negative", named: map[string]float64{"rif": -1}, sentinel: loadreport.ErrInvalidValue, want: "named_metrics.rif=-1"},
		{name: "rif huge", named: map[string]float64{"rif": 1e9}, sentinel: loadreport.ErrInvalidValue, want: "named_metrics.rif=1e+09"},
		{name: "latency infinite", named: map[string]float64{"rif": 1, "latency_ms": math.Inf(1)}, sentinel: loadreport.ErrInvalidValue, want: "named_metrics.latency_ms=+Inf"},
		{name: "latency above an hour", named: map[string]float64{"rif": 1, "latency_ms": 3.7e6}, sentinel: loadreport.ErrInvalidValue, want: "named_metrics.latency_ms=3.7e+06"},
		{name: "no rif", named: map[string]float64{"latency_ms": 1}, sentinel: loadreport.ErrNoReport, want: "no named_metrics.rif"},
		{name: "no service", none: true, code: codes.Unimplemented},
		{name: "deadline past", named: map[string]float64{"rif": 1}, expired: true, code: codes.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			conn := bufconnServer(t, func(s *grpc.Server) {
				if !tt.none {
					s.RegisterService(&probeServiceDesc, &fakeProbe{tt.named})
				}
			})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if tt.expired {
				ctx, cancel = context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			}
			defer cancel()
			rif, lat, err := Probe(ctx, conn)
			if rif != 0 || lat != 0 {
				t.Fatalf("refused with values %v, %v", rif, lat)
			}
			if tt.sentinel == nil {
				if status.Code(err) != tt.code || errors.Is(err, balancer.ErrInvalidProbe) {
					t.Fatalf("error %v, want code %v", err, tt.code)
				}
				return
			}
			if !errors.Is(err, balancer.ErrInvalidProbe) || !errors.Is(err, tt.sentinel) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidProbe and %v naming %s", err, tt.sentinel, tt.want)
			}
		})
	}
}

// TestProbeAnswersAnyRequest: the request is ignored, whatever it asks.
func TestProbeAnswersAnyRequest(t *testing.T) {
	tr, _ := loadreport.NewTracker()
	conn := bufconnServer(t, func(s *grpc.Server) { _ = RegisterProbe(s, tr) })
	resp := new(v3orcapb.OrcaLoadReport)
	req := &v3orcaservicepb.OrcaLoadReportRequest{RequestCostNames: []string{"x"}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := conn.Invoke(ctx, ProbeMethod, req, resp); err != nil {
		t.Fatal(err)
	}
	if got := resp.GetNamedMetrics(); len(got) != 2 || got["rif"] != 0 || got["latency_ms"] != 0 {
		t.Fatalf("named metrics %v, want rif 0 and latency_ms 0", got)
	}
}

func TestRegisterProbeRefuses(t *testing.T) {
	tr, _ := loadreport.NewTracker()
	for _, tt := range []struct {
		name string
		s    grpc.ServiceRegistrar
		t    *loadreport.Tracker
	}{{"nil server", nil, tr}, {"nil Tracker", grpc.NewServer(), nil}} {
		t.Run(tt.name, func(t *testing.T) {
			if err := RegisterProbe(tt.s, tt.t); !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), "RegisterProbe") {
				t.Fatalf("error %v, want ErrInvalidOption naming RegisterProbe", err)
			}
		})
	}
}
