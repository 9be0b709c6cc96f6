package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRunSh_keepsSections runs benchmarks/run.sh, the whole run, on a copy
// of the repository's BENCHMARKS.md with the rounds of testdata (one
// round: the floor's four benchmarks; ROUNDS_FROM skips the benchmarks).
// The sections the whole run does not generate, the guards' (measured
// apart, ONLY=guards), hedging's (by benchmarks/hedging.sh) and, with no
// cores rounds given, the cores', come out byte for byte as they were and
// where they were: the guards' and hedging's after the probes' and before
// the cores'. Every heading of the file is still there, and the floor's
// table holds the round's numbers (one round: each median is its value,
// written with one decimal below 100 ns).
func TestRunSh_keepsSections(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh:", err)
	}
	orig, err := os.ReadFile("../../BENCHMARKS.md")
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	if err := os.WriteFile(out, orig, 0o644); err != nil {
		t.Fatal(err)
	}
	rounds, err := filepath.Abs("testdata")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "../run.sh")
	cmd.Env = append(os.Environ(), "OUT="+out, "ROUNDS_FROM="+rounds, "ONLY=")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("run.sh: %v\n%s", err, b)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}

	_, before := splitSections(string(orig))
	_, after := splitSections(string(got))
	headings := func(secs []section) []string {
		var hs []string
		for _, s := range secs {
			hs = append(hs, s.heading)
		}
		return hs
	}
	if b, a := headings(before), headings(after); !slices.Equal(b, a) {
		t.Errorf("headings before:\n%s\nafter:\n%s", strings.Join(b, "\n"), strings.Join(a, "\n"))
	}
	text := func(secs []section, prefix string) string {
		for _, s := range secs {
			if strings.HasPrefix(s.heading, prefix) {
				return s.text
			}
		}
		t.Fatalf("no section %q", prefix)
		return ""
	}
	for _, kept := range []string{"## Guards:", "## Hedging:", "## Cores:"} {
		if b, a := text(before, kept), text(after, kept); a != b {
			t.Errorf("section %q changed:\nbefore %q\nafter  %q", kept, b, a)
		}
	}
	for _, row := range []string{"| atomic.Add | 1.5 | 3.5 |", "| rand.Uint64 | 4.5 | 2.5 |"} {
		if !strings.Contains(text(after, "## The floor"), row+"\n") {
			t.Errorf("the floor's table lacks %q:\n%s", row, text(after, "## The floor"))
		}
	}
}
