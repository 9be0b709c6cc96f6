package balancer

import (
	"go/ast"
	"go/build"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fileGraph is the package's type-checked file graph: from[a][b] lists
// the objects (types, funcs, methods, vars, consts, fields) file a uses
// that file b declares, a != b, over the package's non-test files.
type fileGraph struct {
	pkg   *types.Package
	info  *types.Info
	fset  *token.FileSet
	files map[string]*ast.File
	from  map[string]map[string][]string
}

// loadFileGraph returns the package's file graph, built once for every
// test that asks (about a second: the imports are type-checked from
// source).
func loadFileGraph(t *testing.T) *fileGraph {
	t.Helper()
	g, err := fileGraphOnce()
	require.NoError(t, err)
	return g
}

var fileGraphOnce = sync.OnceValues(buildFileGraph)

// buildFileGraph type-checks the package in the current directory, its
// imports from source, and builds its file graph.
func buildFileGraph() (*fileGraph, error) {
	bp, err := build.ImportDir(".", 0)
	if err != nil {
		return nil, err
	}
	g := &fileGraph{
		fset:  token.NewFileSet(),
		files: map[string]*ast.File{},
		from:  map[string]map[string][]string{},
		info: &types.Info{
			Uses:       map[*ast.Ident]types.Object{},
			Selections: map[*ast.SelectorExpr]*types.Selection{},
		},
	}
	var files []*ast.File
	for _, name := range bp.GoFiles {
		f, err := parser.ParseFile(g.fset, name, nil, 0)
		if err != nil {
			return nil, err
		}
		g.files[name] = f
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(g.fset, "source", nil)}
	if g.pkg, err = conf.Check(bp.ImportPath, g.fset, files, g.info); err != nil {
		return nil, err
	}
	use := func(at token.Pos, obj types.Object) {
		if obj == nil || obj.Pkg() != g.pkg || !obj.Pos().IsValid() {
			return
		}
		a, b := g.fileOf(at), g.fileOf(obj.Pos())
		if a == b {
			return
		}
		if g.from[a] == nil {
			g.from[a] = map[string][]string{}
		}
		if !slices.Contains(g.from[a][b], obj.Name()) {
			g.from[a][b] = append(g.from[a][b], obj.Name())
		}
	}
	for id, obj := range g.info.Uses {
		use(id.Pos(), obj)
	}
	for sel, s := range g.info.Selections {
		use(sel.Sel.Pos(), s.Obj())
	}
	return g, nil
}

func (g *fileGraph) fileOf(pos token.Pos) string {
	return filepath.Base(g.fset.Position(pos).Filename)
}

// reach returns the files reachable from start (start included), along
// the edges if forward, against them if not.
func (g *fileGraph) reach(start string, forward bool) map[string]bool {
	seen := map[string]bool{start: true}
	for queue := []string{start}; len(queue) > 0; queue = queue[1:] {
		for a, to := range g.from {
			for b := range to {
				x, y := a, b
				if !forward {
					x, y = b, a
				}
				if x == queue[0] && !seen[y] {
					seen[y] = true
					queue = append(queue, y)
				}
			}
		}
	}
	return seen
}

// path returns a shortest path of edges from a to b, each step naming the
// objects used, or "" if there is none.
func (g *fileGraph) path(a, b string) string {
	prev := map[string]string{a: ""}
	for queue := []string{a}; len(queue) > 0; queue = queue[1:] {
		x := queue[0]
		if x == b {
			var steps []string
			for y := b; y != a; y = prev[y] {
				steps = append(steps, prev[y]+" -> "+y+" "+strings.Join(g.from[prev[y]][y], ","))
			}
			slices.Reverse(steps)
			return strings.Join(steps, "; ")
		}
		next := make([]string, 0, len(g.from[x]))
		for y := range g.from[x] {
			next = append(next, y)
		}
		slices.Sort(next) // a path the same from run to run
		for _, y := range next {
			if _, ok := prev[y]; !ok {
				prev[y] = x
				queue = append(queue, y)
			}
		}
	}
	return ""
}

// pickerFiles returns the files that declare the pickers of the registry:
// for each entry of registry.go's algorithms, the file of the type its
// constructor (the argument of as) returns.
func (g *fileGraph) pickerFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	ast.Inspect(g.files["registry.go"], func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		if fn, ok := call.Fun.(*ast.Ident); !ok || fn.Name != "as" || len(call.Args) != 1 {
			return true
		}
		ctor, ok := call.Args[0].(*ast.Ident)
		require.True(t, ok, "as's argument is a constructor's name")
		sig := g.info.Uses[ctor].Type().(*types.Signature)
		ptr, ok := sig.Results().At(0).Type().(*types.Pointer)
		require.True(t, ok, "%s returns a pointer", ctor.Name)
		files = append(files, g.fileOf(ptr.Elem().(*types.Named).Obj().Pos()))
		return true
	})
	require.Len(t, files, len(Algorithms()), "one constructor per entry of the registry")
	return files
}

