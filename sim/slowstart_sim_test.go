package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestScaleUp is the scale-up's done-when: with slow start over the
// warm-up's 10 s (Envoy's formula, aggression 1: the weight rises
// linearly from 10%, as the cold backend's speed does) the p99 of the
// requests arriving during the warm-up stays within 1.2× the fleet's p99
// before the join, under every picker that takes slow start (RoundRobin
// ignores weights and refuses it), and below LeastConn's without it.
func TestScaleUp(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the scenario: skipped with -short")
	}
	_, runs := guardRuns(t, "scaleup")
	assert.NotContains(t, runs, "RoundRobin+slowstart")
	for i, seed := range guardSeeds {
		for _, p := range []string{"SmoothWRR", "LeastConn", "P2CPeakEWMA"} {
			g := runs[p+"+slowstart"][i]
			assert.LessOrEqual(t, ratio64(g.WindowP99, g.BeforeP99), 1.2, "%s+slowstart seed %d: %v in the warm-up, %v before", p, seed, g.WindowP99, g.BeforeP99)
		}
		assert.Less(t, runs["LeastConn+slowstart"][i].WindowP99, runs["LeastConn"][i].WindowP99, "seed %d", seed)
	}
}
