// Package hidden is internal: its API is not checked.
package hidden

// Hidden is removed by the compatible change, unreported.
func Hidden() {}
