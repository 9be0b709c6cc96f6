//go:build race

package grpcbalancer

// raceEnabled reports whether the race detector is on: the end-to-end
// tests that would take long under it send fewer RPCs.
const raceEnabled = true
