// Package hidden is internal: its API is not checked.
package hidden
