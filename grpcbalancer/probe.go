package grpcbalancer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	v3orcapb "github.com/cncf/xds/go/xds/data/orca/v3"
	v3orcaservicepb "github.com/cncf/xds/go/xds/service/orca/v3"
	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/probequeue"
	"github.com/lbgo/balancer/loadreport"
	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
)

// ProbeMethod is the unary RPC the probing policies (lbgo_prequal) call on
// each READY SubConn's connection: grpcreport.RegisterProbe serves it. Its
// request is an xds.service.orca.v3.OrcaLoadReportRequest (empty), its
// answer an xds.data.orca.v3.OrcaLoadReport whose named_metrics hold the
// server's requests in flight ("rif") and latency estimate in
// milliseconds ("latency_ms"; absent means 0). It is grpcreport.ProbeMethod
// (a test holds them equal): this package does not import grpcreport,
// whose own tests import this one.
const ProbeMethod = "/lbgo.loadreport.v1.LoadProbe/Probe"

// probes reports whether alg's picker balances by probes, so that its
// policy runs a prober: its picker takes WithProber (a Prober, as
// PrequalSettings.Prober sets it).
func probes(alg lbgo.Algorithm) bool { return slices.Contains(alg.Options, "WithProber") }

// testProbeAll, set by a test, gives every policy a prober, so the prober
// can be tested over real connections whatever the picker.
var testProbeAll bool

// probeSettings are the probe fields of a Config, with their defaults.
type probeSettings struct {
	timeout        time.Duration
	workers, queue int
}

var defaultProbeSettings = probeSettings{
	timeout: probequeue.DefaultTimeout, workers: probequeue.DefaultWorkers, queue: probequeue.DefaultSize,
}

// parseProbeSettings checks c's probe fields into s: only a probing
// picker's policy takes them. bad and dur are parseConfig's.
func parseProbeSettings(alg lbgo.Algorithm, c *Config, s *probeSettings, bad func(field, why string) error,
	dur func(field string, v *string) (time.Duration, error)) error {
	for _, f := range []struct {
		field string
		set   bool
	}{{"probeTimeout", c.ProbeTimeout != nil}, {"probeWorkers", c.ProbeWorkers != nil}, {"probeQueue", c.ProbeQueue != nil}} {
		if f.set && !probes(alg) && !testProbeAll {
			return bad(f.field, "the picker "+alg.Name+" does not probe")
		}
	}
	if c.ProbeTimeout != nil {
		d, err := dur("probeTimeout", c.ProbeTimeout)
		if err != nil {
			return err
		}
		if d <= 0 || d > lbgo.MaxProbeLatency {
			return bad("probeTimeout", fmt.Sprintf("out of (0, %v]", lbgo.MaxProbeLatency))
		}
		s.timeout = d
	}
	if c.ProbeWorkers != nil {
		if n := *c.ProbeWorkers; n < 1 || n > probequeue.MaxWorkers {
			return bad("probeWorkers", fmt.Sprintf("out of [1, %d]", probequeue.MaxWorkers))
		}
		s.workers = *c.ProbeWorkers
	}
	if c.ProbeQueue != nil {
		if n := *c.ProbeQueue; n < 0 || n > probequeue.MaxSize {
			return bad("probeQueue", fmt.Sprintf("out of [0, %d]", probequeue.MaxSize))
		}
		s.queue = *c.ProbeQueue
	}
	return nil
}

// probeConns holds the connection of each READY SubConn of one policy for
// its probes: a grpc.ClientConnInterface from the SubConn's producer
// (SubConn.GetOrBuildProducer, as grpc/orca gets its own). gRPC closes a
// SubConn's producers at each change of its state; the policy drops the
// connection then too.
type probeConns struct {
	m sync.Map // balancer.SubConn → *probeConn
}

type probeConn struct {
	cc      grpc.ClientConnInterface
	release func()
}

// probeProducerBuilder builds the producer that gives a SubConn's
// connection to the prober; it holds no goroutine, so its close does
// nothing.
type probeProducerBuilder struct{}

type probeProducer struct{ cc grpc.ClientConnInterface }

func (probeProducerBuilder) Build(cci any) (balancer.Producer, func()) {
	return &probeProducer{cc: cci.(grpc.ClientConnInterface)}, func() {}
}

var theProbeProducer = probeProducerBuilder{}

// ready keeps sc's connection for probes, once sc is READY. It is called
// from gRPC's serializer, as every SubConn event is.
func (c *probeConns) ready(sc balancer.SubConn) {
	pr, release := sc.GetOrBuildProducer(theProbeProducer)
	if old, loaded := c.m.Swap(sc, &probeConn{cc: pr.(*probeProducer).cc, release: release}); loaded {
		old.(*probeConn).release()
	}
}

