package capacity

import "context"

// Runs is the most runs RunChecked makes.
const Runs = 3

// RunChecked is Run over the fleets build makes, run again (with fleets
// built afresh) while a fleet of checked misses its capacity shares
// (ShareTol), at most Runs runs in all. A run whose window came short of
// its requests (Result.Short) is returned at once: the shares tell
// nothing, and the machine that starved it is seldom quieter seconds
// later (under -race beside three CPU hogs and other builds, 6 reruns of
// 6 short runs were short again, 17 s each). It returns the last run's
// results; a caller checks the shares only if that run was not short.
// Each rerun is logged with what missed.
//
// Why a miss is run again: with the windows counted in requests, three
// CPU hogs beside other builds left every first run of 24 within the
// tolerance (worst 6.6 points), but a run in which the process got almost
// no CPU for part of a window (a client began 19 requests in 2.5 s) put
// one client's medium at 5%; a picker that does not follow capacity
// misses every run.
func RunChecked(ctx context.Context, logf func(string, ...any), build func() []*Fleet, checked []int, ph Phases) []Result {
	for run := 1; ; run++ {
		results := Run(ctx, build(), ph)
		var miss []string
		for _, i := range checked {
			r := results[i]
			miss = append(miss, ShareMisses(r.Before, SharesBefore, ShareTol)...)
			miss = append(miss, ShareMisses(r.After, SharesAfter, ShareTol)...)
		}
		if len(miss) == 0 || (len(results) > 0 && results[0].Short) || run == Runs || ctx.Err() != nil {
			return results
		}
		logf("run %d of at most %d: shares missed %v: run again", run, Runs, miss)
	}
}
