package balancer

import (
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSettings_wrongPickerDoesNotCompile type-checks small programs
// against this package, as built by the go command (go list -export): a
// setting of one picker handed to another, or a retry budget handed to a
// picker, is a compile error, and the control, the same program with each
// setting where it belongs, compiles.
func TestSettings_wrongPickerDoesNotCompile(t *testing.T) {
	out, err := exec.Command("go", "list", "-export", "-f", "{{.ImportPath}} {{.Export}}", "-deps", ".", "context", "time").Output()
	require.NoError(t, err, "go list -export")
	exports := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, file, _ := strings.Cut(l, " ")
		exports[path] = file
	}
	require.NotEmpty(t, exports["github.com/lbgo/balancer"], "no export data for the package")

	// program is a client with body in its function, which has peers, a
	// picker lb, a budget and a try function at hand.
	program := func(body string) string {
		return `package client

import (
	"context"
	"time"

	"github.com/lbgo/balancer"
)

func client(ctx context.Context, peers []*balancer.Peer, lb balancer.Picker, budget balancer.Budget, try func(context.Context, *balancer.Peer) error) {
	_, _, _ = ctx, time.Second, try
` + body + `
}
`
	}
	for _, tt := range []struct {
		name, body string
		want       string // the one compile error, "" for none
	}{
		{name: "control: each setting on its picker", body: `
	_, _ = balancer.FastestFirstSettings{Band: 2, Exponent: 1, Floor: 5, Tolerance: 2}.New(peers, balancer.WithClock(time.Now))
	_, _ = balancer.PrequalSettings{ProbesPerPick: 2, ProbesPerSecond: 100, PoolSize: 8, MaxAge: time.Second, HotQuantile: 0.5}.New(peers)
	_, _ = balancer.ReportedWRRSettings{BlackoutPeriod: -1, WeightExpirationPeriod: time.Minute, WeightUpdatePeriod: time.Second, ErrorUtilizationPenalty: 2}.New(peers)
	_, _ = balancer.ConsistentHashSettings{BoundedLoad: 1.25}.New(peers)
	_, _ = balancer.RandomWeightedSettings{Warmup: time.Minute}.New(peers)
	_ = (&balancer.Attempts{Picker: lb, Budget: budget, Now: time.Now}).Do(ctx, try)`},
		{name: "FastestFirst's band in Prequal's settings", body: `
	_, _ = balancer.PrequalSettings{Band: 2}.New(peers)`,
			want: "unknown field Band in struct literal of type balancer.PrequalSettings"},
		{name: "Prequal's probes in FastestFirst's settings", body: `
	_, _ = balancer.FastestFirstSettings{ProbesPerPick: 3}.New(peers)`,
			want: "unknown field ProbesPerPick in struct literal of type balancer.FastestFirstSettings"},
		{name: "Prequal's settings handed to FastestFirst", body: `
	_, _ = balancer.FastestFirstSettings{}.New(peers, balancer.PrequalSettings{HotQuantile: 0.5})`,
			want: "cannot use balancer.PrequalSettings{…} (value of struct type balancer.PrequalSettings) as balancer.Option value"},
		{name: "ConsistentHash's bound on Hash", body: `
	_, _ = balancer.NewHash(peers, balancer.ConsistentHashSettings{BoundedLoad: 2})`,
			want: "cannot use balancer.ConsistentHashSettings{…} (value of struct type balancer.ConsistentHashSettings) as balancer.Option value"},
		{name: "a retry budget handed to a picker", body: `
	_, _ = balancer.NewLeastConn(peers, budget)`,
			want: "cannot use budget (variable of interface type balancer.Budget) as balancer.Option value"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, "client.go", program(tt.body), 0)
			require.NoError(t, err)
			var errs []string
			conf := types.Config{
				Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
					if exports[path] == "" {
						return nil, fmt.Errorf("no export data for %q", path)
					}
					return os.Open(exports[path])
				}),
				Error: func(err error) { errs = append(errs, err.Error()) },
			}
			_, _ = conf.Check("client", fset, []*ast.File{f}, nil)
			if tt.want == "" {
				assert.Empty(t, errs, "the control compiles")
				return
			}
			require.Len(t, errs, 1, "one compile error: %q", errs)
			assert.Contains(t, errs[0], tt.want)
		})
	}
}
