package main

import (
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite the generated sections of README.md")

// readmeSections are the README's generated sections: each is the output of
// one balance command, between <!-- NAME:begin --> and <!-- NAME:end -->.
// TestReadme fails when the README and the commands disagree, so the numbers
// there are always what the command prints; run
//
//	go test ./cmd/balance -run TestReadme -update-readme
//
// to regenerate them.
var readmeSections = []struct {
	name string
	args []string
}{
	{"trace", []string{"trace", "../../examples/upstream.conf"}},
	{"sim", []string{"sim", "-format", "markdown"}},
	{"check", []string{"sim", "-check"}},
}

func TestReadme(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs the full simulation: skipped with -short and -race")
	}
	const path = "../../README.md"
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	readme := string(raw)
	for _, s := range readmeSections {
		code, out, errOut := exec(s.args, "")
		require.Contains(t, []int{0, 1}, code, errOut) // -check exits 1 on a missed target
		begin, end := "<!-- "+s.name+":begin -->\n", "<!-- "+s.name+":end -->"
		i, j := strings.Index(readme, begin), strings.Index(readme, end)
		require.True(t, i >= 0 && j > i, "README.md has no %s section", s.name)
		block := "```\n" + out + "```\n"
		if s.name == "sim" {
			block = out
		}
		if *updateReadme {
			readme = readme[:i+len(begin)] + block + readme[j:]
			continue
		}
		assert.Equal(t, block, readme[i+len(begin):j], "README section %s is stale: go test ./cmd/balance -run TestReadme -update-readme", s.name)
	}
	if *updateReadme {
		require.NoError(t, os.WriteFile(path, []byte(readme), 0o644))
	}
}
