package balancer

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// clientsOnReports returns k ReportedWRR pickers, each over its own peers
// a..d (configured weight 1), built with opts and fastReports, all given
// the same reports of the same servers at the same instants: the clients of
// a fleet. Every picker has made 8 attempts and recomputed once, so that
// each serves the cycle of the weights derived from loads.
func clientsOnReports(t *testing.T, k int, loads map[string]ServerLoad, opts func(i int) []Option) ([]*ReportedWRR, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	clients := make([]*ReportedWRR, k)
	for i := range clients {
		s, err := NewReportedWRR(weighted(1, 1, 1, 1), append(append([]Option{clk.opt()}, fastReports...), opts(i)...)...)
		require.NoError(t, err)
		clients[i] = s
		serve(t, s, loads, 8)
	}
	clk.add(100 * time.Millisecond)
	for _, s := range clients {
		serve(t, s, loads, 1)
		require.Equal(t, []int{40, 80, 120, 160}, derivedWeights(s.Peers()), "derived from the reports")
	}
	return clients, clk
}

// herd runs steps rounds in which every client picks once, reported with
// loads, and returns the mean over the rounds of the largest number of
// clients that picked the same server in a round: len(clients) when they
// move in lockstep. After every round of period rounds the clock moves on
// by the update period, so that the servers' next reports (d's rps
// alternating between 40 and 44, so the weights change) rebuild every
// client's cycle.
func herd(t *testing.T, clients []*ReportedWRR, clk *fakeClock, loads map[string]ServerLoad, steps, period int) float64 {
	t.Helper()
	total := 0
	for step := range steps {
		if step > 0 && step%period == 0 {
			clk.add(100 * time.Millisecond)
			loads["d"] = load(0.5, float64(40+4*(step/period%2)), 0)
		}
		same := map[string]int{}
		for _, s := range clients {
			got := serve(t, s, loads, 1)
			for addr := range got {
				same[addr]++
			}
		}
		most := 0
		for _, c := range same {
			most = max(most, c)
		}
		total += most
	}
	return float64(total) / float64(steps)
}

// TestReportedWRR_clientsDoNotHerd: 16 clients over the same four servers
// reporting rps in the ratio 1:2:3:4 derive the same weights at the same
// time. Each entering the cycle of derived weights where its own counter
// left off, as every client's did before the random entry, they all pick
// the same server at every step, the rebuilds every 10 picks included (16
// of 16 in every round when this was checked). Entered at a uniformly
// random offset, as grpc-go's weighted_round_robin enters each new
// scheduler, the largest group picking one server is about half of them
// (its mean for 16 offsets uniform over the 10 distinct positions of the
// 1:2:3:4 sequence is near 7; the bound, 11, is far above it), and each
// client's shares stay the derived ones.
func TestReportedWRR_clientsDoNotHerd(t *testing.T) {
	reports := func() map[string]ServerLoad {
		return map[string]ServerLoad{"a": load(0.5, 10, 0), "b": load(0.5, 20, 0), "c": load(0.5, 30, 0), "d": load(0.5, 40, 0)}
	}
	tests := []struct {
		name   string
		opts   func(i int) []Option
		period int
	}{
		{"runtime source, steady", func(int) []Option { return nil }, 1 << 30},
		{"runtime source, rebuilds every 10 picks", func(int) []Option { return nil }, 10},
		{"seeded sources, rebuilds every 10 picks", func(i int) []Option { return []Option{WithRand(rand.NewPCG(uint64(i), 7))} }, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loads := reports()
			clients, clk := clientsOnReports(t, 16, loads, tt.opts)
			most := herd(t, clients, clk, loads, 400, tt.period)
			t.Logf("mean largest group: %.2f of 16", most)
			assert.Less(t, most, 11.0, "mean largest group of 16 clients picking one server")
			// Every server reports its first rps again, then a recompute.
			for _, s := range clients {
				serve(t, s, reports(), 8)
			}
			clk.add(100 * time.Millisecond)
			for i, s := range clients {
				serve(t, s, reports(), 1)
				got := serve(t, s, reports(), 400)
				assert.InDelta(t, 160, got["d"], 8, "client %d's picks of d: %v", i, got)
				assert.InDelta(t, 40, got["a"], 8, "client %d's picks of a: %v", i, got)
			}
		})
	}
}

// TestReportedWRR_entryIsSeeded: the random entry draws from WithRand's
// source, so that one seed reproduces a client's picks and two seeds tell
// two clients apart.
func TestReportedWRR_entryIsSeeded(t *testing.T) {
	loads := map[string]ServerLoad{"a": load(0.5, 10, 0), "b": load(0.5, 20, 0), "c": load(0.5, 30, 0), "d": load(0.5, 40, 0)}
	seeds := []uint64{1, 1, 2, 3, 4, 5}
	clients, _ := clientsOnReports(t, len(seeds), loads, func(i int) []Option { return []Option{WithRand(rand.NewPCG(seeds[i], 0))} })
	trace := make([]string, len(clients))
	for i, s := range clients {
		for range 20 {
			p, err := s.Pick(nil)
			require.NoError(t, err)
			trace[i] += p.Addr()
		}
	}
	assert.Equal(t, trace[0], trace[1], "the same seed")
	distinct := map[string]bool{}
	for _, tr := range trace[1:] {
		distinct[tr] = true
	}
	assert.Greater(t, len(distinct), 1, "five seeds, one trace: %v", fmt.Sprint(trace))
}
