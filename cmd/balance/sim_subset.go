package main

import (
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/lbgo/balancer/sim"
)

// runSubsetSim runs the subsetting comparison (sim.CompareSubsets) for
// balance sim -scenario subset300: the fleet is the SRE book's, the
// subsettings its rows, so only the seeds, the format and -j apply.
func runSubsetSim(set map[string]string, scenarios string, seeds int, seed uint64, parallel int, markdown bool, stdout, stderr io.Writer, bad func(name, format string, args ...any) int) int {
	if scenarios != sim.SubsetScenario {
		return bad("scenario", "%s runs alone: its rows are subsettings, not pickers", sim.SubsetScenario)
	}
	for _, name := range slices.Sorted(maps.Keys(set)) {
		switch name {
		case "scenario", "seeds", "seed", "format", "j":
		default:
			return bad(name, "does not apply to %s (only -seeds, -seed, -format and -j do)", sim.SubsetScenario)
		}
	}
	rep, err := sim.CompareSubsets(sim.DefaultSubsetFleet(), sim.SubsetPolicies(), sim.Options{Seeds: seeds, Seed: seed, Parallel: parallel})
	if err == nil {
		err = rep.Write(stdout, markdown)
	}
	if err != nil {
		fmt.Fprintf(stderr, "balance sim: %v\n", err)
		return 1
	}
	return 0
}
