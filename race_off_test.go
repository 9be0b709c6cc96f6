//go:build !race

package balancer_test

// raceEnabled reports whether the race detector is on: the simulations
// that would take minutes under it skip.
const raceEnabled = false
