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

// TestConstructorDocs_optionsFollowDeclaration holds each constructor's
// doc to its picker's declaration: the sentence "It accepts ..." names
// exactly the options Algorithm.Options lists, besides WithClock (every
// doc names it; WithEvents, which every picker takes too, is left to its
// own doc).
func TestConstructorDocs_optionsFollowDeclaration(t *testing.T) {
	docs := map[string]string{}
	entries, err := os.ReadDir(".")
	require.NoError(t, err)
	fset := token.NewFileSet()
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
			require.NoError(t, err)
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil && fd.Doc != nil {
					docs[fd.Name.Name] = fd.Doc.Text()
				}
			}
		}
	}
	option := regexp.MustCompile(`\bWith[A-Z]\w*`)
	for _, a := range Algorithms() {
		doc, ok := docs["New"+a.Name]
		require.True(t, ok, "New%s has no doc", a.Name)
		_, sentence, ok := strings.Cut(strings.ReplaceAll(doc, "\n", " "), "It accepts ")
		require.True(t, ok, "New%s's doc does not say which options it accepts", a.Name)
		sentence, _, _ = strings.Cut(sentence, ". ")
		var named []string
		for _, o := range option.FindAllString(sentence, -1) {
			if o != "WithClock" {
				named = append(named, o)
			}
		}
		assert.Contains(t, sentence, "WithClock", "New%s", a.Name)
		assert.Equal(t, a.Options, named, "New%s's doc: %q", a.Name, sentence)
	}
}
