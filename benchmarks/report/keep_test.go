package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// dropSections returns s without the level-2 sections whose heading
// starts with one of the prefixes: what a full run writes, since it does
// not measure those sections.
func dropSections(t *testing.T, s string, prefixes ...string) string {
	t.Helper()
	var b strings.Builder
	dropped := 0
	for _, part := range strings.SplitAfter(s, "\n## ") {
		head := part
		drop := false
		for _, p := range prefixes {
			if strings.HasPrefix(head, p) {
				drop = true
			}
		}
		if drop {
			dropped++
			continue
		}
		b.WriteString(part)
	}
	if dropped != len(prefixes) {
		t.Fatalf("dropped %d sections, want %d", dropped, len(prefixes))
	}
	return b.String()
}

// TestWriteFullKeepsUnmeasuredSections: a full run that rewrites the real
// BENCHMARKS.md without the guards and hedging sections (which only their
// own commands measure) must give the file back byte for byte.
func TestWriteFullKeepsUnmeasuredSections(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("..", "..", "BENCHMARKS.md"))
	if err != nil {
		t.Fatal(err)
	}
	generated := dropSections(t, string(old), "Guards:", "Hedging:")
	if generated == string(old) || strings.Contains(generated, "## Guards:") {
		t.Fatal("the sections were not removed from the generated text")
	}
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(path, old, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFull(path, generated); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(old) {
		t.Fatalf("writeFull did not give the file back:\n%s", firstDiff(string(old), string(got)))
	}
}

func TestKeepSections(t *testing.T) {
	for _, tc := range []struct {
		name, old, generated, want string
	}{
		{
			name:      "nothing to keep",
			old:       "# T\n\n## A\n\nold a\n\n## B\n\nold b\n",
			generated: "# T\n\n## A\n\nnew a\n\n## B\n\nnew b\n",
			want:      "# T\n\n## A\n\nnew a\n\n## B\n\nnew b\n",
		},
		{
			name:      "kept after its predecessor",
			old:       "# T\n\n## A\n\nold a\n\n## G\n\ng\n\n## B\n\nold b\n",
			generated: "# T\n\n## A\n\nnew a\n\n## B\n\nnew b\n",
			want:      "# T\n\n## A\n\nnew a\n\n## G\n\ng\n\n## B\n\nnew b\n",
		},
		{
			name:      "orphan goes before Cores",
			old:       "# T\n\n## G\n\ng\n\n## A\n\nold a\n",
			generated: "# T\n\n## A\n\nnew a\n\n## Cores: 1 against 2\n\nc\n",
			want:      "# T\n\n## A\n\nnew a\n\n## G\n\ng\n\n## Cores: 1 against 2\n\nc\n",
		},
		{
			name:      "orphan at the end without Cores",
			old:       "# T\n\n## G\n\ng\n",
			generated: "# T\n\n## A\n\nnew a\n",
			want:      "# T\n\n## A\n\nnew a\n\n## G\n\ng\n",
		},
		{
			// The Cores heading names the run's GOMAXPROCS: a run on
			// another machine measures that section anew, under
			// another heading, and the old one goes.
			name:      "Cores measured anew on other cores",
			old:       "# T\n\n## A\n\nold a\n\n## G\n\ng\n\n## Cores: GOMAXPROCS 1 against 2\n\nold c\n\n## Notes\n\nn\n",
			generated: "# T\n\n## A\n\nnew a\n\n## Cores: GOMAXPROCS 1 against 4\n\nnew c\n\n## Notes\n\nn\n",
			want:      "# T\n\n## A\n\nnew a\n\n## G\n\ng\n\n## Cores: GOMAXPROCS 1 against 4\n\nnew c\n\n## Notes\n\nn\n",
		},
		{
			name:      "new file",
			old:       "",
			generated: "# T\n\n## A\n\na\n",
			want:      "# T\n\n## A\n\na\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := keepSections(tc.old, tc.generated); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestWriteFullNewFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := writeFull(path, "# T\n"); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "# T\n" {
		t.Fatalf("got %q", got)
	}
}

func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(al) && i < len(bl); i++ {
		if al[i] != bl[i] {
			return fmt.Sprintf("line %d:\n want %s\n got  %s", i+1, al[i], bl[i])
		}
	}
	return fmt.Sprintf("lengths differ: %d vs %d lines", len(al), len(bl))
}
