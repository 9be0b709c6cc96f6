package benchmarks

import (
	"fmt"
	"testing"

	"github.com/cloudwego/kitex/pkg/loadbalance"
	"github.com/lbgo/balancer"
)

// BenchmarkRandomPaired times RandomWeighted's Pick alone and its Pick
// followed by Done (the unit of work a caller pays: Pick counts the attempt
// in flight until Done, which kitex's pickers do not keep) beside kitex's
// alias method, the three adjacent in time at each size and mode, so that
// their ratios hold on a machine others load:
// RandomPaired/peers=<n>/<mode>/<impl>.
func BenchmarkRandomPaired(b *testing.B) {
	impls := []impl{
		{"lbgo.RandomWeighted", ours(balancer.NewRandomWeighted, false)},
		{"lbgo.RandomWeighted+Done", ours(balancer.NewRandomWeighted, true)},
		{"kitex.alias", kitex(loadbalance.NewWeightedRandomWithAliasMethodBalancer, true)},
	}
	for _, n := range sizes {
		runs := make([]runner, len(impls))
		for i, im := range impls {
			runs[i] = im.setup(n)
		}
		for _, mode := range []string{"serial", "parallel"} {
			for i, im := range impls {
				b.Run(fmt.Sprintf("peers=%d/%s/%s", n, mode, im.name), func(b *testing.B) {
					b.ReportAllocs()
					runs[i](b, mode == "parallel")
				})
			}
		}
	}
}
