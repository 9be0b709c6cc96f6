// Package fixture is the library whose API the tests check.
package fixture

// Keep stays in every version.
func Keep() int { return 1 }
