package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// newPicker is the constructor shape every picker shares.
type newPicker func([]*balancer.Peer, ...balancer.Option) (balancer.Picker, error)

// as adapts a constructor returning a concrete picker type to newPicker.
func as[P balancer.Picker](f func([]*balancer.Peer, ...balancer.Option) (P, error)) newPicker {
	return func(peers []*balancer.Peer, opts ...balancer.Option) (balancer.Picker, error) {
		p, err := f(peers, opts...)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

// algos are the -algo values. A seeded picker gets -seed through WithRand
// (RoundRobin draws where its rotation starts, RandomWeighted every pick);
// every picker gets a clock that never moves.
var algos = map[string]struct {
	new    newPicker
	seeded bool
}{
	"smooth":     {new: as(balancer.NewSmoothWRR)},
	"classic":    {new: as(balancer.NewClassicWRR)},
	"roundrobin": {new: as(balancer.NewRoundRobin), seeded: true},
	"random":     {new: as(balancer.NewRandomWeighted), seeded: true},
}

// epoch is the time on the clock that never moves. Like nginx in the
// recorded cases, a trace runs far inside every fail_timeout.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// chunk is how many requests are traced between writes, to bound memory
// for a large -n; the picker keeps its state across chunks.
const chunk = 1 << 12

// traceFlags are the flags of balance trace.
type traceFlags struct {
	algo, fail string
	n          int
	seed       uint64
	set        map[string]bool // the flags given on the command line
}

// newTraceFlags defines the flags of balance trace on a new flag set.
func newTraceFlags(stderr io.Writer) (*flag.FlagSet, *traceFlags) {
	names := slices.Sorted(maps.Keys(algos))
	var seeded []string
	for _, name := range names {
		if algos[name].seeded {
			seeded = append(seeded, name)
		}
	}
	f := &traceFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.algo, "algo", "smooth", "balancing algorithm: "+strings.Join(names, ", "))
	fs.IntVar(&f.n, "n", 0, "number of requests (default one full cycle: the sum of the weights\nof the primary servers that are not down)")
	fs.StringVar(&f.fail, "fail", "", "comma-separated servers that fail every attempt, like a closed port")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed, for -algo "+strings.Join(seeded, " or "))
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: balance trace [-algo %s] [-n N] [-fail ADDR,...] [-seed S] [FILE]\n\n", strings.Join(names, "|"))
		fmt.Fprintf(stderr, "Reads one nginx upstream block from FILE or standard input (FILE - or none)\nand prints the servers each request tries, as nginx logs $upstream_addr.\n\n")
		fs.PrintDefaults()
	}
	return fs, f
}

func runTrace(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, f := newTraceFlags(stderr)
	files, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	a, known := algos[f.algo]
	switch {
	case err != nil:
		return 2 // the flag package has printed the error and the usage
	case len(files) > 1:
		return usageError(fs, "at most one FILE, got %d", len(files))
	case !known:
		return usageError(fs, "unknown -algo %q", f.algo)
	case f.n < 0:
		return usageError(fs, "negative -n %d", f.n)
	case f.set["seed"] && !a.seeded:
		return usageError(fs, "-seed does not apply to -algo %s", f.algo)
	}

	name, src, err := readInput(files, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "balance trace: %v\n", err)
		return 1
	}
	b, err := upstream.Parse(name, src)
	if err != nil {
		fmt.Fprintln(stderr, err) // FILE:LINE: message
		return 1
	}
	failing, err := failSet(b, f.fail)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	opts := []balancer.Option{balancer.WithClock(func() time.Time { return epoch })}
	if a.seeded {
		opts = append(opts, balancer.WithRand(rand.NewPCG(f.seed, 0)))
	}
	p, err := a.new(b.Peers(), opts...)
	if err != nil {
		fmt.Fprintf(stderr, "balance trace: %v\n", err)
		return 1
	}
	if !f.set["n"] {
		f.n = cycle(b)
	}
	return writeTrace(p, b.Name, f.n, failing, stdout, stderr)
}

// parseInterleaved parses flags placed before or after the file name and
// returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func usageError(fs *flag.FlagSet, format string, args ...any) int {
	fmt.Fprintf(fs.Output(), "balance trace: "+format+"\n", args...)
	fs.Usage()
	return 2
}

// readInput reads the named file, or standard input for "-" or no name.
func readInput(files []string, stdin io.Reader) (string, []byte, error) {
	if len(files) == 0 || files[0] == "-" {
		src, err := io.ReadAll(stdin)
		return "<stdin>", src, err
	}
	src, err := os.ReadFile(files[0])
	return files[0], src, err
}

// failSet turns -fail into a predicate, checking that each address names a
// server of b, since a typo would otherwise fail nothing.
func failSet(b *upstream.Block, list string) (func(string) bool, error) {
	set := map[string]bool{}
	for _, addr := range strings.Split(list, ",") {
		if addr = strings.TrimSpace(addr); addr != "" {
			set[addr] = true
		}
	}
	for addr := range set {
		if !slices.ContainsFunc(b.Servers, func(s upstream.Server) bool { return s.Addr == addr }) {
			return nil, fmt.Errorf("-fail: no server %q in upstream %q", addr, b.Name)
		}
	}
	return func(addr string) bool { return set[addr] }, nil
}

// cycle returns the length of one full smooth cycle: the sum of the weights
// of the primary servers that are not down, at least 1.
func cycle(b *upstream.Block) int {
	sum := 0
	for _, s := range b.Servers {
		if !s.Backup && !s.Down {
			sum += s.Weight
		}
	}
	return max(sum, 1)
}

func writeTrace(p balancer.Picker, name string, n int, failing func(string) bool, stdout, stderr io.Writer) int {
	w := bufio.NewWriter(stdout)
	for left := n; left > 0; left -= chunk {
		lines, err := upstream.Trace(p, name, min(left, chunk), failing)
		for _, l := range lines {
			w.WriteString(l)
			w.WriteByte('\n')
		}
		if err != nil {
			w.Flush()
			fmt.Fprintf(stderr, "balance trace: %v\n", err)
			return 1
		}
	}
	if err := w.Flush(); err != nil {
		fmt.Fprintf(stderr, "balance trace: %v\n", err)
		return 1
	}
	return 0
}
