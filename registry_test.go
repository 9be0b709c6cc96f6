package balancer

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADME_optionsTable holds docs/algorithms.md's table of options and backups
// to the pickers' declarations: one row per picker of the registry, in its
// order, naming the options Algorithm.Options lists, in order, and "refused"
// exactly for the pickers whose Algorithm.NoBackups is set.
func TestREADME_optionsTable(t *testing.T) {
	b, err := os.ReadFile("docs/algorithms.md")
	require.NoError(t, err)
	const header = "| Name | Options | Backup peers |"
	_, table, ok := strings.Cut(string(b), header+"\n|---|---|---|\n")
	require.True(t, ok, "docs/algorithms.md has no table %q", header)
	table, _, _ = strings.Cut(table, "\n\n")
	rows := strings.Split(table, "\n")
	algs := Algorithms()
	require.Len(t, rows, len(algs), "one row per picker")
	for i, row := range rows {
		cells := strings.Split(strings.Trim(row, "| "), "|")
		require.Len(t, cells, 3, "row %q", row)
		a := algs[i]
		assert.Equal(t, "`"+a.Name+"`", strings.TrimSpace(cells[0]), "row %d", i)
		var opts []string
		for _, o := range strings.Split(cells[1], ",") {
			if o = strings.Trim(strings.TrimSpace(o), "`"); o != "" {
				opts = append(opts, o)
			}
		}
		assert.Equal(t, a.Options, opts, "%s's options", a.Name)
		want := "yes"
		if a.NoBackups {
			want = "refused"
		}
		assert.Equal(t, want, strings.TrimSpace(cells[2]), "%s's backups", a.Name)
	}
}

// TestConstructorDocs_nameNoRefusedOption reads the doc of every picker's
// constructors, NewX and XSettings.New: each says its opts are the shared
// options ("opts: the shared options (see Option)"), and names no option
// the picker refuses. Which it refuses is derived from the registry:
// Algorithm.New is handed each option of optionCases alone, with a valid
// value, and refuses it if the error says it "does not use" it.
func TestConstructorDocs_nameNoRefusedOption(t *testing.T) {
	docs := map[string]string{} // "NewX" and "XSettings.New"
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			require.NoError(t, err)
			for _, d := range f.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Doc == nil {
					continue
				}
				key := fd.Name.Name
				if fd.Recv != nil {
					id, ok := fd.Recv.List[0].Type.(*ast.Ident)
					if !ok || key != "New" {
						continue
					}
					key = id.Name + ".New"
				}
				docs[key] = strings.Join(strings.Fields(fd.Doc.Text()), " ")
			}
		}
	}
	option := regexp.MustCompile(`\bWith[A-Z]\w*`)
	known := map[string]bool{}
	for _, o := range optionCases {
		known[o.name] = true
	}
	for _, a := range Algorithms() {
		refused := map[string]bool{}
		for _, o := range optionCases {
			_, err := a.New([]*Peer{NewPeer("a")}, o.opt)
			if err != nil && strings.Contains(err.Error(), "does not use "+o.name) {
				refused[o.name] = true
			}
		}
		require.NotEmpty(t, refused, "%s refuses no option: the derivation is broken", a.Name)
		for _, ctor := range []string{"New" + a.Name, a.Name + "Settings.New"} {
			doc, ok := docs[ctor]
			if !ok && ctor != "New"+a.Name {
				continue // a picker without settings of its own
			}
			require.True(t, ok, "%s has no doc", ctor)
			assert.Contains(t, doc, "opts: the shared options (see Option)", ctor)
			for _, o := range option.FindAllString(doc, -1) {
				assert.True(t, known[o], "%s's doc names %s, not an option", ctor, o)
				assert.False(t, refused[o], "%s's doc names %s, which %s refuses", ctor, o, a.Name)
			}
		}
	}
}
