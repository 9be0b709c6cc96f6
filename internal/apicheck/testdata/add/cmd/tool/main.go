// Command tool is a program: its API is not checked.
package main

func main() {}
