package sim

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHedge_noHedgeIsPlain: a hedged run whose budget allows no hedge
// serves every attempt from its explicit queues exactly as the plain run
// serves it from the schedule drawn at the send: the same latencies,
// attempts, failures, picks and server time, bit for bit, across queueing
// backends, a network (zones16), shedding (retrystorm), stalls and faults,
// unlimited workers (linkerd), and the pickers that read the servers'
// reports and probes. The plain engine is the reference: the two share
// only the draws.
func TestHedge_noHedgeIsPlain(t *testing.T) {
	for _, name := range []string{"fleet16", "zones16", "retrystorm", "blackhole-stall", "blackhole-flaky", "linkerd"} {
		sc := mustLookup(t, name)
		sc.Duration = max(min(sc.Duration, 30*time.Second), sc.Window.To)
		for _, pn := range []string{"P2CPeakEWMA", "Prequal", "LeastConn+rif"} {
			p := policy(t, pn)
			off, err := Hedged(p, Hedge{Budget: 0})
			require.NoError(t, err)
			plain, err := Run(&sc, p, 7)
			require.NoError(t, err)
			h, err := Run(&sc, off, 7)
			require.NoError(t, err)
			assert.Equal(t, plain.Tail, h.Tail, "%s %s: latencies", name, pn)
			assert.Equal(t, plain.Mean, h.Mean, "%s %s: mean", name, pn)
			assert.Equal(t, [4]int{plain.Requests, plain.Failed, plain.Attempts, plain.FailedAttempts},
				[4]int{h.Requests, h.Failed, h.Attempts, h.FailedAttempts}, "%s %s: requests, failed, attempts, failed attempts", name, pn)
			assert.Equal(t, plain.ServiceTime, h.ServiceTime, "%s %s: server time", name, pn)
			assert.Equal(t, plain.Picks, h.Picks, "%s %s: picks", name, pn)
			assert.Equal(t, plain.Probes, h.Probes, "%s %s: probes", name, pn)
			assert.Zero(t, h.Hedges, "%s %s", name, pn)
		}
	}
}

// hedgePair is two backends of one worker each with nearly constant
// service times (a log-normal of shape 1e-9): backend 0 takes 1 s,
// backend 1 10 ms. SmoothWRR with weights 1 and 3 sends one request in
// four to backend 0 first; 4 requests a second make backend 0 busier
// than it can serve (1 a second at 1 s each) unless the hedges' cancels
// take its queue away.
func hedgePair() Scenario {
	return Scenario{
		Name: "hedgepair",
		Backends: []Backend{
			{Workers: 1, Mean: time.Second, Dist: LogNormal, Sigma: 1e-9, Weight: 1},
			{Workers: 1, Mean: 10 * time.Millisecond, Dist: LogNormal, Sigma: 1e-9, Weight: 3},
		},
		Rate:     4,
		Duration: 60 * time.Second,
		Timeout:  30 * time.Second,
		Watch:    -1,
	}
}

// TestHedge_cancel pins the cancellation model on hedgePair, where each
// outcome follows from the two service times: every request sent first to
// backend 0 is hedged 20 ms later to backend 1 while the budget (half the
// requests) allows, and the hedge wins, at 30 ms plus backend 1's short
// queue. The loser is cancelled then (no round trip): still waiting in
// backend 0's queue, it leaves it unserved (Cancelled); in service, it
// runs its whole second (HedgeWaste, 1 s each) unless Abort stops it at
// once.
func TestHedge_cancel(t *testing.T) {
	sc := hedgePair()
	for _, abort := range []bool{false, true} {
		pol, err := Hedged(policy(t, "SmoothWRR"), Hedge{Budget: 0.5, Delay: 20 * time.Millisecond, Abort: abort})
		require.NoError(t, err)
		r, err := Run(&sc, pol, 1)
		require.NoError(t, err)
		t.Logf("abort %v: %d requests, %d hedges (won %d, refused %d), %d losers left the queue, waste %v, p99 %v",
			abort, r.Requests, r.Hedges, r.HedgesWon, r.HedgesRefused, r.Cancelled, r.HedgeWaste, r.P99)
		// One in four goes to backend 0 first: about a quarter hedged
		// (the arrivals are Poisson: 3 standard deviations of a binomial
		// share over 240 requests, 0.084). A hedge loses only when the
		// first attempt went to backend 1 and waited there 20 ms.
		assert.InDelta(t, 0.25, float64(r.Hedges+r.HedgesRefused)/float64(r.Requests), 0.084, "abort %v: hedges asked for", abort)
		assert.LessOrEqual(t, r.Hedges-r.HedgesWon, 2, "abort %v: backend 1 answers before backend 0 almost every time", abort)
		assert.LessOrEqual(t, r.HedgesRefused, 2, "abort %v: refused only while the budget fills", abort)
		assert.Equal(t, r.Requests+r.Hedges, r.Attempts, "abort %v: no retry", abort)
		assert.Zero(t, r.Failed, "abort %v", abort)
		// Backend 0 serves only the refused ones to their end (1 s each),
		// and without Abort the losers in service when cancelled.
		served := time.Duration(r.Hedges-r.Cancelled) * time.Second
		if abort {
			// Stopped at the cancel, 30 ms after the send at most plus
			// backend 1's queue (at most a few of its 10 ms jobs).
			assert.LessOrEqual(t, r.HedgeWaste, time.Duration(r.Hedges)*60*time.Millisecond, "abort: waste")
			assert.Less(t, r.Cancelled, r.Hedges/10, "abort: backend 0 is free when the next request comes, most of the time")
		} else {
			assert.InDelta(t, float64(served), float64(r.HedgeWaste), float64(time.Millisecond), "waste: 1 s per loser in service")
			// Backend 0 holds a loser for 1 s after each request it
			// starts, and a request reaches it about every second: a
			// good share of them find it busy and leave its queue.
			assert.Greater(t, r.Cancelled, r.Hedges/4, "some requests find backend 0 busy with a loser and leave its queue")
		}
		// Every request hedged answers by 20 ms + backend 1's queue and
		// 10 ms: the p99 is far below backend 0's second.
		assert.Less(t, r.P99, 100*time.Millisecond, "abort %v: p99", abort)
	}
}

