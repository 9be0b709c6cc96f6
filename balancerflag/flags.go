// Package balancerflag gives an HTTP command the balancer's picker as
// flags: -algo, one flag for each picker option, Prequal's probe flags and
// nginx's hash key. Register defines them on a flag.FlagSet; after Parse,
// New builds the picker they describe, Key returns the key for
// balancerhttp's Transport.Key or Proxy.Key, and PrintPickers writes, for
// -h, each picker's flags and what it needs from the servers. The
// repository's examples/reverseproxy and examples/httpclient are built on
// it.
//
// The flags live here rather than in the registry (balancer.Algorithm):
// reading an option from text, a flag's name and help, the HTTP prober
// that Prequal's flags configure and nginx's key syntax are a command's
// concerns, and the balancer package knows no command line; its registry
// stays typed. A package of its own is also one a program can import
// whole, where a copy of the examples' code would drift from the options.
package balancerflag

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/balancerhttp"
	"github.com/lbgo/balancer/loadreport"
)

// Flags is a picker's flags on one FlagSet. Each option flag's value is the
// option's arguments, comma-separated, in the order the option takes them:
// -reported-load 10s,16 is balancer.WithReportedLoad(10*time.Second, 16).
// A flag not given leaves its option out, so the picker keeps the
// library's default. -hash-key is nginx's hash key (see Key), required by
// Hash and ConsistentHash and refused by the others; -probe-path and
// -probe-timeout configure the balancerhttp.Prober of the pickers that
// probe (Prequal), which New builds for them.
//
// Use a Flags from one goroutine: Register, the FlagSet's Parse, then
// New, Key and String.
type Flags struct {
	fs           *flag.FlagSet
	algo         *string
	hashKey      *string
	probePath    *string
	probeTimeout *time.Duration

	// Set by New.
	key     func(*http.Request) string
	summary string
}

// The flags that are not option flags, by name.
const (
	algoFlag         = "algo"
	hashKeyFlag      = "hash-key"
	probePathFlag    = "probe-path"
	probeTimeoutFlag = "probe-timeout"
)

// Register defines on fs -algo (defaultAlgo when not given, in any case),
// one flag for each picker option of the library, -hash-key, -probe-path
// and -probe-timeout, and returns them. fs must not define any of these
// already: the flag package panics on a name defined twice, as it does
// for any program.
func Register(fs *flag.FlagSet, defaultAlgo string) *Flags {
	f := &Flags{fs: fs}
	f.algo = fs.String(algoFlag, defaultAlgo, "balancing algorithm, any case: "+algorithmNames())
	f.hashKey = fs.String(hashKeyFlag, "", "Hash and ConsistentHash: each request's key, nginx's hash key ($http_x_user, $cookie_session, $arg_id, $remote_addr, $host, $uri, $request_uri, $args, and text)")
	f.probePath = fs.String(probePathFlag, loadreport.DefaultProbePath, "Prequal: the path each probe GETs")
	f.probeTimeout = fs.Duration(probeTimeoutFlag, balancerhttp.DefaultProbeTimeout, "Prequal: each probe's bound")
	for _, o := range optionFlags {
		fs.String(o.name, "", fmt.Sprintf("`%s` of balancer.%s: %s (%s)", o.args, o.option, o.usage, pickersOf(o.option)))
	}
	return f
}

