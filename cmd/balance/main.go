// Command balance shows how the balancer package's pickers spread requests,
// over the servers of an nginx upstream block or a simulated cluster.
//
// Usage:
//
//	balance trace [-algo NAME] [-upstream NAME] [-n N] [-keys FILE] [-fail ADDR,...] [-seed S] [FILE]
//	balance sim [flags]
//
// trace reads nginx `upstream NAME { ... }` blocks, bare or inside
// `http { ... }`, from FILE or standard input, and prints, for each request
// to the block -upstream names (or the only one), the servers it tried,
// joined by ", ", as nginx logs $upstream_addr. The block's balancing method
// chooses the picker unless -algo does. sim compares the pickers on simulated clusters
// with a virtual clock. Run "balance COMMAND -h" for a command's flags.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

const usage = `usage: balance COMMAND [flags] [args]

commands:
  trace   print the servers each request tries, as nginx logs $upstream_addr
  sim     compare the pickers on simulated clusters with a virtual clock

Run "balance COMMAND -h" for a command's flags.
`

// run runs the command line args (without the program name) and returns
// the exit status: 0 on success, 1 for bad input, 2 for bad usage.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "trace":
		return runTrace(args[1:], stdin, stdout, stderr)
	case "sim":
		return runSim(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "balance: unknown command %q\n\n%s", args[0], usage)
	return 2
}
