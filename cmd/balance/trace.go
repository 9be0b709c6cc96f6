package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/upstream"
)

// newPicker builds a picker over a block's servers.
type newPicker func(b *upstream.Block, opts ...balancer.Option) (balancer.Picker, error)

// fromPeers adapts a library constructor, which takes the block's peers
// and returns a concrete picker type, to newPicker.
func fromPeers[P balancer.Picker](f func([]*balancer.Peer, ...balancer.Option) (P, error)) newPicker {
	return func(b *upstream.Block, opts ...balancer.Option) (balancer.Picker, error) {
		p, err := f(b.Peers(), opts...)
		if err != nil {
			return nil, err
		}
		return p, nil
	}
}

// keyKind is what a picker reads from a request's -keys line.
type keyKind int

const (
	noKey   keyKind = iota // the picker takes no key; -keys only counts requests
	textKey                // Request.SetKey: hash's $arg_k, $request_uri, ...
	addrKey                // Request.SetClientAddr: ip_hash's client address
)

// pickerSpec is how balance trace builds and drives one picker.
type pickerSpec struct {
	name string // the registry's name
	new  newPicker
	// seeded pickers get -seed through WithRand (RoundRobin draws where
	// its rotation starts, RandomWeighted every pick).
	seeded bool
	// key is what each -keys line gives its request.
	key keyKind
	// noBackups pickers refuse backup servers, as nginx refuses them with
	// hash, ip_hash and random.
	noBackups bool
}

// specOf returns how balance trace drives the registry's algorithm called
// name, matched without regard to case. Every picker gets a clock that
// never moves.
func specOf(name string) (pickerSpec, error) {
	a, err := balancer.AlgorithmNamed(name)
	if err != nil {
		return pickerSpec{}, err
	}
	spec := pickerSpec{name: a.Name, new: fromPeers(a.New), seeded: a.Random, noBackups: a.NoBackups}
	switch {
	case a.Name == "IPHash":
		spec.key = addrKey
	case a.Keyed:
		spec.key = textKey
	}
	return spec, nil
}

// methods maps a block's balancing method, as methodKey writes it ("" for
// round robin), to the algorithm that traces it when no -algo is given. It
// is the one place to add a method.
var methods = map[string]string{
	"":                "SmoothWRR",
	"least_conn":      "LeastConn",
	"hash":            "Hash",
	"hash consistent": "ConsistentHash",
	"ip_hash":         "IPHash",
	"random":          "Random",
	"random two":      "RandomTwo",
}

// methodKey is m's entry in methods: its name, with "consistent" for hash
// and "two" for random when the directive says so. The hash key itself
// (hash KEY) is not part of it: -keys gives each request its value.
func methodKey(m upstream.Method) string {
	switch {
	case m.Name == "hash" && m.Consistent:
		return "hash consistent"
	case m.Name == "random" && m.Two:
		return "random two"
	}
	return m.Name
}

// epoch is the time on the clock that never moves. Like nginx in the
// recorded cases, a trace runs far inside every fail_timeout.
var epoch = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// chunk is how many requests are traced between writes, to bound memory
// for a large -n; the picker keeps its state across chunks.
const chunk = 1 << 12

// traceFlags are the flags of balance trace.
type traceFlags struct {
	algo, fail, upstream, keys string
	n                          int
	seed                       uint64
	set                        map[string]bool // the flags given on the command line
	usage                      func()          // prints the usage, for -h
}

// maxDefaultN bounds the default -n: one full cycle of a block whose
// weights sum to a billion would be a billion lines.
const maxDefaultN = 10000

