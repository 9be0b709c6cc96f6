package metrics

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/subset"
)

// clock is a settable clock; it never moves by itself.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// TestCollector drives two pickers registered on one pedantic registry
// (which checks that Collect matches Describe) and compares the scrape with
// the exposition written out below, derived from nginx's rules:
//
// SmoothWRR over a and b (weight 1) and c (down), max_fails 1: smooth
// round robin picks a first (both reach current weight 1; the first of
// the tie wins), then b. b fails: fails 1 = max_fails takes it out for
// fail_timeout (state failed) and lowers its effective weight by
// weight/max_fails = 1 to 0. Then a is the only live peer: one attempt is
// left in flight, and a retried request takes a and then finds no live
// peer (a tried, b out, c down), one ErrNoLivePeer. So a has 3 attempts,
// 1 in flight; b 1 attempt, 1 failure; c none.
//
// P2CPeakEWMA over x alone: one reply of 250ms is its first sample, so its
// estimate is 0.25 s.
func TestCollector(t *testing.T) {
	clk := &clock{time.Unix(1000, 0)}
	a, b, c := balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c", balancer.Down())
	wrr, err := balancer.NewSmoothWRR([]*balancer.Peer{a, b, c}, balancer.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}
	x := balancer.NewPeer("x")
	p2c, err := balancer.NewP2CPeakEWMA([]*balancer.Peer{x}, balancer.WithClock(clk.now))
	if err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New("wrr", wrr)); err != nil {
		t.Fatal(err)
	}
	if err := reg.Register(New("p2c", p2c)); err != nil {
		t.Fatal(err)
	}

	pick := func(p balancer.Picker, r *balancer.Request, want *balancer.Peer) {
		t.Helper()
		got, err := p.Pick(r)
		if err != nil || got != want {
			t.Fatalf("Pick = %v, %v; want %v", got, err, want)
		}
	}
	done := func(p balancer.Picker, peer *balancer.Peer, o balancer.Outcome) {
		t.Helper()
		if err := p.Done(peer, o); err != nil {
			t.Fatal(err)
		}
	}
	pick(wrr, nil, a)
	done(wrr, a, balancer.Outcome{})
	pick(wrr, nil, b)
	done(wrr, b, balancer.Outcome{Failed: true})
	pick(wrr, nil, a) // left in flight
	var r balancer.Request
	pick(wrr, &r, a)
	done(wrr, a, balancer.Outcome{})
	if _, err := wrr.Pick(&r); err != balancer.ErrNoLivePeer {
		t.Fatalf("retry: %v, want ErrNoLivePeer", err)
	}
	pick(p2c, nil, x)
	done(p2c, x, balancer.Outcome{Latency: 250 * time.Millisecond})

	const want = `
# HELP balancer_peer_attempts_total Attempts picked.
# TYPE balancer_peer_attempts_total counter
balancer_peer_attempts_total{peer="a",picker="wrr"} 3
balancer_peer_attempts_total{peer="b",picker="wrr"} 1
balancer_peer_attempts_total{peer="c",picker="wrr"} 0
balancer_peer_attempts_total{peer="x",picker="p2c"} 1
# HELP balancer_peer_failures_total Attempts reported as failed.
# TYPE balancer_peer_failures_total counter
balancer_peer_failures_total{peer="a",picker="wrr"} 0
balancer_peer_failures_total{peer="b",picker="wrr"} 1
balancer_peer_failures_total{peer="c",picker="wrr"} 0
balancer_peer_failures_total{peer="x",picker="p2c"} 0
# HELP balancer_peer_in_flight Attempts picked and not yet reported.
# TYPE balancer_peer_in_flight gauge
balancer_peer_in_flight{peer="a",picker="wrr"} 1
balancer_peer_in_flight{peer="b",picker="wrr"} 0
balancer_peer_in_flight{peer="c",picker="wrr"} 0
balancer_peer_in_flight{peer="x",picker="p2c"} 0
# HELP balancer_peer_fails Failures on record (nginx's fails), cleared by a success after a probe.
# TYPE balancer_peer_fails gauge
balancer_peer_fails{peer="a",picker="wrr"} 0
balancer_peer_fails{peer="b",picker="wrr"} 1
balancer_peer_fails{peer="c",picker="wrr"} 0
balancer_peer_fails{peer="x",picker="p2c"} 0
# HELP balancer_peer_weight Configured weight.
# TYPE balancer_peer_weight gauge
balancer_peer_weight{peer="a",picker="wrr"} 1
balancer_peer_weight{peer="b",picker="wrr"} 1
balancer_peer_weight{peer="c",picker="wrr"} 1
balancer_peer_weight{peer="x",picker="p2c"} 1
# HELP balancer_peer_effective_weight Weight the picker balances by now (effective weight).
# TYPE balancer_peer_effective_weight gauge
balancer_peer_effective_weight{peer="a",picker="wrr"} 1
balancer_peer_effective_weight{peer="b",picker="wrr"} 0
balancer_peer_effective_weight{peer="c",picker="wrr"} 1
balancer_peer_effective_weight{peer="x",picker="p2c"} 1
# HELP balancer_peer_latency_seconds Peak EWMA latency estimate of the latency-aware pickers.
# TYPE balancer_peer_latency_seconds gauge
balancer_peer_latency_seconds{peer="x",picker="p2c"} 0.25
# HELP balancer_no_live_peer_total Picks that found no live peer.
# TYPE balancer_no_live_peer_total counter
balancer_no_live_peer_total{picker="p2c"} 0
balancer_no_live_peer_total{picker="wrr"} 1
`
	names := []string{AttemptsName, FailuresName, InFlightName, FailsName, WeightName, EffectiveWeightName, LatencyName, NoLivePeerName}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}

	// The health gauge: one series per state and peer, 1 for the peer's.
	health := map[string]string{"a": "healthy", "b": "failed", "c": "down", "x": "healthy"}
	var hw strings.Builder
	hw.WriteString("# HELP balancer_peer_health 1 for the peer's state (healthy, down, failed, probing, full), 0 for the others.\n# TYPE balancer_peer_health gauge\n")
	for _, peer := range []struct{ addr, picker string }{{"a", "wrr"}, {"b", "wrr"}, {"c", "wrr"}, {"x", "p2c"}} {
		for _, s := range []string{"healthy", "down", "failed", "probing", "full"} {
			v := "0"
			if health[peer.addr] == s {
				v = "1"
			}
			hw.WriteString(`balancer_peer_health{peer="` + peer.addr + `",picker="` + peer.picker + `",state="` + s + `"} ` + v + "\n")
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(hw.String()), HealthName); err != nil {
		t.Error(err)
	}

	// Past fail_timeout, b is due a probe.
	clk.t = clk.t.Add(b.FailTimeout() + time.Second)
	if got := testutil.ToFloat64(healthOf(t, reg, "b", "probing")); got != 1 {
		t.Errorf("b probing = %v after its fail_timeout, want 1", got)
	}
}

