package balancer

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAttempts_Run: the loop's decisions, over SmoothWRR with a (weight
// 3), b (2), c (1), which a fresh request tries in the order a, b, c
// (nginx's smooth order: a's current weight 3 leads, then b's 2+2 after
// a's 3+3-6, then c). Each try takes 4 ms on the fake clock; a verdict's
// own Latency (7 ms) is reported as given, a zero one as the 4 ms.
func TestAttempts_Run(t *testing.T) {
	errStop := errors.New("stop")
	fail := Verdict{Outcome: Outcome{Failed: true}, Retry: true}
	tests := []struct {
		name     string
		verdicts map[string]Verdict
		maxTries int
		budget   bool // a budget that refuses every retry
		gaveUpAt int  // GaveUp returns errStop from this pick on (1-based); 0: never
		want     []string
		wantErr  []error // errors.Is targets; none: nil
		wantText string
		picks    int
	}{
		{name: "first succeeds", verdicts: map[string]Verdict{"a": {}},
			want: []string{"a ok 4ms"}, picks: 1},
		{name: "retries until a success", verdicts: map[string]Verdict{"a": fail, "b": fail, "c": {}},
			want: []string{"a failed 4ms", "b failed 4ms", "c ok 4ms"}, picks: 3},
		{name: "every peer fails", verdicts: map[string]Verdict{"a": fail, "b": fail, "c": fail},
			want: []string{"a failed 4ms", "b failed 4ms", "c failed 4ms"}, wantErr: []error{ErrTriesExhausted}, picks: 3},
		{name: "a failure not retried ends the loop", verdicts: map[string]Verdict{"a": {Outcome: Outcome{Failed: true}}},
			want: []string{"a failed 4ms"}, picks: 1},
		{name: "latency given is kept", verdicts: map[string]Verdict{"a": {Outcome: Outcome{Latency: 7 * time.Millisecond}}},
			want: []string{"a ok 7ms"}, picks: 1},
		{name: "reported by the caller", verdicts: map[string]Verdict{"a": {Outcome: Outcome{Failed: true}, Reported: true}},
			want: nil, picks: 1},
		{name: "MaxTries", maxTries: 2, verdicts: map[string]Verdict{"a": fail, "b": fail},
			want: []string{"a failed 4ms", "b failed 4ms"}, wantErr: []error{ErrTriesExhausted}, wantText: "MaxTries 2", picks: 2},
		{name: "budget refuses the retry", budget: true, verdicts: map[string]Verdict{"a": fail},
			want: []string{"a failed 4ms"}, wantErr: []error{ErrRetryBudget}, picks: 1},
		{name: "gave up before the first pick", gaveUpAt: 1,
			want: nil, wantErr: []error{errStop}, picks: 0},
		{name: "gave up after a failure", gaveUpAt: 2, verdicts: map[string]Verdict{"a": fail},
			want: []string{"a failed 4ms"}, wantErr: []error{errStop}, picks: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newFakeClock()
			lb, err := NewSmoothWRR([]*Peer{
				NewPeer("a", Weight(3), MaxFails(0)),
				NewPeer("b", Weight(2), MaxFails(0)),
				NewPeer("c", Weight(1), MaxFails(0)),
			}, clk.opt())
			require.NoError(t, err)
			rec := &recorder{Picker: lb}
			var r Request
			loop := Attempts{Picker: rec, Request: &r, MaxTries: tt.maxTries, Now: clk.now}
			var budget *RetryBudget
			if tt.budget {
				budget, err = NewRetryBudget(0, 0, time.Second, clk.opt())
				require.NoError(t, err)
				loop.Budget = budget
			}
			checks := 0
			if tt.gaveUpAt > 0 {
				loop.GaveUp = func() error {
					checks++
					if checks >= tt.gaveUpAt {
						return errStop
					}
					return nil
				}
			}
			err = loop.Run(context.Background(), func(_ context.Context, peer *Peer) Verdict {
				v, ok := tt.verdicts[peer.Addr()]
				require.True(t, ok, "unexpected attempt on %s", peer)
				assert.Equal(t, 1, peer.InFlight(), "in flight during try")
				clk.add(4 * time.Millisecond)
				return v
			})
			assert.Equal(t, tt.want, rec.got)
			assert.Equal(t, tt.picks, r.Attempts(), "picks")
			if len(tt.wantErr) == 0 {
				assert.NoError(t, err)
			}
			for _, target := range tt.wantErr {
				assert.ErrorIs(t, err, target)
			}
			if tt.wantText != "" {
				assert.ErrorContains(t, err, tt.wantText)
			}
			if budget != nil {
				assert.Equal(t, RetryBudgetStats{Deposits: 1, Refused: 1}, budget.Stats(), "one request, its retry refused")
			}
			for _, q := range lb.Peers() {
				want := 0
				if q.Addr() == "a" && tt.name == "reported by the caller" {
					want = 1 // the caller's to report
				}
				assert.Equal(t, want, q.InFlight(), "in flight on %s after Run", q)
			}
		})
	}
}