// newTraceFlags defines the flags of balance trace on a new flag set.
func newTraceFlags(stderr io.Writer) (*flag.FlagSet, *traceFlags) {
	var names, seeded []string
	for _, a := range balancer.Algorithms() {
		names = append(names, a.Name)
		if a.Random {
			seeded = append(seeded, a.Name)
		}
	}
	f := &traceFlags{set: map[string]bool{}}
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.algo, "algo", "", "balancing algorithm, in any case: "+strings.Join(names, ", ")+"\n(default: the block's method: SmoothWRR for round robin, LeastConn for\nleast_conn, Hash, ConsistentHash, IPHash, Random or RandomTwo for hash,\nhash consistent, ip_hash, random and random two)")
	fs.StringVar(&f.upstream, "upstream", "", "the upstream block to trace, by name (default: the only one)")
	fs.IntVar(&f.n, "n", 0, fmt.Sprintf("number of requests (default: the number of -keys, else one full cycle,\nthe sum of the weights of the primary servers that are not down, but at\nmost %d: -n gives more)", maxDefaultN))
	fs.StringVar(&f.keys, "keys", "", "file of request keys, one per line, one request each: the value of\nhash's KEY for Hash and ConsistentHash (an empty line is an empty key,\nwhich nginx sends round robin), the client address for IPHash")
	fs.StringVar(&f.fail, "fail", "", "comma-separated servers that fail every attempt, like a closed port,\nas written or as logged (a or a:80)")
	fs.Uint64Var(&f.seed, "seed", 1, "random seed, for -algo "+strings.Join(seeded, " or "))
	fs.Usage = func() {} // a usage error prints a hint, -h the usage
	f.usage = func() {
		fmt.Fprintf(stderr, "usage: balance trace [-algo %s] [-upstream NAME] [-n N] [-keys FILE] [-fail ADDR,...] [-seed S] [FILE]\n\n", strings.Join(names, "|"))
		fmt.Fprintf(stderr, "Reads nginx upstream blocks, bare or inside http { }, from FILE or standard\ninput (FILE - or none) and prints the servers each request to one block\ntries, as nginx logs $upstream_addr.\n\n")
		fs.PrintDefaults()
	}
	return fs, f
}

func runTrace(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs, f := newTraceFlags(stderr)
	files, err := parseInterleaved(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		f.usage()
		return 0
	}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	var a pickerSpec
	var algoErr error
	if f.set["algo"] {
		a, algoErr = specOf(f.algo)
	}
	switch {
	case err != nil:
		fmt.Fprint(stderr, hint("trace")) // after the flag package's error
		return 2
	case len(files) > 1:
		return usageError(fs, "at most one FILE, got %d", len(files))
	case algoErr != nil:
		return usageError(fs, "-algo: %v", algoErr)
	case f.n < 0:
		return usageError(fs, "-n %d: negative", f.n)
	case f.set["algo"] && f.set["seed"] && !a.seeded:
		return usageError(fs, "-seed does not apply to -algo %s", f.algo)
	}

	name, src, err := readInput(files, stdin)
	if err != nil {
		fmt.Fprintf(stderr, "balance trace: %v\n", err)
		return 1
	}
	b, err := upstream.ParseNamed(name, src, f.upstream)
	if f.set["upstream"] && errors.Is(err, upstream.ErrNoUpstream) {
		// The flag names no block of a file that has some: name the
		// flag, and the blocks there are, rather than a line.
		if blocks, perr := upstream.ParseAll(name, src); perr == nil && len(blocks) > 0 {
			list := make([]string, len(blocks))
			for i, b := range blocks {
				list[i] = fmt.Sprintf("%q on line %d", b.Name, b.Line)
			}
			return usageError(fs, "-upstream %s: no such block in %s; there is %s", shown(f.upstream), name, strings.Join(list, ", "))
		}
	}
	if errors.Is(err, upstream.ErrManyUpstreams) {
		fmt.Fprintf(stderr, "%v with -upstream NAME\n", err)
		return 1
	}
	if err != nil {
		fmt.Fprintln(stderr, err) // FILE:LINE: message
		return 1
	}
	if !f.set["algo"] {
		name, ok := methods[methodKey(b.Method)]
		if !ok {
			fmt.Fprintf(stderr, "%s:%d: method %q is not supported by balance trace\n", b.File, b.Method.Line, b.Method.String())
			return 1
		}
		if a, err = specOf(name); err != nil {
			fmt.Fprintf(stderr, "balance trace: %v\n", err)
			return 1
		}
		if f.set["seed"] && !a.seeded {
			return usageError(fs, "-seed does not apply to %s", b.Method)
		}
	}
	keys, err := readKeys(f.keys)
	if err != nil {
		fmt.Fprintf(stderr, "balance trace: %v\n", err)
		return 1
	}
	switch {
	case !f.set["n"] && keys != nil:
		f.n = len(keys)
	case !f.set["n"]:
		f.n = min(cycle(b), maxDefaultN)
	case keys != nil && f.n > len(keys):
		return usageError(fs, "-n %d but %d keys in %s", f.n, len(keys), f.keys)
	}
	failing, err := failSet(b, f.fail)
	if err != nil {
		return usageError(fs, "%v", err)
	}
	if a.noBackups {
		// nginx refuses backup after hash, ip_hash and random, but accepts
		// a backup server written before the method directive.
		if i := slices.IndexFunc(b.Servers, func(s upstream.Server) bool { return s.Backup }); i >= 0 {
			s := b.Servers[i]
			fmt.Fprintf(stderr, "%s:%d: backup server %q: %s takes no backup servers, as nginx's hash, ip_hash and random methods do not\n", b.File, s.Line, s.Name, a.name)
			return 1
		}
	}
	keyOf, err := keyFunc(a.key, f.keys, keys)
	if err != nil {
		fmt.Fprintln(stderr, err) // FILE:LINE: message
		return 1
	}
	opts := []balancer.Option{balancer.WithClock(func() time.Time { return epoch })}
	if a.seeded {
		opts = append(opts, balancer.WithRand(rand.NewPCG(f.seed, 0)))
	}
	p, err := a.new(b, opts...)
	if err != nil {
		// Such as a total weight past what ConsistentHash's ring holds.
		fmt.Fprintf(stderr, "%s:%d: %v\n", b.File, b.Line, err)
		return 1
	}
	if c := cycle(b); !f.set["n"] && keys == nil && c > f.n {
		fmt.Fprintf(stderr, "balance trace: one cycle of upstream %q is %d requests; tracing the first %d (-n N for more)\n", b.Name, c, f.n)
	}
	return writeTrace(p, b.Name, f.n, failing, keyOf, stdout, stderr)
}

