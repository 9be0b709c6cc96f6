package balancerflag

import (
	"bytes"
	"flag"
	"io"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/internal/flagtest"
)

// build registers the flags on a new FlagSet, parses args and builds the
// picker over two peers, as a command would.
func build(args []string) (string, func(), error) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := Register(fs, "SmoothWRR")
	if err := fs.Parse(args); err != nil {
		return "", nil, err
	}
	p, err := f.New([]*balancer.Peer{balancer.NewPeer("127.0.0.1:1"), balancer.NewPeer("127.0.0.1:2")})
	if err != nil {
		return "", nil, err
	}
	return f.String(), func() {
		if c, ok := p.(io.Closer); ok {
			c.Close()
		}
	}, nil
}

// TestOptionFlags_table: the flags set the options flagtest.Options says
// they set, and every flag has its row there.
func TestOptionFlags_table(t *testing.T) {
	var names []string
	for _, f := range optionFlags {
		names = append(names, f.name)
		row, ok := flagtest.Options[f.name]
		if assert.True(t, ok, "-%s has no row in flagtest.Options", f.name) {
			assert.Equal(t, row.Option, f.option, "-%s", f.name)
		}
	}
	for name := range flagtest.Options {
		assert.Contains(t, names, name, "flagtest.Options names -%s, which is no flag", name)
	}
}

// TestOptionFlags: each option flag reaches its option in every picker that
// takes it.
func TestOptionFlags(t *testing.T) {
	flagtest.OptionFlags(t, build)
}

// TestEveryOption: every option a picker of the registry takes has its
// flag, but those a flag cannot give: WithRand (the picker seeds itself),
// WithProber (built from -probe-path and -probe-timeout), WithClock and
// WithEvents (a program's), and WithSuccessRateEjection (a struct of
// settings; a program sets it).
func TestEveryOption(t *testing.T) {
	flagged := map[string]bool{"WithRand": true, "WithProber": true}
	for _, f := range optionFlags {
		flagged[f.option] = true
	}
	for _, a := range balancer.Algorithms() {
		for _, o := range a.Options {
			assert.True(t, flagged[o], "%s takes %s, which no flag sets", a.Name, o)
		}
	}
}

// TestTakes: the pickers an option flag is offered to are those the test
// package derives from the registry.
func TestTakes(t *testing.T) {
	for _, f := range optionFlags {
		for _, a := range balancer.Algorithms() {
			assert.Equal(t, flagtest.Takes(a, f.option), takes(a, f.option), "%s, -%s", a.Name, f.name)
		}
	}
}

func TestNew_badFlags(t *testing.T) {
	flagtest.RunBadFlags(t, build)
}

func TestNew_needs(t *testing.T) {
	flagtest.Needs(t, build)
}

// TestPrintPickers: the FlagSet's defaults and PrintPickers make the -h
// that flagtest expects.
func TestPrintPickers(t *testing.T) {
	var out bytes.Buffer
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.SetOutput(&out)
	f := Register(fs, "SmoothWRR")
	fs.Usage = func() {
		fs.PrintDefaults()
		f.PrintPickers(fs.Output())
	}
	require.ErrorIs(t, fs.Parse([]string{"-h"}), flag.ErrHelp)
	flagtest.Usage(t, out.String())
	assert.Contains(t, out.String(), "balancing algorithm, any case: RoundRobin, SmoothWRR")
	assert.Contains(t, out.String(), `(default "SmoothWRR")`)
}

