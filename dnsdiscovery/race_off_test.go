//go:build !race

package dnsdiscovery

const raceEnabled = false