// keyFunc returns what gives request i its key from -keys (the file named
// file, read into keys): nil when kind is noKey or there is no -keys. For
// addrKey every line must be a client address, IPv4 or IPv6, as nginx's
// $remote_addr; the error for one that is not names the file and line.
func keyFunc(kind keyKind, file string, keys []string) (func(i int, r *balancer.Request), error) {
	if keys == nil {
		return nil, nil
	}
	switch kind {
	case textKey:
		return func(i int, r *balancer.Request) { r.SetKey(keys[i]) }, nil
	case addrKey:
		addrs := make([]netip.Addr, len(keys))
		for i, k := range keys {
			a, err := netip.ParseAddr(k)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: client address %q: want an IPv4 or IPv6 address such as 192.0.2.1 or 2001:db8::1", file, i+1, k)
			}
			addrs[i] = a
		}
		return func(i int, r *balancer.Request) { r.SetClientAddr(addrs[i]) }, nil
	}
	return nil, nil
}

// readKeys reads the -keys file: one key per line, lines ending at "\n",
// so an empty line is an empty key and a final "\n" ends the last key. It
// returns nil for no file.
func readKeys(file string) ([]string, error) {
	if file == "" {
		return nil, nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("-keys: %w", err)
	}
	keys := strings.SplitAfter(string(data), "\n")
	if keys[len(keys)-1] == "" {
		keys = keys[:len(keys)-1]
	}
	for i, k := range keys {
		keys[i] = strings.TrimSuffix(k, "\n")
	}
	return keys, nil
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
	fmt.Fprint(fs.Output(), hint("trace"))
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

// failSet turns -fail into a predicate on logged addresses. Each entry
// names a server as written (a) or as logged (a:80), and must name one,
// since a typo would otherwise fail nothing.
func failSet(b *upstream.Block, list string) (func(string) bool, error) {
	set := map[string]bool{}
	for _, entry := range strings.Split(list, ",") {
		if entry = strings.TrimSpace(entry); entry == "" {
			continue
		}
		i := slices.IndexFunc(b.Servers, func(s upstream.Server) bool { return s.Name == entry || s.Addr == entry })
		if i < 0 {
			return nil, fmt.Errorf("-fail: no server %q in upstream %q", entry, b.Name)
		}
		set[b.Servers[i].Addr] = true
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

// writeTrace traces n requests through p, in chunks, giving request i
// (from 0) its key through keyOf when keyOf is not nil.
func writeTrace(p balancer.Picker, name string, n int, failing func(string) bool, keyOf func(int, *balancer.Request), stdout, stderr io.Writer) int {
	w := bufio.NewWriter(stdout)
	for done := 0; done < n; done += chunk {
		var prepare func(int, *balancer.Request)
		if keyOf != nil {
			prepare = func(i int, r *balancer.Request) { keyOf(done+i, r) }
		}
		lines, err := upstream.TraceEach(p, name, min(n-done, chunk), failing, prepare)
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