// TestCollector_repeatedAddress: two peers at one address (two nginx
// server lines with one address) export a series each, the second with
// its address labelled "a#2", so that a scrape is not refused for two
// series with one label set. SmoothWRR over a, b and the second a (weight
// 1 each) picks the first a (the first of a three-way tie), which fails.
func TestCollector_repeatedAddress(t *testing.T) {
	a1, b, a2 := balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("a")
	wrr, err := balancer.NewSmoothWRR([]*balancer.Peer{a1, b, a2})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New("wrr", wrr)); err != nil {
		t.Fatal(err)
	}
	p, err := wrr.Pick(nil)
	if err != nil || p != a1 {
		t.Fatalf("Pick = %v, %v; want the first a", p, err)
	}
	if err := wrr.Done(p, balancer.Outcome{Failed: true}); err != nil {
		t.Fatal(err)
	}
	const want = `
# HELP balancer_peer_failures_total Attempts reported as failed.
# TYPE balancer_peer_failures_total counter
balancer_peer_failures_total{peer="a",picker="wrr"} 1
balancer_peer_failures_total{peer="a#2",picker="wrr"} 0
balancer_peer_failures_total{peer="b",picker="wrr"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), FailuresName); err != nil {
		t.Error(err)
	}
}

// healthOf returns the collector of one series of the health gauge, read
// from a fresh gather of reg.
func healthOf(t *testing.T, reg *prometheus.Registry, peer, state string) prometheus.Collector {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != HealthName {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["peer"] == peer && labels["state"] == state {
				g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "v"})
				g.Set(m.GetGauge().GetValue())
				return g
			}
		}
	}
	t.Fatalf("no %s{peer=%q,state=%q}", HealthName, peer, state)
	return nil
}

// TestCollector_noAllocsInPick checks that a registered, scraped collector
// leaves Pick and Done allocation-free.
func TestCollector_noAllocsInPick(t *testing.T) {
	p, err := balancer.NewRoundRobin([]*balancer.Peer{balancer.NewPeer("a", balancer.MaxFails(0)), balancer.NewPeer("b", balancer.MaxFails(0))})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(New("rr", p))
	if _, err := reg.Gather(); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		peer, _ := p.Pick(nil)
		_ = p.Done(peer, balancer.Outcome{Failed: true})
	})
	if allocs != 0 {
		t.Errorf("Pick+Done allocate %v", allocs)
	}
}

// TestCollector_guards: RoundRobin over a, b, c, d with panic threshold 50
// and ejection cap 75. The four fail, reported in order: a failure may
// take a peer out while 100·(out+1) ≤ 75·4 = 300, so a, b and c go out and
// d's failure is capped (1). One of four eligible, 25% < 50%: panic
// engages once (1, in panic). A success on a peer out, picked in panic,
// readmits it: two of four, 50%, not below: panic is over (0), the counter
// stays. The same behind a subset.Subset whose subset is the four: the
// series are the inner picker's, which the Subset forwards.
func TestCollector_guards(t *testing.T) {
	for _, wrapped := range []bool{false, true} {
		t.Run(map[bool]string{false: "RoundRobin", true: "Subset"}[wrapped], func(t *testing.T) { testGuards(t, wrapped) })
	}
}

// everyBackend is a subset.Subsetter whose subset is the whole list.
type everyBackend struct{}

func (everyBackend) Subset(keys []string) []int {
	out := make([]int, len(keys))
	for i := range out {
		out[i] = i
	}
	return out
}

func testGuards(t *testing.T, wrapped bool) {
	clk := &clock{time.Unix(1000, 0)}
	peers := []*balancer.Peer{balancer.NewPeer("a"), balancer.NewPeer("b"), balancer.NewPeer("c"), balancer.NewPeer("d")}
	opts := []balancer.Option{balancer.WithClock(clk.now), balancer.WithPanicThreshold(50), balancer.WithMaxEjectionPercent(75)}
	var rr balancer.Balancer
	if wrapped {
		inner, err := balancer.NewRoundRobin(nil, opts...)
		if err != nil {
			t.Fatal(err)
		}
		if rr, err = subset.New(inner, peers, everyBackend{}); err != nil {
			t.Fatal(err)
		}
	} else {
		var err error
		if rr, err = balancer.NewRoundRobin(peers, opts...); err != nil {
			t.Fatal(err)
		}
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New("rr", rr)); err != nil {
		t.Fatal(err)
	}
	held := map[*balancer.Peer]bool{}
	for len(held) < 4 {
		p, err := rr.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		if held[p] {
			t.Fatalf("round robin picked %s twice in four", p)
		}
		held[p] = true
	}
	for _, p := range peers {
		if err := rr.Done(p, balancer.Outcome{Failed: true}); err != nil {
			t.Fatal(err)
		}
	}
	const during = `
