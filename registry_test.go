package balancer

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADME_optionsTable holds the README's table of options and backups
// to the pickers' declarations: one row per picker of the registry, in its
// order, naming the options Algorithm.Options lists, in order, and "refused"
// exactly for the pickers whose Algorithm.NoBackups is set.
func TestREADME_optionsTable(t *testing.T) {
	b, err := os.ReadFile("README.md")
	require.NoError(t, err)
	const header = "| Name | Options | Backup peers |"
	_, table, ok := strings.Cut(string(b), header+"\n|---|---|---|\n")
	require.True(t, ok, "README.md has no table %q", header)
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
