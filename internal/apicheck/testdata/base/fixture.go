// Package fixture is the library whose API the tests check.
package fixture

// Keep stays in every version.
func Keep() int { return 1 }

// Drop is removed by the incompatible change.
func Drop() int { return 2 }
