package grpcreport

import (
	"context"
	"errors"
	"io"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestTrailerCarriesTheLoad: on a server whose Tracker's fake clock
// stands at 2 s, each call's trailer holds the load before that call
// ends: the calls before it over 2 s, itself in flight, the utilizations
// set, and the mean duration of the calls before it (each "advance" call
// lasts what it moves the clock by). A handler's own per-call value
// (request_cost) comes with it.
func TestTrailerCarriesTheLoad(t *testing.T) {
	s := startServer(t, 2*time.Second, nil)
	if err := errors.Join(s.tracker.SetCPUUtilization(0.25), s.tracker.SetMemUtilization(0.5), s.tracker.SetApplicationUtilization(0.75)); err != nil {
		t.Fatal(err)
	}
	conn := dialDirect(t, s.addr)
	ctx := context.Background()
	utils := func(r *v3orcapb.OrcaLoadReport) *v3orcapb.OrcaLoadReport {
		r.CpuUtilization, r.MemUtilization, r.ApplicationUtilization = 0.25, 0.5, 0.75
		return r
	}
	for i, tt := range []struct {
		cmd  string
		want *v3orcapb.OrcaLoadReport
	}{
		{"ok", utils(&v3orcapb.OrcaLoadReport{NamedMetrics: map[string]float64{"rif": 1}})},
		// The trailer is made when the handler returns, after it moved the clock.
		{"advance:4ms", utils(&v3orcapb.OrcaLoadReport{RpsFractional: 1 / 2.004, NamedMetrics: map[string]float64{"rif": 1}})},
		// 2 calls done over 2.004 s; their durations 0 and 4 ms.
		{"cost", utils(&v3orcapb.OrcaLoadReport{RpsFractional: 2 / 2.004, NamedMetrics: map[string]float64{"rif": 1, "latency_ms": 2},
			RequestCost: map[string]float64{"db": 2}})},
		{"code:14", utils(&v3orcapb.OrcaLoadReport{RpsFractional: 3 / 2.004, NamedMetrics: map[string]float64{"rif": 1, "latency_ms": 4.0 / 3}})},
		{"ok", utils(&v3orcapb.OrcaLoadReport{RpsFractional: 4 / 2.004, Eps: 1 / 2.004, NamedMetrics: map[string]float64{"rif": 1, "latency_ms": 1}})},
	} {
		got, err := call(ctx, conn, tt.cmd)
		if tt.cmd == "code:14" {
			if status.Code(err) != codes.Unavailable {
				t.Fatalf("call %d (%s): %v, want UNAVAILABLE", i, tt.cmd, err)
			}
		} else if err != nil {
			t.Fatalf("call %d (%s): %v", i, tt.cmd, err)
		}
		if got == nil || !proto.Equal(got, tt.want) {
			t.Fatalf("call %d (%s): report %v, want %v", i, tt.cmd, got, tt.want)
		}
	}
}

// TestInFlightUnderConcurrentCalls: 6 calls held in their handlers at
// once are 6 in flight; a 7th call's report counts them and itself; once
// released, nothing is in flight.
func TestInFlightUnderConcurrentCalls(t *testing.T) {
	const held = 6
	s := startServer(t, time.Second, nil)
	conn := dialDirect(t, s.addr)
	ctx := context.Background()
	var wg sync.WaitGroup
	for range held {
		wg.Go(func() {
			if _, err := call(ctx, conn, "hold"); err != nil {
				t.Error(err)
			}
		})
	}
	for range held {
		select {
		case <-s.arrived:
		case <-time.After(5 * time.Second):
			t.Fatal("the held calls did not arrive")
		}
	}
	if n := s.tracker.InFlight(); n != held {
		t.Fatalf("in flight %d, want %d", n, held)
	}
	r, err := call(ctx, conn, "ok")
	if err != nil || r.GetNamedMetrics()["rif"] != held+1 {
		t.Fatalf("report %v, %v: want rif %d", r, err, held+1)
	}
	close(s.release)
	wg.Wait()
	if n := s.tracker.InFlight(); n != 0 {
		t.Fatalf("in flight %d after every call returned", n)
	}
	if got := s.tracker.RPS(); got != held+1 {
		t.Fatalf("rps %v at 1 s, want %d", got, held+1)
	}
}

// TestErrorsCountAsEPS: at 1 s on the fake clock, one call of each
// outcome; eps counts those whose code is an error (the default: the
// codes gRPC's HTTP mapping sends as a 5xx), rps counts all.
func TestErrorsCountAsEPS(t *testing.T) {
	cmds := []string{"ok", "code:14", "code:3", "code:5", "code:13", "code:4", "code:1", "code:2", "plain", "code:12", "code:8", "panic"}
	for _, tt := range []struct {
		name string
		opts []Option
		eps  int
	}{
		// UNAVAILABLE, INTERNAL, DEADLINE_EXCEEDED, UNKNOWN, plain (UNKNOWN),
		// UNIMPLEMENTED, panic; not INVALID_ARGUMENT, NOT_FOUND, CANCELLED,
		// RESOURCE_EXHAUSTED.
		{"default", nil, 7},
		{"InvalidArgument and NotFound", []Option{WithErrorCodes(codes.InvalidArgument, codes.NotFound)}, 3}, // and the panic
		{"none", []Option{WithErrorCodes()}, 1}, // the panic
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startServer(t, time.Second, nil, tt.opts...)
			conn := dialDirect(t, s.addr)
			for _, c := range cmds {
				r, err := call(context.Background(), conn, c)
				if (c == "ok") != (err == nil) || (r == nil) != (c == "panic") {
					t.Fatalf("%s: report %v, error %v", c, r, err)
				}
			}
			got := s.tracker.Report()
			if got.RPSFractional != float64(len(cmds)) || got.EPS != float64(tt.eps) || s.tracker.InFlight() != 0 {
				t.Fatalf("rps %v eps %v in flight %d; want %d %d 0", got.RPSFractional, got.EPS, s.tracker.InFlight(), len(cmds), tt.eps)
			}
		})
	}
}

