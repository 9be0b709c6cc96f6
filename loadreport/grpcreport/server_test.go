package grpcreport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/orca"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// fakeClock is a settable clock; tests move it, never sleep.
type fakeClock struct{ ns atomic.Int64 }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func (c *fakeClock) now() time.Time          { return epoch.Add(time.Duration(c.ns.Load())) }
func (c *fakeClock) set(d time.Duration)     { c.ns.Store(int64(d)) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// testServer is a real gRPC server on loopback running a Reporter, with
// a test service whose one unary method (Call) and one bidirectional
// stream (Chat) do what the request's Service field says:
//
//	"" or "ok"     answer OK
//	"code:N"       fail with status code N
//	"plain"        fail with an error that is not a status (UNKNOWN)
//	"panic"        panic (a recovery interceptor outside the Reporter's answers INTERNAL)
//	"hold"         wait for release (answer OK) or the RPC's end (answer its context's error)
//	"advance:D"    move the fake clock by D, then answer OK
//	"cost"         record request_cost.db=2 through grpc/orca, then answer OK
//
// With failEvery set, every failEvery-th "ok" answers UNAVAILABLE.
// A Chat stream takes its command from its first message, answers each
// message, and acts on the command when the client closes its side.
type testServer struct {
	t         *testing.T
	addr      string
	rep       *Reporter
	tracker   *loadreport.Tracker
	clk       *fakeClock
	arrived   chan struct{} // one value per "hold" that began waiting
	release   chan struct{} // closed to release every "hold"
	served    atomic.Int64  // RPCs answered OK
	deadlines atomic.Int64  // "hold" calls that ended by their deadline (not a cancel)
	oobOpen   atomic.Int64  // ORCA out-of-band streams open
	failEvery atomic.Int64  // if > 0, every failEvery-th "ok" call answers UNAVAILABLE
	oks       atomic.Int64  // "ok" calls seen, for failEvery
}

// startServer starts a server with a Tracker on a fake clock (set to
// clockAt) made from trackerOpts, and a Reporter made from opts.
func startServer(t *testing.T, clockAt time.Duration, trackerOpts []loadreport.Option, opts ...Option) *testServer {
	t.Helper()
	clk := new(fakeClock)
	tr, err := loadreport.NewTracker(append([]loadreport.Option{loadreport.WithClock(clk.now)}, trackerOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	clk.set(clockAt) // the Tracker began at 0
	return startServerWith(t, tr, clk, opts...)
}

func startServerWith(t *testing.T, tr *loadreport.Tracker, clk *fakeClock, opts ...Option) *testServer {
	t.Helper()
	rep, err := New(tr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	s := &testServer{t: t, rep: rep, tracker: tr, clk: clk, arrived: make(chan struct{}, 100), release: make(chan struct{})}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = lis.Addr().String()
	srvOpts := append([]grpc.ServerOption{
		grpc.UnaryInterceptor(recoverUnary), grpc.StreamInterceptor(recoverStream),
		grpc.ChainStreamInterceptor(s.watchOOB),
	}, rep.ServerOptions()...)
	srv := grpc.NewServer(srvOpts...)
	srv.RegisterService(&testServiceDesc, s)
	if err := rep.RegisterOOB(srv, 0); err != nil {
		t.Fatal(err)
	}
	if err := RegisterProbe(srv, tr); err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s
}

func recoverUnary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(ctx, req)
}

func recoverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = status.Errorf(codes.Internal, "panic: %v", p)
		}
	}()
	return h(srv, ss)
}

// watchOOB counts the ORCA out-of-band streams open.
func (s *testServer) watchOOB(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if info.FullMethod == oobMethod {
		s.oobOpen.Add(1)
		defer s.oobOpen.Add(-1)
	}
	return h(srv, ss)
}

// failMessage is the message of a failEvery failure.
const failMessage = "every failEvery-th call fails"

