package sim

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The done-when at the SRE book's fleet (300 clients, 300
// backends, subsets of 30): deterministic subsetting gives every backend
// the same connections within ±1 and a request load whose most loaded
// backend is within 1.1 of the mean; random subsetting, measured beside
// it, spreads far wider (the SRE book: 63% to 121% of the mean); the scale
// events' churn stays within each algorithm's bound.
func TestCompareSubsets_doneWhen(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the 300-client fleet")
	}
	f := DefaultSubsetFleet()
	rep, err := CompareSubsets(f, SubsetPolicies(), Options{Seeds: 2, Seed: 1})
	require.NoError(t, err)
	var b strings.Builder
	require.NoError(t, rep.Write(&b, false))
	t.Log("\n" + b.String())
	get := func(name string) *SubsetSummary {
		s, ok := rep.Find(name)
		require.True(t, ok, name)
		return s
	}
	// At 0.7 of 300 × 100/s for 6 s, 126,000 requests a seed (Poisson:
	// a standard deviation of 355).
	assert.InDelta(t, 2*126000, get("none").Requests, 2*3*355)
	for _, name := range []string{"deterministic", "ring"} {
		s := get(name)
		assert.LessOrEqual(t, s.ConnSpread.Mean, 1.0, "%s: connections max-min", name)
		assert.LessOrEqual(t, s.LoadMax.Mean, 1.1, "%s: requests max/mean", name)
	}
	// The ring keeps ±1 after both scale events, at any count; the SRE
	// algorithm after the first (30 divides 330), not after the second
	// (297 backends: 9 subsets of 30 a round leave 27 out).
	assert.LessOrEqual(t, get("ring").UpSpread.Mean, 1.0)
	assert.LessOrEqual(t, get("ring").DownSpread.Mean, 1.0)
	assert.LessOrEqual(t, get("deterministic").UpSpread.Mean, 1.0)
	assert.Greater(t, get("deterministic").DownSpread.Mean, 1.0)
	for _, name := range []string{"random", "rendezvous"} {
		s := get(name)
		assert.Greater(t, s.ConnMax.Mean, 1.2, "%s: the most connected backend", name)
		assert.Less(t, s.ConnMin.Mean, 0.8, "%s: the least connected backend", name)
		assert.Greater(t, s.LoadMax.Mean, 1.2, "%s: requests follow connections under round robin", name)
	}
	// Churn bounds: rendezvous and random one member per backend added or
	// removed (30 or 33: the whole subset, so the means say more: each of
	// the 30 new backends is among a client's 30 highest of 330 with
	// probability 30/330, 2.7 expected; each of the 33 leaving was in a
	// subset of 30 of 330 with probability 30/330, 3.0), the ring two.
	for _, name := range []string{"rendezvous", "random"} {
		s := get(name)
		assert.InDelta(t, 30.0*30/330, s.UpChurn.Mean, 0.5, name)
		assert.InDelta(t, 33.0*30/330, s.DownChurn.Mean, 0.5, name)
	}
	assert.LessOrEqual(t, get("ring").UpChurnMax.Mean, 30.0)
	assert.Less(t, get("ring").UpChurn.Mean, 8.0)
	assert.Less(t, get("ring").DownChurn.Mean, 8.0)
	// The SRE algorithm redraws its subsets: most members change.
	assert.Greater(t, get("deterministic").UpChurn.Mean, 20.0)
	assert.Greater(t, get("deterministic").DownChurn.Mean, 20.0)
	// Without subsetting a client loses exactly the backends that leave.
	assert.Zero(t, get("none").UpChurn.Mean)
	assert.Equal(t, 33.0, get("none").DownChurn.Mean)
}

func TestCompareSubsets_invalid(t *testing.T) {
	for _, f := range []SubsetFleet{{}, {Clients: 1, Backends: 1, Size: 1, Down: 1, Load: 0.5, Steady: 1, Phase: 1}} {
		_, err := CompareSubsets(f, SubsetPolicies(), Options{})
		assert.ErrorIs(t, err, ErrInvalid)
	}
}