// TestStreamsCount: a bidirectional stream counts once, from its start
// to its trailer, which carries the report; one that fails or panics
// counts as an error and leaves nothing in flight.
func TestStreamsCount(t *testing.T) {
	s := startServer(t, time.Second, nil)
	conn := dialDirect(t, s.addr)
	chat := func(cmd string, msgs int) (*v3orcapb.OrcaLoadReport, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, chatMethod)
		if err != nil {
			return nil, err
		}
		for range msgs {
			if err := st.SendMsg(&healthpb.HealthCheckRequest{Service: cmd}); err != nil {
				return nil, err
			}
			if err := st.RecvMsg(new(healthpb.HealthCheckResponse)); err != nil {
				return nil, err
			}
		}
		if n := s.tracker.InFlight(); n != 1 {
			return nil, errors.New("the open stream is not in flight")
		}
		if err := st.CloseSend(); err != nil {
			return nil, err
		}
		err = st.RecvMsg(new(healthpb.HealthCheckResponse))
		if err == io.EOF {
			err = nil
		}
		r, derr := decodeTrailer(st.Trailer())
		return r, errors.Join(err, derr)
	}
	if r, err := chat("ok", 3); err != nil || r.GetNamedMetrics()["rif"] != 1 {
		t.Fatalf("stream: report %v, %v; want rif 1", r, err)
	}
	if _, err := chat("code:13", 1); status.Code(err) != codes.Internal {
		t.Fatalf("failing stream: %v, want INTERNAL", err)
	}
	if _, err := chat("panic", 1); status.Code(err) != codes.Internal {
		t.Fatalf("panicking stream: %v, want INTERNAL (recovered outside the Reporter)", err)
	}
	if r, err := chat("ok", 1); err != nil || r.GetRpsFractional() != 3 || r.GetEps() != 2 {
		t.Fatalf("report %v, %v: want rps 3 eps 2 (three streams done at 1 s, two failed)", r, err)
	}
	if n := s.tracker.InFlight(); n != 0 {
		t.Fatalf("in flight %d after the streams ended", n)
	}
}

