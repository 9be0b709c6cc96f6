//go:build race

package balancer

// underRace reports whether the race detector is on. A test that runs one
// goroutine on a fake clock gains nothing from it and may run smaller
// under it (the plain run keeps its full size).
const underRace = true
