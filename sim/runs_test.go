package sim

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

var (
	scenarioRunsMu sync.Mutex
	scenarioRunsOf = map[string]func() (map[string][]*Result, error){}
)

// scenarioRuns runs scenario name's policies over seeds (consecutive,
// from seeds[0]) and returns the scenario and each policy's runs by name.
// The runs are on the virtual clock, so the same every time: they are
// made once for all the tests that read them, which do not change them.
func scenarioRuns(t *testing.T, name string, seeds []uint64) (Scenario, map[string][]*Result) {
	t.Helper()
	sc, ok := Lookup(name)
	require.True(t, ok, "no scenario %s", name)
	key := fmt.Sprint(name, seeds)
	scenarioRunsMu.Lock()
	once, ok := scenarioRunsOf[key]
	if !ok {
		once = sync.OnceValues(func() (map[string][]*Result, error) {
			rep, err := Compare([]Scenario{sc}, Pickers(), Options{Seeds: len(seeds), Seed: seeds[0]})
			if err != nil {
				return nil, err
			}
			out := map[string][]*Result{}
			for _, m := range rep.Summaries[0] {
				out[m.Policy] = m.Runs
			}
			return out, nil
		})
		scenarioRunsOf[key] = once
	}
	scenarioRunsMu.Unlock()
	out, err := once()
	require.NoError(t, err)
	return sc, out
}
