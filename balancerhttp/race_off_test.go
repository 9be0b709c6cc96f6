//go:build !race

package balancerhttp_test

// raceSlowdown: see race_on_test.go.
const raceSlowdown = 1