// New builds the picker the parsed flags describe over peers, with the
// options of the flags given followed by opts (the program's own, such as
// WithEvents). A picker that probes owns the Prober New builds for it and
// closes it when closed (the picker is then an io.Closer). An error names
// the flag, or is the picker's refusal naming the option and the value:
// it wraps balancer.ErrUnknownAlgorithm for -algo, else
// balancer.ErrInvalidConfig. New before the FlagSet is parsed is an error.
func (f *Flags) New(peers []*balancer.Peer, opts ...balancer.Option) (balancer.Balancer, error) {
	if !f.fs.Parsed() {
		return nil, fmt.Errorf("balancerflag: New before the flags are parsed: %w", balancer.ErrInvalidConfig)
	}
	a, err := balancer.AlgorithmNamed(*f.algo)
	if err != nil {
		return nil, fmt.Errorf("-algo: %w", err)
	}
	set := f.given()
	own, err := options(a, set)
	if err != nil {
		return nil, err
	}
	var key func(*http.Request) string
	switch keyed := takesKey(a); {
	case keyed && *f.hashKey == "":
		return nil, fmt.Errorf("-hash-key is required with -algo %s (nginx's hash takes a key: $http_x_user, say): %w", a.Name, balancer.ErrInvalidConfig)
	case !keyed && *f.hashKey != "":
		return nil, fmt.Errorf("-hash-key: -algo %s takes no key (Hash and ConsistentHash do; IPHash hashes the client's address): %w", a.Name, balancer.ErrInvalidConfig)
	case keyed:
		if key, err = parseKey(*f.hashKey); err != nil {
			return nil, err
		}
	}
	_, probeFlags := set[probePathFlag]
	if _, ok := set[probeTimeoutFlag]; ok {
		probeFlags = true
	}
	var prober *balancerhttp.Prober
	switch probing := slices.Contains(a.Options, "WithProber"); {
	case probing:
		prober, err = balancerhttp.NewProber(balancerhttp.WithProbePath(*f.probePath), balancerhttp.WithProbeTimeout(*f.probeTimeout))
		if err != nil {
			return nil, fmt.Errorf("-probe-path, -probe-timeout: %w", err)
		}
		own = append(own, balancer.PrequalSettings{Prober: prober}.Option())
	case probeFlags:
		return nil, fmt.Errorf("-probe-path, -probe-timeout: -algo %s sends no probes (%s does): %w", a.Name, pickersOf("WithProber"), balancer.ErrInvalidConfig)
	}
	picker, err := a.New(peers, append(own, opts...)...)
	if err != nil {
		if prober != nil {
			prober.Close()
		}
		return nil, err
	}
	summary := a.Name
	var given []string
	for _, o := range optionFlags {
		if v, ok := set[o.name]; ok {
			given = append(given, "-"+o.name+" "+v)
		}
	}
	if len(given) > 0 {
		summary += " (" + strings.Join(given, ", ") + ")"
	}
	if n := needs(a, set); n != "" {
		summary += "; it needs " + n
	}
	f.key, f.summary = key, summary
	return picker, nil
}

// Key returns the request's key of -hash-key, for balancerhttp's
// Transport.Key or Proxy.Key, after New has built a picker that takes a
// key (Hash, ConsistentHash); nil otherwise. The key is nginx's: text and
// the variables $http_NAME (a header, "_" for "-"), $cookie_NAME,
// $arg_NAME, $remote_addr, $host, $uri, $request_uri and $args, read as
// nginx reads them; in a client's request $remote_addr is empty and $host
// the URL's. The function is safe for concurrent use.
func (f *Flags) Key() func(*http.Request) string { return f.key }

// String names the picker New built, the option flags given and what the
// picker needs from the servers ("LeastConn (-reported-load 10s,16); it
// needs load reports..."), for a program's log line at start; "" before
// New has built one.
func (f *Flags) String() string { return f.summary }

// PrintPickers writes, for a program's -h after the FlagSet's defaults,
// each picker with the flags it takes (besides the guards', which every
// picker takes) and what it needs from the servers.
func (f *Flags) PrintPickers(w io.Writer) {
	fmt.Fprintln(w, "\nPickers, the option flags each takes besides the guards, and what each needs from the servers:")
	for _, a := range balancer.Algorithms() {
		var own []string
		for _, o := range optionFlags {
			if slices.Contains(a.Options, o.option) {
				own = append(own, "-"+o.name)
			}
		}
		if takesKey(a) {
			own = append(own, "-hash-key (required)")
		}
		if slices.Contains(a.Options, "WithProber") {
			own = append(own, "-probe-path", "-probe-timeout")
		}
		line := "  " + a.Name
		if len(own) > 0 {
			line += ": " + strings.Join(own, " ")
		}
		if n := needs(a, map[string]string{"reported-load": ""}); n != "" {
			line += "\n      needs " + n
		}
		fmt.Fprintln(w, line)
	}
}

// given returns the values of this package's flags that were set on the
// command line, by name.
func (f *Flags) given() map[string]string {
	set := map[string]string{}
	f.fs.Visit(func(fl *flag.Flag) {
		if ours(fl.Name) {
			set[fl.Name] = fl.Value.String()
		}
	})
	return set
}

// ours reports whether Register defines the flag called name.
func ours(name string) bool {
	switch name {
	case algoFlag, hashKeyFlag, probePathFlag, probeTimeoutFlag:
		return true
	}
	return slices.ContainsFunc(optionFlags, func(o optionFlag) bool { return o.name == name })
}

// takesKey reports whether a routes by the request's key, which -hash-key
// gives: IPHash, keyed too, hashes the client's address instead.
func takesKey(a balancer.Algorithm) bool {
	return a.Keyed && a.Name != "IPHash"
}

// pickersOf names the pickers that take the option.
func pickersOf(option string) string {
	if t := takers(option); strings.Count(t, ",") < len(balancer.Algorithms())-1 {
		return t
	}
	return "every picker"
}

// algorithmNames returns the library's pickers' names, comma-separated,
// for -algo's help.
func algorithmNames() string {
	var names []string
	for _, a := range balancer.Algorithms() {
		names = append(names, a.Name)
	}
	return strings.Join(names, ", ")
}