# HELP balancer_panics_total Times panic mode engaged.
# TYPE balancer_panics_total counter
balancer_panics_total{picker="rr"} 1
# HELP balancer_in_panic 1 while panic mode is engaged, 0 otherwise.
# TYPE balancer_in_panic gauge
balancer_in_panic{picker="rr"} 1
# HELP balancer_ejections_capped_total Failures the ejection cap kept from taking a peer out.
# TYPE balancer_ejections_capped_total counter
balancer_ejections_capped_total{picker="rr"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(during), PanicsName, InPanicName, EjectionsCappedName); err != nil {
		t.Error(err)
	}
	for range 4 {
		p, err := rr.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := rr.Done(p, balancer.Outcome{}); err != nil {
			t.Fatal(err)
		}
		if p != peers[3] {
			break // a, b or c: readmitted
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(strings.Replace(during, `balancer_in_panic{picker="rr"} 1`, `balancer_in_panic{picker="rr"} 0`, 1)), PanicsName, InPanicName, EjectionsCappedName); err != nil {
		t.Error(err)
	}
}

// TestCollector_outliers: balancer_outlier_ejections_total counts the
// picker's success-rate ejections, one per balancer.EventPeerOutlier. Ten
// peers under RoundRobin, 200 attempts each in the first interval: p0
// fails every other one (rate 0.5), the others none (1.0): mean 0.95,
// stdev √((0.45² + 9 × 0.05²)/10) = 0.15, threshold 0.95 − 1.9 × 0.15 =
// 0.665: p0 alone is ejected by the first failure past the interval.
func TestCollector_outliers(t *testing.T) {
	clk := &clock{time.Unix(1000, 0)}
	var peers []*balancer.Peer
	for i := range 10 {
		peers = append(peers, balancer.NewPeer(strconv.Itoa(i), balancer.MaxFails(1000)))
	}
	var events int
	rr, err := balancer.NewRoundRobin(peers, balancer.WithClock(clk.now), balancer.WithSuccessRateEjection(balancer.SuccessRateEjection{}),
		balancer.WithEvents(func(e balancer.Event) {
			if e.Kind == balancer.EventPeerOutlier {
				events++
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(New("rr", rr)); err != nil {
		t.Fatal(err)
	}
	want := func(n int) string {
		return fmt.Sprintf(`
# HELP balancer_outlier_ejections_total Peers taken out for their success rate (WithSuccessRateEjection).
# TYPE balancer_outlier_ejections_total counter
balancer_outlier_ejections_total{picker="rr"} %d
`, n)
	}
	k := 0
	for range 2000 {
		p, err := rr.Pick(nil)
		if err != nil {
			t.Fatal(err)
		}
		failed := p == peers[0] && k%2 == 0
		if p == peers[0] {
			k++
		}
		if err := rr.Done(p, balancer.Outcome{Failed: failed}); err != nil {
			t.Fatal(err)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0)), OutlierEjectionsName); err != nil {
		t.Error(err)
	}
	p, err := rr.Pick(nil)
	if err != nil {
		t.Fatal(err)
	}
	clk.t = clk.t.Add(10*time.Second + 1)
	if err := rr.Done(p, balancer.Outcome{Failed: true}); err != nil { // a failure reads the clock
		t.Fatal(err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(1)), OutlierEjectionsName); err != nil {
		t.Error(err)
	}
	if events != 1 {
		t.Errorf("%d EventPeerOutlier, want 1", events)
	}
}
