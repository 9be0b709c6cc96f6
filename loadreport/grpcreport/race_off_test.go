//go:build !race

package grpcreport_test

// raceEnabled reports a -race build, whose detector slows the calls some
// 5 to 10 times.
const raceEnabled = false
