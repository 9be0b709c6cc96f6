// Package metrics exports a balancer picker's state to Prometheus: a
// prometheus.Collector that reads, at each scrape, what the picker already
// keeps per peer (in-flight attempts, totals of attempts and failures,
// health, effective weight, latency estimate, whether the picker is blind
// to its load) and per picker (the picks that found no live peer, the
// peers it went blind to); RetryBudgetCollector and HealthCheckCollector
// export a retry budget's and a health checker's counters,
// HedgingCollector a balancer.Hedging's and HedgeCounterCollector a
// grpcbalancer.Hedging's (without importing gRPC).
//
// It is a module of its own so that the balancer module itself depends on
// nothing beyond the standard library. The picker's Pick and Done pay
// nothing for it: a scrape reads the picker's atomic counters
// (balancer.Peer.Stats) and takes its lock once per peer, briefly, for the
// effective weight (balancer.Peer.Snapshot).
package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lbgo/balancer"
)

// The metrics a Collector exports, each with the constant label picker and,
// per peer, the label peer: the peer's address, and for the k-th peer
// (k ≥ 2, in the order of Peers) of an address that peers share, the
// address followed by "#k", such as "10.0.0.1:80#2". The label is by
// position: when one of the peers sharing an address leaves, the ones after
// it move down a label, so their counters' series continue another peer's.
// Peers that share an address are rare (an nginx block that repeats a server
// line); a series that jumps back is Prometheus's counter reset.
const (
	InFlightName         = "balancer_peer_in_flight"
	AttemptsName         = "balancer_peer_attempts_total"
	FailuresName         = "balancer_peer_failures_total"
	HealthName           = "balancer_peer_health"
	FailsName            = "balancer_peer_fails"
	WeightName           = "balancer_peer_weight"
	EffectiveWeightName  = "balancer_peer_effective_weight"
	LatencyName          = "balancer_peer_latency_seconds"
	NoLivePeerName       = "balancer_no_live_peer_total"
	PanicsName           = "balancer_panics_total"
	InPanicName          = "balancer_in_panic"
	EjectionsCappedName  = "balancer_ejections_capped_total"
	OutlierEjectionsName = "balancer_outlier_ejections_total"
	BlindName            = "balancer_peer_blind"
	BlindTotalName       = "balancer_blind_total"
)

// Source is what a Collector reads: every picker of the balancer package
// (a balancer.Balancer or balancer.Updater) and subset.Subset are one. An
// integration that replaces its picker (a gRPC balancer rebuilt on a
// resolver update) can pass a Source of its own whose Peers reads the
// current one. The picker's own series (balancer_no_live_peer_total, the
// guards', balancer_blind_total) come from balancer.Stats, which every
// picker of the balancer package, subset.Subset and grpcbalancer.Channel
// implement: a Source that does not export only the peers' series.
type Source interface {
	Peers() []*balancer.Peer
}

// Collector is a prometheus.Collector for one picker. Each scrape exports,
// for every peer the picker holds (labels picker, peer):
//
//   - balancer_peer_in_flight (gauge): attempts picked, not yet reported;
//   - balancer_peer_attempts_total (counter): attempts picked;
//   - balancer_peer_failures_total (counter): attempts reported failed;
//   - balancer_peer_health (gauge, label state): 1 for the peer's
//     balancer.Health (healthy, down, failed, probing, full), 0 for the
//     others, so that sum by (state) counts the peers in each;
//   - balancer_peer_fails (gauge): nginx's failure count, which max_fails
//     failures within fail_timeout turn into the failed state;
//   - balancer_peer_weight and balancer_peer_effective_weight (gauges): the
//     configured weight and the one the picker balances by now (nginx's
//     effective_weight, or FastestFirst's latency-derived weight);
//   - balancer_peer_latency_seconds (gauge): the latency estimate of the
//     latency-aware pickers, for each peer they have measured;
//   - balancer_peer_blind (gauge): 1 while the picker, one that balances
//     by what the servers say of their load (Prequal's probes, the reports
//     of WithReportedLoad and ReportedWRR), hears nothing it can use from
//     the peer's server and falls back for it (balancer.PeerStats.Blind),
//     0 otherwise;
//
// and for the picker (label picker), if the Source implements
// balancer.Stats (every picker of the balancer package and subset.Subset do),
// read from its balancer.PickerStats: balancer_no_live_peer_total
// (counter): the picks that returned balancer.ErrNoLivePeer; and, from the guards
// (balancer.WithPanicThreshold, balancer.WithMaxEjectionPercent; 0 without
// them), balancer_panics_total (counter): the times panic mode engaged
// (one per balancer.EventPanic), balancer_in_panic (gauge): 1 while it is
// engaged, and balancer_ejections_capped_total (counter): the failures the
// cap kept from taking a peer out (one per balancer.EventEjectionCapped);
// and balancer_outlier_ejections_total (counter): the peers
// balancer.WithSuccessRateEjection took out (one per
// balancer.EventPeerOutlier; 0 without it); and
// balancer_blind_total (counter): the times the picker went blind to a
// peer (one per balancer.EventPeerBlind; 0 for the pickers that do not
// watch).
//
// The totals belong to the peer and only grow; a removed peer's series
// disappear. Create it with New; register it with prometheus.Register or
// a Registry's Register. Safe for concurrent scrapes.
type Collector struct {
	b Source
	d descs
}

