package main

import (
	"flag"
	"os"
	"path/filepath"
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
		if *updateReadme {
			readme = readme[:i+len(begin)] + block + readme[j:]
			continue
		}
		assert.Equal(t, block, readme[i+len(begin):j], "README section %s is stale: go test ./cmd/balance -run TestReadme -update-readme", s.name)
	}
	if *updateReadme {
		require.NoError(t, os.WriteFile(path, []byte(readme), 0o644))
	}
	assert.NotContains(t, readme, "PLACEHOLDER", "a section of the README was never written")
}

// TestReadmeSnippets checks that each code block the README marks with
// <!-- snippet: FILE --> is what FILE runs: every line of the block, in
// order, is a line of FILE (leading white space aside).
func TestReadmeSnippets(t *testing.T) {
	raw, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	const mark = "<!-- snippet: "
	parts := strings.Split(string(raw), mark)
	require.Greater(t, len(parts), 1, "the README marks no snippet")
	for _, part := range parts[1:] {
		file, rest, ok := strings.Cut(part, " -->\n```go\n")
		require.True(t, ok, "a snippet mark must be followed by a go block: %.40q", part)
		block, _, ok := strings.Cut(rest, "```")
		require.True(t, ok, "unterminated snippet of %s", file)
		src, err := os.ReadFile(filepath.Join("..", "..", file))
		require.NoError(t, err)
		var lines []string
		for _, l := range strings.Split(string(src), "\n") {
			lines = append(lines, strings.TrimSpace(l))
		}
		at := 0
		for _, want := range strings.Split(strings.TrimRight(block, "\n"), "\n") {
			want = strings.TrimSpace(want)
			for at < len(lines) && lines[at] != want {
				at++
			}
			if !assert.Less(t, at, len(lines), "%s does not run the README's line %q (in order)", file, want) {
				break
			}
			at++
		}
	}
}