// coreRoots returns the files that declare Peer or peerSet, or a method
// of either: the peer set's update methods, nginx's eligibility and
// failure accounting, the guards, events, stats, Connected.
func (g *fileGraph) coreRoots() []string {
	roots := map[string]bool{}
	for _, name := range []string{"Peer", "peerSet"} {
		tn := g.pkg.Scope().Lookup(name).(*types.TypeName)
		roots[g.fileOf(tn.Pos())] = true
		named := tn.Type().(*types.Named)
		for m := range named.Methods() {
			roots[g.fileOf(m.Pos())] = true
		}
	}
	var files []string
	for f := range roots {
		files = append(files, f)
	}
	slices.Sort(files)
	return files
}

// TestFileGraph_pickersOutsideCore holds the package's layering: the core
// (the files of Peer, peerSet and their methods) uses no picker's file,
// directly or through other files, so no picker file is in the core's
// cycle of the file graph. Pickers use the core, the shared mechanisms
// (nginx_rr.go, weight_groups.go, two_choices.go ...) and each other, in
// cycles if need be; the registry, the frame and the tools use any of
// them. A picker's need of a guard is a call into the guard; a guard's
// need of a picker's behaviour goes through a field or interface the
// picker fills.
func TestFileGraph_pickersOutsideCore(t *testing.T) {
	g := loadFileGraph(t)
	pickers := g.pickerFiles(t)
	roots := g.coreRoots()
	used := map[string]bool{}
	for _, r := range roots {
		for f := range g.reach(r, true) {
			used[f] = true
		}
	}
	for _, p := range pickers {
		if !used[p] {
			continue
		}
		for _, r := range roots {
			if path := g.path(r, p); path != "" {
				t.Errorf("the core uses picker file %s: %s", p, path)
				break
			}
		}
	}
	var core []string
	for f := range used {
		core = append(core, f)
	}
	slices.Sort(core)
	t.Logf("the core and what it uses, %d files: %v", len(core), core)
}

// TestFileGraph_guardsOneSeam holds the peer set to one seam to its
// guards: of peerSet's fields, only the embedded guardSet (guards.go) has a
// type declared in a guard's file (guard*.go), so a new guard joins
// guardSet rather than the peer set.
func TestFileGraph_guardsOneSeam(t *testing.T) {
	g := loadFileGraph(t)
	ps := g.pkg.Scope().Lookup("peerSet").Type().Underlying().(*types.Struct)
	var seams []string
	for f := range ps.Fields() {
		typ := f.Type()
		if ptr, ok := typ.(*types.Pointer); ok {
			typ = ptr.Elem()
		}
		named, ok := typ.(*types.Named)
		if !ok || named.Obj().Pkg() != g.pkg {
			continue
		}
		if file := g.fileOf(named.Obj().Pos()); strings.HasPrefix(file, "guard") {
			seams = append(seams, f.Name()+" ("+file+")")
		}
	}
	require.Equal(t, []string{"guardSet (guards.go)"}, seams, "peerSet's fields of a guard's type")
}
