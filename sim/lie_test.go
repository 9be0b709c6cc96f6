package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestLiars runs each trust scenario beside its honest twin (the same
// scenario, the same arrivals and service draws, backend 0 truthful), for
// the pickers the lie could fool, over seeds 1-3: the liar's share of the
// attempts must stay within 3× its fair share (a tenth), and the requests
// served (arrived less failed) within 0.8× the twin's.
func TestLiars(t *testing.T) {
	if testing.Short() {
		t.Skip("36 runs of 60 s simulated")
	}
	for _, c := range []struct {
		scenario string
		pickers  []string
	}{
		{"liar-probe", []string{"Prequal"}},
		{"liar-util", []string{"ReportedWRR"}},
		{"liar-rif", []string{"LeastConn+rif", "P2CPeakEWMA+rif", "FastestFirst+rif", "RandomTwo+rif"}},
	} {
		sc := mustLookup(t, c.scenario)
		require.NoError(t, sc.Validate())
		twin := sc
		twin.Backends = append([]Backend(nil), sc.Backends...)
		twin.Backends[0].Lie = Truthful
		for _, name := range c.pickers {
			pol := policy(t, name)
			for seed := uint64(1); seed <= 3; seed++ {
				lied, err := Run(&sc, pol, seed)
				require.NoError(t, err)
				honest, err := Run(&twin, pol, seed)
				require.NoError(t, err)
				share, _ := lied.Share(0, 0, lied.Buckets())
				fair, _ := honest.Share(0, 0, honest.Buckets())
				served := float64(lied.Requests-lied.Failed) / float64(honest.Requests-honest.Failed)
				t.Logf("%s %s seed %d: liar's share %.3f (truthful %.3f), served %.3f× the truthful run's; p99 %v (%v)",
					c.scenario, name, seed, share, fair, served, lied.P99, honest.P99)
				assert.LessOrEqual(t, share, 0.3, "%s %s seed %d: liar's share", c.scenario, name, seed)
				assert.GreaterOrEqual(t, served, 0.8, "%s %s seed %d: served", c.scenario, name, seed)
			}
		}
	}
}

// TestLieRefused: a lie out of range is refused, naming the backend.
func TestLieRefused(t *testing.T) {
	for _, l := range []Lie{-1, lies, 1 << 20} {
		sc := mustLookup(t, "liar-probe")
		sc.Backends[3].Lie = l
		err := sc.Validate()
		assert.ErrorIs(t, err, ErrInvalid, "lie %d", l)
		assert.ErrorContains(t, err, "backend 3")
	}
	assert.Equal(t, "Lie(7)", Lie(7).String())
}