// TestHedge_budget: in the scenarios where hedging could amplify load (a
// fleet past its capacity and shedding, an outage, a brownout), the hedges
// stay within the default budget's 5% of the requests, and the error share
// does not rise.
func TestHedge_budget(t *testing.T) {
	for _, name := range []string{"retrystorm", "outage1s", "brownout", "fleet64", "blackhole-stall"} {
		sc := mustLookup(t, name)
		sc.Duration = max(min(sc.Duration, 30*time.Second), sc.Window.To)
		for _, pn := range []string{"P2CPeakEWMA", "Prequal"} {
			p := policy(t, pn)
			h, err := Hedged(p, DefaultHedge)
			require.NoError(t, err)
			plain, err := Run(&sc, p, 3)
			require.NoError(t, err)
			r, err := Run(&sc, h, 3)
			require.NoError(t, err)
			share := float64(r.Hedges) / float64(r.Requests)
			t.Logf("%s %s: hedges %.2f%% of requests (won %d of %d, refused %d); errors %.3f%% (plain %.3f%%); p99 %v (plain %v)",
				name, pn, 100*share, r.HedgesWon, r.Hedges, r.HedgesRefused, 100*r.ErrorRate(), 100*plain.ErrorRate(), r.P99, plain.P99)
			assert.LessOrEqual(t, share, DefaultHedge.Budget, "%s %s: hedges per request", name, pn)
			assert.LessOrEqual(t, r.ErrorRate(), plain.ErrorRate()*1.05+0.0005, "%s %s: error share", name, pn)
		}
	}
}

// TestHedge_invalid: a hedge the simulator cannot run is refused with
// ErrInvalid, naming the value.
func TestHedge_invalid(t *testing.T) {
	p2c := policy(t, "P2CPeakEWMA")
	hedged, err := Hedged(p2c, DefaultHedge)
	require.NoError(t, err)
	for _, c := range []struct {
		p    Policy
		h    Hedge
		want string
	}{
		{policy(t, OracleSED), DefaultHedge, "oracle"},
		{hedged, DefaultHedge, "hedged already"},
		{p2c, Hedge{Budget: -0.01}, "-0.01"},
		{p2c, Hedge{Budget: 0.51}, "0.51"},
		{p2c, Hedge{Budget: math.NaN()}, "NaN"},
		{p2c, Hedge{Budget: math.Inf(1)}, "+Inf"},
		{p2c, Hedge{Budget: 0.05, Delay: -time.Millisecond}, "-1ms"},
	} {
		_, err := Hedged(c.p, c.h)
		require.Error(t, err, "%+v", c.h)
		assert.True(t, errors.Is(err, ErrInvalid), "%v", err)
		assert.Contains(t, err.Error(), c.want)
	}
}

// TestHedge_names: the +hedge variants are found by name, whatever the
// case, and only of policies that exist and are not oracles.
func TestHedge_names(t *testing.T) {
	var names []string
	for _, p := range HedgePolicies() {
		names = append(names, p.Name)
		base, ok := p.HedgeBase()
		assert.True(t, ok)
		assert.Equal(t, p.Name, base+HedgeSuffix)
	}
	assert.Equal(t, []string{"P2CPeakEWMA+hedge", "FastestFirst+hedge", "LeastConn+rif+hedge", "Prequal+hedge"}, names)
	p, ok := PolicyByName("prequal+HEDGE")
	require.True(t, ok)
	assert.Equal(t, "Prequal+hedge", p.Name)
	for _, bad := range []string{"+hedge", "Nope+hedge", OracleSED + "+hedge", "P2CPeakEWMA+hedge+hedge"} {
		_, ok := PolicyByName(bad)
		assert.False(t, ok, bad)
	}
	_, ok = policy(t, "P2CPeakEWMA").HedgeBase()
	assert.False(t, ok)
}
