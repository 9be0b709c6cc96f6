package main

import "testing"

// TestKeepSections: a full run's text keeps the sections of the old file
// it does not generate, each after the nearest section before it that
// the run generates (or the head), in the old order, and replaces those
// it generates; a "## " line inside a fenced block is no heading.
func TestKeepSections(t *testing.T) {
	for _, tc := range []struct {
		name, old, generated, want string
	}{
		{"no old sections", "# T\n\nold head\n", "# T\n\nnew head\n\n## A\n\na2\n",
			"# T\n\nnew head\n\n## A\n\na2\n"},
		{"generated ones replaced", "# T\n\n## A\n\na1\n\n## B\n\nb1\n", "# T\n\n## A\n\na2\n\n## B\n\nb2\n",
			"# T\n\n## A\n\na2\n\n## B\n\nb2\n"},
		{"kept in the middle", "# T\n\n## A\n\na1\n\n## K\n\nk\n\n## B\n\nb1\n", "# T\n\n## A\n\na2\n\n## B\n\nb2\n",
			"# T\n\n## A\n\na2\n\n## K\n\nk\n\n## B\n\nb2\n"},
		{"two kept in a row, in their order", "# T\n\n## A\n\na1\n\n## K1\n\nk1\n\n## K2\n\nk2\n\n## B\n\nb1\n", "# T\n\n## A\n\na2\n\n## B\n\nb2\n",
			"# T\n\n## A\n\na2\n\n## K1\n\nk1\n\n## K2\n\nk2\n\n## B\n\nb2\n"},
		{"kept first, after the head", "# T\n\n## K\n\nk\n\n## A\n\na1\n", "# T\n\nhead\n\n## A\n\na2\n",
			"# T\n\nhead\n\n## K\n\nk\n\n## A\n\na2\n"},
		{"kept last, after the last generated", "# T\n\n## A\n\na1\n\n## K\n\nk\n", "# T\n\n## A\n\na2\n",
			"# T\n\n## A\n\na2\n\n## K\n\nk\n"},
		{"kept after a section the run no longer writes", "# T\n\n## A\n\na1\n\n## Gone\n\ng\n\n## K\n\nk\n", "# T\n\n## A\n\na2\n",
			"# T\n\n## A\n\na2\n\n## Gone\n\ng\n\n## K\n\nk\n"},
		{"a kept section that ended the file, now followed", "# T\n\n## K\n\nk", "# T\n\n## A\n\na2\n",
			"# T\n\n## K\n\nk\n\n## A\n\na2\n"},
		{"a heading in a fenced block", "# T\n\n## A\n\n```\n## not a heading\n```\n\n## K\n\nk\n", "# T\n\n## A\n\na2\n",
			"# T\n\n## A\n\na2\n\n## K\n\nk\n"},
		{"subsections go with their section", "# T\n\n## A\n\n### hand-written\n\nx\n\n## K\n\n### sub\n\nk\n", "# T\n\n## A\n\na2\n",
			"# T\n\n## A\n\na2\n\n## K\n\n### sub\n\nk\n"},
	} {
		if got := keepSections(tc.old, tc.generated); got != tc.want {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.name, got, tc.want)
		}
	}
}