// TestNew_misuse: New before Parse is an error, not a picker of defaults;
// the program's own flags are not taken for the picker's; the program's
// options follow the flags' and reach the picker.
func TestNew_misuse(t *testing.T) {
	peers := func() []*balancer.Peer { return []*balancer.Peer{balancer.NewPeer("127.0.0.1:1")} }
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	f := Register(fs, "LeastConn")
	_, err := f.New(peers())
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "before the flags are parsed")
	assert.Empty(t, f.String())

	fs = flag.NewFlagSet("cmd", flag.ContinueOnError)
	fs.String("listen", "", "")
	f = Register(fs, "LeastConn")
	require.NoError(t, fs.Parse([]string{"-listen", "x", "-reported-load", "10s,4"}))
	p, err := f.New(peers())
	require.NoError(t, err)
	assert.Implements(t, (*balancer.Balancer)(nil), p)
	assert.Equal(t, "LeastConn (-reported-load 10s,4); it needs with -reported-load, load reports: each backend's responses carry endpoint-load-metrics (loadreport's Middleware); without them the option changes nothing", f.String())
	assert.Nil(t, f.Key(), "LeastConn takes no key")

	// An option of the program's that LeastConn does not take is refused
	// by LeastConn: the options reached it.
	_, err = f.New(peers(), balancer.WithDecay(1))
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithDecay")
	// One it takes, after the flag's own: the last of two WithReportedLoad
	// is the one refused.
	_, err = f.New(peers(), balancer.WithReportedLoad(0, 4))
	require.ErrorIs(t, err, balancer.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithReportedLoad(0s, 4)")
}

// TestKey: Key reads -hash-key from each request for a keyed picker, and
// is nil for the others (IPHash hashes the client's address).
func TestKey(t *testing.T) {
	tests := []struct {
		args  []string
		keyed bool
	}{
		{[]string{"-algo", "Hash", "-hash-key", "$http_x_user"}, true},
		{[]string{"-algo", "consistenthash", "-hash-key", "$http_x_user"}, true},
		{[]string{"-algo", "IPHash"}, false},
		{[]string{"-algo", "RoundRobin"}, false},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		f := Register(fs, "SmoothWRR")
		require.NoError(t, fs.Parse(tt.args))
		_, err := f.New([]*balancer.Peer{balancer.NewPeer("127.0.0.1:1")})
		require.NoError(t, err, "%v", tt.args)
		if !tt.keyed {
			assert.Nil(t, f.Key(), "%v", tt.args)
			continue
		}
		require.NotNil(t, f.Key(), "%v", tt.args)
		r := httptest.NewRequest("GET", "http://backends/x", nil)
		r.Header.Set("X-User", "ann")
		assert.Equal(t, "ann", f.Key()(r), "%v", tt.args)
	}
}

// TestOurs: the flags Register defines are exactly those New reads.
func TestOurs(t *testing.T) {
	fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
	Register(fs, "SmoothWRR")
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		names = append(names, f.Name)
		assert.True(t, ours(f.Name), "-%s", f.Name)
	})
	assert.Len(t, names, len(optionFlags)+4)
	assert.False(t, ours("listen"))
	assert.True(t, slices.Contains(names, "algo"))
}

// TestOptionFlags_exponentZero: -exponent 0 still means what
// WithExponent(0) meant, weights that ignore latency, though a zero field
// of FastestFirstSettings is its default. a answers in 10 ms and b in
// 100 ms, once each: b's derived weight is 100 × (3·10/100)^α, 9 at α = 2
// (the default, and -exponent 2), 100 at α = 0.
func TestOptionFlags_exponentZero(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		wantB int
	}{
		{nil, 9},
		{[]string{"-exponent", "2"}, 9},
		{[]string{"-exponent", "0"}, 100},
	} {
		fs := flag.NewFlagSet("cmd", flag.ContinueOnError)
		f := Register(fs, "FastestFirst")
		require.NoError(t, fs.Parse(tt.args))
		now := time.Unix(1000, 0)
		a, b := balancer.NewPeer("a"), balancer.NewPeer("b")
		p, err := f.New([]*balancer.Peer{a, b}, balancer.WithClock(func() time.Time { return now }))
		require.NoError(t, err)
		latency := map[*balancer.Peer]time.Duration{a: 10 * time.Millisecond, b: 100 * time.Millisecond}
		for range 2 {
			peer, err := p.Pick(nil)
			require.NoError(t, err)
			now = now.Add(latency[peer])
			require.NoError(t, p.Done(peer, balancer.Outcome{Latency: latency[peer]}))
		}
		assert.Equal(t, 100, a.Stats().DerivedWeight, "%v", tt.args)
		assert.Equal(t, tt.wantB, b.Stats().DerivedWeight, "%v", tt.args)
	}
}