// drop forgets sc's connection, when sc is no longer READY or is gone.
func (c *probeConns) drop(sc balancer.SubConn) {
	if old, loaded := c.m.LoadAndDelete(sc); loaded {
		old.(*probeConn).release()
	}
}

// dropAll forgets every connection, at the policy's Close.
func (c *probeConns) dropAll() {
	c.m.Range(func(sc, _ any) bool {
		c.drop(sc.(balancer.SubConn))
		return true
	})
}

// pickerOptions returns the options a picker is built with: the config's,
// and the prober for a probing one.
func pickerOptions(alg lbgo.Algorithm, cfg *lbConfig, prober *grpcProber) []lbgo.Option {
	if prober == nil || !probes(alg) {
		return cfg.opts
	}
	return append(slices.Clip(cfg.opts), lbgo.PrequalSettings{Prober: prober}.Option())
}

// errNotReady is a probe's failure when its peer's SubConn is not READY.
var errNotReady = errors.New("the peer's SubConn is not READY")

// grpcProber is the balancer.Prober of one policy: each probe calls
// ProbeMethod on the probed peer's SubConn (the peer's Value) through its
// READY connection, from a bounded queue and workers (probequeue).
type grpcProber struct {
	// Immutable after newGRPCProber.
	conns *probeConns
	q     *probequeue.Queue
}

func newGRPCProber(conns *probeConns, s probeSettings) (*grpcProber, error) {
	g := &grpcProber{conns: conns}
	q, err := probequeue.New(probequeue.Config{Workers: s.workers, Size: s.queue, Timeout: s.timeout, Probe: g.probe})
	if err != nil {
		return nil, err
	}
	g.q = q
	return g, nil
}

// Probe queues a probe of p, dropping it when the queue is full or the
// prober closed; it never blocks and allocates nothing.
func (g *grpcProber) Probe(p *lbgo.Peer, to lbgo.ProbeReceiver) { g.q.Put(p, to) }

// Close stops the workers and waits for them; the probes under way end
// unanswered. It is idempotent and returns nil.
func (g *grpcProber) Close() error {
	g.q.Close()
	return nil
}

func (g *grpcProber) probe(ctx context.Context, p *lbgo.Peer) (lbgo.ProbeAnswer, error) {
	sc, _ := p.Value().(balancer.SubConn)
	v, ok := g.conns.m.Load(sc)
	if sc == nil || !ok {
		return lbgo.ProbeAnswer{}, errNotReady
	}
	var lr v3orcapb.OrcaLoadReport
	if err := v.(*probeConn).cc.Invoke(ctx, ProbeMethod, &v3orcaservicepb.OrcaLoadReportRequest{}, &lr); err != nil {
		return lbgo.ProbeAnswer{}, err
	}
	return probeAnswerOf(&lr)
}

// probeAnswerOf reads a probe's answer from its load report's named
// metrics, as loadreport.ProbeFromNamedMetrics reads and bounds them.
func probeAnswerOf(lr *v3orcapb.OrcaLoadReport) (lbgo.ProbeAnswer, error) {
	rif, latency, err := loadreport.ProbeFromNamedMetrics(lr.NamedMetrics)
	if err != nil {
		return lbgo.ProbeAnswer{}, err
	}
	return lbgo.ProbeAnswer{InFlight: rif, Latency: latency}, nil
}

// ProbeStats are the probe counters of a probing policy (lbgo_prequal):
// every probe its picker asks for ends in exactly one of Answered, Failed
// and Dropped.
type ProbeStats struct {
	// Sent counts the probe RPCs started.
	Sent uint64
	// Answered counts the answers carrying the server's load; Failed the
	// Failed answers: an RPC error (UNIMPLEMENTED from a server without
	// the probe service, a timeout, a connection lost), a SubConn not
	// READY, an answer without rif or holding absurd values.
	Answered, Failed uint64
	// Dropped counts the probes never answered: the queue was full, or
	// the policy closed or changed its probe settings meanwhile.
	Dropped uint64
	// Refused counts the answers the picker refused (a peer removed
	// since); they count in Answered or Failed too.
	Refused uint64
	// LastError is the latest Failed answer's cause, naming the peer:
	// "probe of <addr>: " and the RPC's error (status.Code reads its
	// code), the SubConn not READY, or the answer's refused value. nil
	// until a probe fails, and kept through the answers that follow.
	LastError error
}

func (g *grpcProber) stats() ProbeStats {
	s := g.q.Stats()
	return ProbeStats{Sent: s.Sent, Answered: s.Answered, Failed: s.Failed, Dropped: s.Dropped, Refused: s.Refused,
		LastError: s.LastError}
}