type descs struct {
	inFlight, attempts, failures, health, fails, weight, effective, latency, noLive *prometheus.Desc
	panics, inPanic, capped, outliers, blind, blindTotal                            *prometheus.Desc
}

// New returns a Collector for b, labelling its series picker=name: give
// each picker registered on one registry its own name.
func New(name string, b Source) *Collector {
	c := prometheus.Labels{"picker": name}
	peer := []string{"peer"}
	return &Collector{b: b, d: descs{
		inFlight:   prometheus.NewDesc(InFlightName, "Attempts picked and not yet reported.", peer, c),
		attempts:   prometheus.NewDesc(AttemptsName, "Attempts picked.", peer, c),
		failures:   prometheus.NewDesc(FailuresName, "Attempts reported as failed.", peer, c),
		health:     prometheus.NewDesc(HealthName, "1 for the peer's state (healthy, down, failed, probing, full), 0 for the others.", []string{"peer", "state"}, c),
		fails:      prometheus.NewDesc(FailsName, "Failures on record (nginx's fails), cleared by a success after a probe.", peer, c),
		weight:     prometheus.NewDesc(WeightName, "Configured weight.", peer, c),
		effective:  prometheus.NewDesc(EffectiveWeightName, "Weight the picker balances by now (effective weight).", peer, c),
		latency:    prometheus.NewDesc(LatencyName, "Peak EWMA latency estimate of the latency-aware pickers.", peer, c),
		noLive:     prometheus.NewDesc(NoLivePeerName, "Picks that found no live peer.", nil, c),
		panics:     prometheus.NewDesc(PanicsName, "Times panic mode engaged.", nil, c),
		inPanic:    prometheus.NewDesc(InPanicName, "1 while panic mode is engaged, 0 otherwise.", nil, c),
		capped:     prometheus.NewDesc(EjectionsCappedName, "Failures the ejection cap kept from taking a peer out.", nil, c),
		outliers:   prometheus.NewDesc(OutlierEjectionsName, "Peers taken out for their success rate (WithSuccessRateEjection).", nil, c),
		blind:      prometheus.NewDesc(BlindName, "1 while the picker hears nothing it can use of the peer's load (no probe answer, no load report) and falls back for it.", peer, c),
		blindTotal: prometheus.NewDesc(BlindTotalName, "Times the picker went blind to a peer (EventPeerBlind).", nil, c),
	}}
}

// Describe sends the descriptors of every metric the Collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.d.inFlight, c.d.attempts, c.d.failures, c.d.health,
		c.d.fails, c.d.weight, c.d.effective, c.d.latency, c.d.noLive, c.d.panics, c.d.inPanic, c.d.capped, c.d.outliers, c.d.blind, c.d.blindTotal} {
		ch <- d
	}
}

// Collect reads the picker's peers and sends their metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	peers := c.b.Peers()
	seen := make(map[string]int, len(peers)) // peers so far of each address
	for _, p := range peers {
		addr := p.Addr()
		if seen[addr]++; seen[addr] > 1 {
			addr += "#" + strconv.Itoa(seen[addr])
		}
		st := p.Snapshot()
		gauge(c.d.inFlight, float64(st.InFlight), addr)
		ch <- prometheus.MustNewConstMetric(c.d.attempts, prometheus.CounterValue, float64(st.Attempts), addr)
		ch <- prometheus.MustNewConstMetric(c.d.failures, prometheus.CounterValue, float64(st.Failures), addr)
		for _, h := range balancer.Healths() {
			v := 0.0
			if h == st.Health {
				v = 1
			}
			gauge(c.d.health, v, addr, h.String())
		}
		gauge(c.d.fails, float64(st.Fails), addr)
		gauge(c.d.weight, float64(st.Weight), addr)
		balancedBy := st.EffectiveWeight
		if st.DerivedWeight != 0 { // FastestFirst balances by the weight it derives
			balancedBy = st.DerivedWeight
		}
		gauge(c.d.effective, float64(balancedBy), addr)
		if st.Measured {
			gauge(c.d.latency, st.Latency.Seconds(), addr)
		}
		blind := 0.0
		if st.Blind {
			blind = 1
		}
		gauge(c.d.blind, blind, addr)
	}
	src, ok := c.b.(balancer.Stats)
	if !ok {
		return
	}
	ps := src.Stats()
	ch <- prometheus.MustNewConstMetric(c.d.noLive, prometheus.CounterValue, float64(ps.NoLivePeer))
	in := 0.0
	if ps.InPanic {
		in = 1
	}
	ch <- prometheus.MustNewConstMetric(c.d.panics, prometheus.CounterValue, float64(ps.Panics))
	gauge(c.d.inPanic, in)
	ch <- prometheus.MustNewConstMetric(c.d.capped, prometheus.CounterValue, float64(ps.EjectionsCapped))
	ch <- prometheus.MustNewConstMetric(c.d.outliers, prometheus.CounterValue, float64(ps.OutlierEjections))
	ch <- prometheus.MustNewConstMetric(c.d.blindTotal, prometheus.CounterValue, float64(ps.Blinded))
}
