//go:build race

package balancerhttp_test

// raceSlowdown scales the patience of the real-time tests: the race
// detector slows the fast path some 5 to 10 times, and the thresholds rest
// on the ratio of patience to fast replies.
const raceSlowdown = 5