// TestClientsThatGiveUp: a client whose deadline passes and one that
// cancels leave the server's handler running until it sees its context
// end; then nothing is in flight. A cancel is not an error (CANCELLED);
// a deadline is (DEADLINE_EXCEEDED) when the server's own deadline ends
// the handler, but the client's cancel of the stream often reaches the
// server first, and then the handler sees CANCELLED: the expected eps is
// what the handlers saw.
func TestClientsThatGiveUp(t *testing.T) {
	s := startServer(t, time.Second, nil)
	conn := dialDirect(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := call(ctx, conn, "hold")
	cancel()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("timed-out call: %v", err)
	}
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		<-s.arrived // the first hold's
		<-s.arrived
		cancel()
	}()
	if _, err := call(ctx, conn, "hold"); status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled call: %v", err)
	}
	if !waitFor(5*time.Second, func() bool { return s.tracker.InFlight() == 0 && s.tracker.RPS() == 2 }) {
		t.Fatalf("in flight %d, rps %v after both clients gave up; want 0 and 2", s.tracker.InFlight(), s.tracker.RPS())
	}
	if eps, want := s.tracker.Report().EPS, float64(s.deadlines.Load()); eps != want {
		t.Fatalf("eps %v, want %v (the handlers that saw their deadline)", eps, want)
	}
}

// TestSkip: a skipped method is not counted and gets no report; the
// ORCA out-of-band stream is never counted (checked in the
// weighted_round_robin OOB test, where it is open).
func TestSkip(t *testing.T) {
	s := startServer(t, time.Second, nil, WithSkip(func(m string) bool { return m == chatMethod }))
	conn := dialDirect(t, s.addr)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, chatMethod)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(st.SendMsg(&healthpb.HealthCheckRequest{}), st.RecvMsg(new(healthpb.HealthCheckResponse))); err != nil {
		t.Fatal(err)
	}
	if n := s.tracker.InFlight(); n != 0 {
		t.Fatalf("a skipped stream is in flight: %d", n)
	}
	_ = st.CloseSend()
	if err := st.RecvMsg(new(healthpb.HealthCheckResponse)); err != io.EOF {
		t.Fatal(err)
	}
	if tr := st.Trailer(); len(tr.Get("endpoint-load-metrics-bin")) != 0 {
		t.Fatalf("a skipped stream got a report: %v", tr)
	}
	if r, err := call(ctx, conn, "ok"); err != nil || r == nil || r.RpsFractional != 0 {
		t.Fatalf("unskipped call: report %v, %v; want one with nothing done before it", r, err)
	}
}

// TestLatencyAcrossTheWire: the latency estimate in the trailer is the
// mean of the durations the handlers took on the fake clock.
func TestLatencyAcrossTheWire(t *testing.T) {
	s := startServer(t, time.Second, []loadreport.Option{loadreport.WithWindow(time.Second)})
	conn := dialDirect(t, s.addr)
	for _, d := range []string{"10ms", "20ms", "60ms"} {
		if _, err := call(context.Background(), conn, "advance:"+d); err != nil {
			t.Fatal(err)
		}
	}
	r, err := call(context.Background(), conn, "ok")
	if err != nil || math.Abs(r.GetNamedMetrics()["latency_ms"]-30) > 1e-9 {
		t.Fatalf("report %v, %v: want latency_ms 30", r, err)
	}
}

func TestOptionsRejected(t *testing.T) {
	tr, err := loadreport.NewTracker()
	if err != nil {
		t.Fatal(err)
	}
	rep, err := New(tr)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  func() error
		want string
	}{
		{"nil tracker", func() error { _, err := New(nil); return err }, "nil Tracker"},
		{"WithErrorCodes(OK)", func() error { _, err := New(tr, WithErrorCodes(codes.OK)); return err }, "WithErrorCodes(OK)"},
		{"WithErrorCodes(17)", func() error { _, err := New(tr, WithErrorCodes(codes.Internal, 17)); return err }, "WithErrorCodes(Code(17))"},
		{"WithSkip(nil)", func() error { _, err := New(tr, WithSkip(nil)); return err }, "WithSkip(nil)"},
		{"RegisterOOB below 30 s", func() error { return rep.RegisterOOB(grpc.NewServer(), 5*time.Second) }, "5s"},
		{"RegisterOOB on nil", func() error { return rep.RegisterOOB(nil, 0) }, "nil server"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.err()
			if !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalidOption naming %q", err, tt.want)
			}
		})
	}
}
