package xdsbalancer

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	lbgo "github.com/lbgo/balancer"
	"github.com/lbgo/balancer/grpcbalancer"
	"github.com/stretchr/testify/require"
)

// target is the channel's target, as grpcbalancer.Channel names it.
const target = "xds:///" + listenerName

// TestXDS_everyPolicy pushes each lbgo_ policy in turn to one client, each
// with server parameters of its own (maxFails 2+i, failTimeout i+1 s,
// maxConns 100+i, numbers arriving as doubles): the client's channel runs
// that policy, its peers are the three EDS endpoints with those
// parameters and weight 1 (EDS gives none, so gRPC's equal shares), and
// RPCs succeed.
func TestXDS_everyPolicy(t *testing.T) {
	bs := startBackends(t, 3)
	cp := startControlPlane(t)
	c := dial(t, cp)
	want := addrsOf(bs)
	slices.Sort(want)
	for i, a := range lbgo.Algorithms() {
		name := grpcbalancer.PolicyName(a.Name)
		maxFails, failTimeout, maxConns := 2+i, time.Duration(i+1)*time.Second, 100+i
		cp.waitACK(cp.push(addrsOf(bs), policies(mustPolicy(t, name, map[string]any{
			"maxFails": maxFails, "failTimeout": failTimeout.String(), "maxConns": maxConns,
		}))))
		waitFor(t, name+" with its parameters on the channel", func() bool {
			if grpcbalancer.Channel(target).Policy() != name {
				return false
			}
			var got []string
			for _, p := range grpcbalancer.Channel(target).Peers() {
				if p.MaxFails() != maxFails || p.FailTimeout() != failTimeout || p.MaxConns() != maxConns || p.Weight() != 1 {
					return false
				}
				got = append(got, p.Addr())
			}
			slices.Sort(got)
			return slices.Equal(got, want)
		})
		for range 6 {
			_, err := call(t, c)
			require.NoError(t, err, name)
		}
	}
}

// TestXDS_edsWeights: EDS's load_balancing_weight reaches the weighted
// policies. gRPC's xds resolver gives an endpoint of weight w its share of
// the locality's sum S, times the locality's share (here 1), in 1.31
// fixed point (gRFC A113): floor(w·2^31/S); grpcbalancer makes unequal
// ones their share of 1000, rounded: 167, 333, 500 for 1, 2, 3.
// lbgo_smoothwrr, nginx's smooth weighted round robin, which keeps each
// peer within one pick of its share at every point, then sends 60 RPCs
// about 10, 20, 30 (round_robin: 20 each); a pushed change to 3, 2, 1
// turns it round.
func TestXDS_edsWeights(t *testing.T) {
	bs := startBackends(t, 3)
	cp := startControlPlane(t)
	c := dial(t, cp)
	lb := policies(mustPolicy(t, "lbgo_smoothwrr", nil))
	for _, weights := range [][]uint32{{1, 2, 3}, {3, 2, 1}} {
		cp.waitACK(cp.pushWeighted(addrsOf(bs), weights, lb))
		var sum uint64
		for _, w := range weights {
			sum += uint64(w)
		}
		shares := make([]uint64, len(weights))
		var total uint64
		for i, w := range weights {
			shares[i] = uint64(w) << 31 / sum
			total += shares[i]
		}
		want := map[string]int{}
		for i := range weights {
			want[bs[i].addr] = int(math.Round(float64(shares[i]) * 1000 / float64(total)))
		}
		waitFor(t, fmt.Sprintf("peers weighted %v, all up", want), func() bool {
			peers := grpcbalancer.Channel(target).Peers()
			for _, p := range peers {
				if p.Weight() != want[p.Addr()] || p.IsDown() {
					return false
				}
			}
			return len(peers) == len(bs)
		})
		const rpcs = 60
		got := map[string]int{}
		for range rpcs {
			b, err := call(t, c)
			require.NoError(t, err)
			got[b]++
		}
		for i, w := range weights {
			share := float64(rpcs) * float64(w) / float64(sum)
			require.InDelta(t, share, got[bs[i].name], 1.5, "weights %v: %s got %d of %d, want about %.1f (all: %v)", weights, bs[i].name, got[bs[i].name], rpcs, share, got)
		}
	}
}