const (
	callMethod = "/lbgo.test.Load/Call"
	chatMethod = "/lbgo.test.Load/Chat"
)

type testService interface{}

var testServiceDesc = grpc.ServiceDesc{
	ServiceName: "lbgo.test.Load",
	HandlerType: (*testService)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
			req := new(healthpb.HealthCheckRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			s := srv.(*testServer)
			h := func(ctx context.Context, req any) (any, error) {
				return s.act(ctx, req.(*healthpb.HealthCheckRequest).Service)
			}
			if in == nil {
				return h(ctx, req)
			}
			return in(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: callMethod}, h)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat", ServerStreams: true, ClientStreams: true,
		Handler: func(srv any, ss grpc.ServerStream) error {
			s := srv.(*testServer)
			cmd := ""
			for i := 0; ; i++ {
				req := new(healthpb.HealthCheckRequest)
				if err := ss.RecvMsg(req); err == io.EOF {
					break
				} else if err != nil {
					return err
				}
				if i == 0 {
					cmd = req.Service
				}
				if err := ss.SendMsg(&healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}); err != nil {
					return err
				}
			}
			_, err := s.act(ss.Context(), cmd)
			return err
		},
	}},
}

func (s *testServer) act(ctx context.Context, cmd string) (*healthpb.HealthCheckResponse, error) {
	name, arg, _ := strings.Cut(cmd, ":")
	switch name {
	case "", "ok":
		if k := s.failEvery.Load(); k > 0 && s.oks.Add(1)%k == 0 {
			return nil, status.Error(codes.Unavailable, failMessage)
		}
	case "code":
		n, _ := strconv.Atoi(arg)
		return nil, status.Error(codes.Code(n), "as asked")
	case "plain":
		return nil, errors.New("a plain error")
	case "panic":
		panic("as asked")
	case "hold":
		s.arrived <- struct{}{}
		select {
		case <-s.release:
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				s.deadlines.Add(1)
			}
			return nil, ctx.Err()
		}
	case "advance":
		d, err := time.ParseDuration(arg)
		if err != nil {
			return nil, err
		}
		s.clk.advance(d)
	case "cost":
		orca.CallMetricsRecorderFromContext(ctx).SetRequestCost("db", 2)
	default:
		return nil, fmt.Errorf("unknown command %q", cmd)
	}
	s.served.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// dialDirect connects to one server, with no balancing.
func dialDirect(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// call runs one Call with cmd, with a 5 s deadline, and returns the
// report its trailer carries (nil without one), decoded by the protobuf
// library, and the call's error.
func call(ctx context.Context, conn *grpc.ClientConn, cmd string) (*v3orcapb.OrcaLoadReport, error) {
	var tr metadata.MD
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := conn.Invoke(ctx, callMethod, &healthpb.HealthCheckRequest{Service: cmd}, new(healthpb.HealthCheckResponse), grpc.Trailer(&tr))
	r, derr := decodeTrailer(tr)
	if derr != nil {
		return nil, derr
	}
	return r, err
}

func decodeTrailer(tr metadata.MD) (*v3orcapb.OrcaLoadReport, error) {
	vals := tr.Get("endpoint-load-metrics-bin")
	switch len(vals) {
	case 0:
		return nil, nil
	case 1:
		r := new(v3orcapb.OrcaLoadReport)
		if err := proto.Unmarshal([]byte(vals[0]), r); err != nil {
			return nil, fmt.Errorf("trailer does not decode: %w", err)
		}
		return r, nil
	}
	return nil, fmt.Errorf("%d endpoint-load-metrics-bin values", len(vals))
}

// waitFor polls cond every millisecond until it holds or d passes: for
// events of a real server (a handler returning after its client left).
func waitFor(d time.Duration, cond func() bool) bool {
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

type healthResponse = healthpb.HealthCheckResponse

var healthRequestOK = healthpb.HealthCheckRequest{Service: "ok"}
