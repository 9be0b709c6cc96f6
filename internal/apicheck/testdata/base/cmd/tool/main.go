// Command tool is a program: its API is not checked.
package main

// Exported is removed by the compatible change, unreported.
func Exported() {}

func main() {}
