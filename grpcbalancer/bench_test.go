package grpcbalancer

import (
	"context"
	"fmt"
	"testing"

	lbgo "github.com/lbgo/balancer"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// fakeSubConn stands in for a SubConn: the picker only hands it back.
type fakeSubConn struct{ balancer.SubConn }

// BenchmarkPickDone measures one RPC's way through the policy's picker,
// without gRPC around it: Pick and a successful Done, and a failed first
// attempt whose retry succeeds (the RPC's retry state stored, found and
// dropped).
func BenchmarkPickDone(b *testing.B) {
	for _, alg := range []string{"SmoothWRR", "FastestFirst"} {
		a, err := lbgo.AlgorithmNamed(alg)
		if err != nil {
			b.Fatal(err)
		}
		cfg := defaultConfig()
		peers := make([]*lbgo.Peer, 8)
		for i := range peers {
			peers[i] = cfg.newPeer(fmt.Sprintf("10.0.0.%d:443", i), 1, false, &fakeSubConn{})
		}
		lb, err := a.New(peers, cfg.opts...)
		if err != nil {
			b.Fatal(err)
		}
		cfg.maxFails = 0 // the failed attempts must not take peers out
		p := &picker{b: &lbBalancer{name: PolicyName(alg)}, lb: lb, cfg: cfg}
		// max_fails 0, through Update: failed attempts keep peers eligible.
		if err := lb.Update(func() []*lbgo.Peer {
			s := make([]*lbgo.Peer, len(peers))
			for i, q := range peers {
				s[i] = cfg.newPeer(q.Addr(), 1, false, q.Value())
			}
			return s
		}()); err != nil {
			b.Fatal(err)
		}
		unavailable := status.Error(codes.Unavailable, "x")
		b.Run(alg+"/success", func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			info := balancer.PickInfo{Ctx: ctx}
			b.ReportAllocs()
			for b.Loop() {
				res, err := p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
			}
		})
		b.Run(alg+"/retried", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := context.WithCancel(context.Background())
				info := balancer.PickInfo{Ctx: ctx}
				res, err := p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				res.Done(balancer.DoneInfo{Err: unavailable, BytesSent: true})
				res, err = p.Pick(info)
				if err != nil {
					b.Fatal(err)
				}
				res.Done(balancer.DoneInfo{BytesSent: true, BytesReceived: true})
				cancel()
			}
		})
	}
}
