// Command apicheck compares the exported API of the root module's packages
// with the API baseline recorded in the repository, using
// golang.org/x/exp/apidiff, and fails on any incompatible change.
//
// The baseline is the file api/baseline: it names a version (v0.1.0), and
// the baseline commit is the commit that last changed that file. Moving the
// baseline is therefore one edit, made in the same commit as the change it
// accepts: that commit becomes the baseline, so an incompatible change passes
// exactly when its own commit moves the record. CHANGELOG.md must have a
// "## <version>" heading for the recorded version.
//
// Usage:
//
//	go run . [-repo DIR]
//
// It prints the compatible changes (additions) and the incompatible ones.
// Exit status: 0 when there is no incompatible change, 1 when there is one
// or CHANGELOG.md lacks the version, 2 when the check cannot run (bad flags,
// no git history to find the baseline in, a tree that does not load).
//
// It is a module of its own, neither a tool directive nor a test-only use in
// the library's go.mod: either of those would list golang.org/x/exp and
// golang.org/x/tools among the library's requirements, so every user's
// module graph and go.sum would carry them. Here they are pinned in this
// module's go.mod, which no user's build reads: a user of the library
// compiles none of it, and its version of x/exp is the one CI runs.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses of run.
const (
	exitOK           = 0
	exitIncompatible = 1
	exitCannotRun    = 2
)

// run is the whole command: it parses args, checks the repository and
// returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("apicheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	repo := fs.String("repo", ".", "a directory inside the git work tree to check")
	if err := fs.Parse(args); err != nil {
		return exitCannotRun
	}
	if fs.NArg() != 0 {
		fmt.Fprintf(stderr, "apicheck: unexpected argument %q\n", fs.Arg(0))
		fs.Usage()
		return exitCannotRun
	}
	c, err := check(*repo)
	if err != nil {
		fmt.Fprintf(stderr, "apicheck: %v\n", err)
		return exitCannotRun
	}
	return c.print(stdout, stderr)
}