// TestAttempts_panic: a try that panics is reported Abandoned with the
// time it took, and the panic goes on; no retry is made.
func TestAttempts_panic(t *testing.T) {
	clk := newFakeClock()
	lb, err := NewSmoothWRR([]*Peer{NewPeer("a"), NewPeer("b")})
	require.NoError(t, err)
	rec := &recorder{Picker: lb}
	loop := Attempts{Picker: rec, Now: clk.now}
	assert.PanicsWithValue(t, "boom", func() {
		_ = loop.Run(context.Background(), func(context.Context, *Peer) Verdict {
			clk.add(3 * time.Millisecond)
			panic("boom")
		})
	})
	assert.Equal(t, []string{"a abandoned 3ms"}, rec.got)
}

// TestDo_allocs: Do with no options, whose try succeeds at once, allocates
// nothing beyond what the picker does (RoundRobin: nothing).
func TestDo_allocs(t *testing.T) {
	lb, err := NewRoundRobin([]*Peer{NewPeer("a"), NewPeer("b")})
	require.NoError(t, err)
	ctx := context.Background()
	try := func(context.Context, *Peer) error { return nil }
	var r Request
	assert.Zero(t, testing.AllocsPerRun(1000, func() {
		r.Reset()
		_ = Do(ctx, lb, &r, try)
	}))
}

// TestOneAttemptLoop: the attempt loop of Attempts (loop, which Run and
// RunHedged share) is the only function of the module (the root module
// and the nested ones) that picks inside a loop (Do, balancerhttp's
// Transport and Proxy, upstream's Trace run on it): a retry loop elsewhere
// would copy its decisions. To pick is to call a method named Pick or
// PickRetry, or a function of the module that does (pickNext, the
// decision before each pick).
func TestOneAttemptLoop(t *testing.T) {
	allowed := []string{"attempts.go: loop"}
	type fn struct {
		path string
		decl *ast.FuncDecl
	}
	var fns []fn
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != "." && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if d, ok := decl.(*ast.FuncDecl); ok && d.Body != nil {
				fns = append(fns, fn{filepath.ToSlash(path), d})
			}
		}
		return nil
	})
	require.NoError(t, err)
	// The functions that pick outside a loop, by name: called in a loop,
	// they pick there.
	picks := map[string]bool{"Pick": true, "PickRetry": true}
	for _, f := range fns {
		if name := f.decl.Name.Name; name != "Pick" && name != "PickRetry" && callsAny(f.decl.Body, map[string]bool{"Pick": true, "PickRetry": true}) {
			picks[name] = true
		}
	}
	var found []string
	for _, f := range fns {
		if picksInLoop(f.decl.Body, picks) {
			found = append(found, f.path+": "+f.decl.Name.Name)
		}
	}
	slices.Sort(found)
	assert.Equal(t, allowed, found, "functions that pick in a loop: move a retry loop onto Attempts")
	assert.True(t, picks["pickNext"], "the loop's pick")
}

// callsAny reports whether n calls a function or method named in names.
func callsAny(n ast.Node, names map[string]bool) bool {
	found := false
	ast.Inspect(n, func(m ast.Node) bool {
		if c, ok := m.(*ast.CallExpr); ok {
			switch f := c.Fun.(type) {
			case *ast.SelectorExpr:
				found = found || names[f.Sel.Name]
			case *ast.Ident:
				found = found || names[f.Name]
			}
		}
		return !found
	})
	return found
}

// picksInLoop reports whether body has a for or range statement (or a
// function literal within one) that calls a function named in picks.
func picksInLoop(body *ast.BlockStmt, picks map[string]bool) bool {
	found := false
	ast.Inspect(body, func(n ast.Node) bool {
		switch s := n.(type) {
		case *ast.ForStmt:
			found = found || callsAny(s.Body, picks)
		case *ast.RangeStmt:
			found = found || callsAny(s.Body, picks)
		}
		return !found
	})
	return found
}
