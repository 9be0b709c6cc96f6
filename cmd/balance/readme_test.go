package main

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateReadme = flag.Bool("update-readme", false, "rewrite the generated sections of README.md and the guides")

// root is the repository's root, from this package's directory.
var root = filepath.Join("..", "..")

// generatedSections are the generated sections of the README and the
// guides: each is the output of one balance command, between
// <!-- NAME:begin --> and <!-- NAME:end --> in file. TestReadme fails when
// a page and the command disagree, so the numbers there are always what
// the command prints; run
//
//	go test ./cmd/balance -run TestReadme -update-readme
//
// to regenerate them.
var generatedSections = []struct {
	file, name string
	args       []string
}{
	{"README.md", "trace", []string{"trace", "../../examples/upstream.conf"}},
	{"docs/simulator.md", "check", []string{"sim", "-check"}},
	{"docs/simulator.md", "hedge", []string{"sim", "-hedge", "-scenario", "fleet16,fleet64,brownout,uniform,retrystorm", "-pickers", "P2CPeakEWMA,FastestFirst,Prequal,Oracle SED"}},
}

func TestReadme(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("runs the full simulation: skipped with -short and -race")
	}
	pages := map[string]string{}
	for _, s := range generatedSections {
		path := filepath.Join(root, s.file)
		page, ok := pages[path]
		if !ok {
			raw, err := os.ReadFile(path)
			require.NoError(t, err)
			page = string(raw)
		}
		code, out, errOut := exec(s.args, "")
		require.Contains(t, []int{0, 1}, code, errOut) // -check exits 1 on a missed target
		begin, end := "<!-- "+s.name+":begin -->\n", "<!-- "+s.name+":end -->"
		i, j := strings.Index(page, begin), strings.Index(page, end)
		require.True(t, i >= 0 && j > i, "%s has no %s section", s.file, s.name)
		block := "```\n" + out + "```\n"
		if *updateReadme {
			page = page[:i+len(begin)] + block + page[j:]
		} else {
			assert.Equal(t, block, page[i+len(begin):j], "%s: section %s is stale: go test ./cmd/balance -run TestReadme -update-readme", s.file, s.name)
		}
		pages[path] = page
	}
	for path, page := range pages {
		if *updateReadme {
			require.NoError(t, os.WriteFile(path, []byte(page), 0o644))
		}
	}
	for _, f := range docPages(t) {
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		assert.NotContains(t, string(raw), "PLACEHOLDER", "a section of %s was never written", f)
	}
}

// docPages returns the README and the guides under docs/, paths from this
// package's directory.
func docPages(t *testing.T) []string {
	t.Helper()
	guides, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, guides)
	return append([]string{filepath.Join(root, "README.md")}, guides...)
}

// rel names a page by its path in the repository.
func rel(path string) string {
	r, err := filepath.Rel(root, path)
	if err != nil {
		return path
	}
	return filepath.ToSlash(r)
}

// TestReadmeSnippets checks that each code block the README and the
// guides mark with <!-- snippet: FILE --> (FILE from the repository's
// root) is what FILE runs: every line of the block, in order, is a line of
// FILE (leading white space aside). The README must mark its two examples.
func TestReadmeSnippets(t *testing.T) {
	const mark = "<!-- snippet: "
	marked := map[string][]string{} // page -> the files its snippets come from
	for _, page := range docPages(t) {
		raw, err := os.ReadFile(page)
		require.NoError(t, err)
		parts := strings.Split(string(raw), mark)
		for _, part := range parts[1:] {
			file, rest, ok := strings.Cut(part, " -->\n```go\n")
			require.True(t, ok, "%s: a snippet mark must be followed by a go block: %.40q", rel(page), part)
			marked[rel(page)] = append(marked[rel(page)], file)
			block, _, ok := strings.Cut(rest, "```")
			require.True(t, ok, "%s: unterminated snippet of %s", rel(page), file)
			src, err := os.ReadFile(filepath.Join(root, file))
			require.NoError(t, err, "%s", rel(page))
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
				if !assert.Less(t, at, len(lines), "%s: %s does not run the line %q (in order)", rel(page), file, want) {
					break
				}
				at++
			}
		}
	}
	assert.Equal(t, []string{"dnsdiscovery/readme_test.go", "grpcbalancer/readme_example_test.go"}, marked["README.md"],
		"the README's net/http and gRPC examples are tested code")
}

// TestReadme_lines holds the README to a front page: at most 300 lines,
// the rest in the guides.
func TestReadme_lines(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	n := strings.Count(string(raw), "\n")
	assert.LessOrEqual(t, n, 300, "README.md has %d lines: move a section to a guide under docs/", n)
}

// fenced matches a fenced code block; nothing inside one is a link or a
// heading.
var fenced = regexp.MustCompile("(?ms)^```.*?^```")

// mdLink matches an inline link or image: [text](target) or ![alt](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchors returns the anchors of a Markdown page's headings, as GitHub
// makes them: lower case, punctuation but '-' and '_' dropped, spaces
// made '-', a repeated one suffixed -1, -2...
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range strings.Split(fenced.ReplaceAllString(page, ""), "\n") {
		text, ok := strings.CutPrefix(line, "#")
		if !ok {
			continue
		}
		text = strings.TrimLeft(text, "#")
		if !strings.HasPrefix(text, " ") {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(strings.TrimSpace(text)) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[a+"-"+itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func itoa(n int) string {
	const digits = "0123456789"
	if n < 10 {
		return digits[n : n+1]
	}
	return itoa(n/10) + digits[n%10:n%10+1]
}

func TestAnchors(t *testing.T) {
	got := anchors("# Which picker?\n## nginx's `resolve`\n```\n# not a heading\n```\n## Tests and CI\n## Tests and CI\n#hashtag\n")
	want := map[string]bool{"which-picker": true, "nginxs-resolve": true, "tests-and-ci": true, "tests-and-ci-1": true}
	assert.Equal(t, want, got)
}

// TestDocs_links checks every relative link of the README and the guides:
// its file exists, and its #anchor, if any, is a heading of that file (or
// of the page itself, for a bare #anchor).
func TestDocs_links(t *testing.T) {
	for _, page := range docPages(t) {
		raw, err := os.ReadFile(page)
		require.NoError(t, err)
		text := fenced.ReplaceAllString(string(raw), "")
		links := mdLink.FindAllStringSubmatch(text, -1)
		if filepath.Base(page) == "README.md" {
			require.NotEmpty(t, links, "the README links to its guides")
		}
		for _, m := range links {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			file, anchor, _ := strings.Cut(target, "#")
			path := page
			if file != "" {
				path = filepath.Join(filepath.Dir(page), filepath.FromSlash(file))
				_, err := os.Stat(path)
				if !assert.NoError(t, err, "%s: link %q: no such file", rel(page), target) {
					continue
				}
			}
			if anchor == "" {
				continue
			}
			require.True(t, strings.HasSuffix(path, ".md"), "%s: link %q: an anchor into a file that is not Markdown", rel(page), target)
			body, err := os.ReadFile(path)
			require.NoError(t, err)
			assert.True(t, anchors(string(body))[anchor], "%s: link %q: %s has no heading #%s", rel(page), target, rel(path), anchor)
		}
	}
}

// docCommands is every command the README and the guides show, with
// what runs it:
//
//   - "FILE:TestName": a test of the repository (FILE from the root), run
//     by `go test` in its module, which .ci/run runs;
//   - ".ci/run": CI's script, whose text contains the command;
//   - "not run: why": a command CI cannot run, and why.
//
// TestDocs_commands fails on a command shown and not listed here, so a new
// one comes with what runs it.
var docCommands = map[string]string{
	"go get github.com/lbgo/balancer":                   "go.mod:module github.com/lbgo/balancer",
	"go run ./cmd/balance trace examples/upstream.conf": "cmd/balance/trace_test.go:TestExample",
	"go test ./...":                   ".ci/run",
	"go vet":                          ".ci/run",
	"bash .ci/run":                    "not run: it is CI's script itself",
	"go run ./cmd/balance sim":        "cmd/balance/sim_docs_test.go:TestDocsSimulationPage", // the same run, printed as Markdown
	"go run ./cmd/balance sim -check": "cmd/balance/readme_test.go:TestReadme",
	"balance sim -svg DIR":            "cmd/balance/sim_docs_test.go:TestDocsCharts",
	"balance sim -scenario subset300": "cmd/balance/sim_docs_test.go:TestDocsSimulationPage",
	"balance sim -scenario coldstart": "sim/coldstart_test.go:TestColdStart",
	"balance sim -scenario liar-probe,liar-util,liar-rif":                                        "sim/lie_test.go:TestLiars",
	"cd grpcbalancer/examples/grpc && go run .":                                                  "grpcbalancer/examples/grpc/main_test.go:TestRun",
	"go run ./examples/httpclient -requests 1000":                                                "examples/httpclient/main_test.go:TestRun", // with 40 requests, every picker
	"sh benchmarks/run.sh":                                                                       "not run: it runs the comparison benchmarks for tens of minutes on a quiet machine; CI runs the benchmarks module's tests",
	"balance sim -format markdown":                                                               "cmd/balance/sim_docs_test.go:TestDocsSimulationPage",
	"balance sim -check -candidate Prequal":                                                      "cmd/balance/sim_docs_test.go:TestDocsSimulationPage",
	"balance sim -scenario subset300 -format markdown":                                           "cmd/balance/sim_docs_test.go:TestDocsSimulationPage",
	"balance sim -scenario hetero,brownout,fleet16,zones16,fastfail16 -seeds 1 -svg docs/charts": "cmd/balance/sim_docs_test.go:TestDocsCharts",
	`balance sim -hedge -scenario fleet16,fleet64,brownout,uniform,retrystorm -pickers "P2CPeakEWMA,FastestFirst,Prequal,Oracle SED"`: "cmd/balance/readme_test.go:TestReadme",
	"balance trace -algo FastestFirst -n 2000": "not run: bench_test.go's BenchmarkTrace100k times it; CI runs no benchmark",
}

// docCommand matches what reads as a command in an inline code span or
// a line of a shell block: go, bash, sh or cd with an argument (and go
// vet alone), or the
// balance command with a subcommand and a flag given a value.
var docCommand = regexp.MustCompile(`^(go (run|test|get|vet|build|install) \S.*|bash \S.*|sh \S.*|cd \S.*|balance (sim|trace) -\S+ \S.*)$`)

// shownCommands returns the commands a page shows: the lines of its
// shell blocks (``` with no language) and its inline code spans that read
// as commands, white space collapsed and comments dropped.
func shownCommands(page string) []string {
	var out []string
	add := func(s string) {
		if i := strings.Index(s, " #"); i >= 0 {
			s = s[:i]
		}
		if s = strings.Join(strings.Fields(s), " "); docCommand.MatchString(s) || s == "go vet" {
			out = append(out, s)
		}
	}
	for _, block := range fenced.FindAllString(page, -1) {
		head, body, _ := strings.Cut(block, "\n")
		if head != "```" {
			continue
		}
		for _, line := range strings.Split(strings.TrimSuffix(body, "```"), "\n") {
			add(line)
		}
	}
	rest := fenced.ReplaceAllString(page, "")
	for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(rest, -1) {
		add(m[1])
	}
	return out
}

// TestDocs_commands checks that every command the README and the guides
// show is in docCommands, and that what docCommands says runs it exists:
// the test function in its file, the line in .ci/run.
func TestDocs_commands(t *testing.T) {
	ci, err := os.ReadFile(filepath.Join(root, ".ci", "run"))
	require.NoError(t, err)
	shown := map[string]bool{}
	for _, page := range docPages(t) {
		raw, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, c := range shownCommands(string(raw)) {
			shown[c] = true
			_, ok := docCommands[c]
			assert.True(t, ok, "%s shows %q, which no test or CI step is listed as running (docCommands)", rel(page), c)
		}
	}
	var cmds []string
	for c := range docCommands {
		cmds = append(cmds, c)
	}
	sort.Strings(cmds)
	for _, c := range cmds {
		runner := docCommands[c]
		assert.True(t, shown[c], "docCommands lists %q, which no page shows", c)
		switch {
		case runner == ".ci/run":
			assert.Contains(t, string(ci), c, ".ci/run does not run %q", c)
		case strings.HasPrefix(runner, "not run: "):
		default:
			file, want, ok := strings.Cut(runner, ":")
			require.True(t, ok, "%q: runner %q", c, runner)
			src, err := os.ReadFile(filepath.Join(root, file))
			require.NoError(t, err, "%q: runner %q", c, runner)
			if strings.HasPrefix(want, "Test") || strings.HasPrefix(want, "Benchmark") {
				want = "func " + want + "("
			}
			assert.Contains(t, string(src), want, "%q: %s has no %s", c, file, want)
		}
	}
}

func TestShownCommands(t *testing.T) {
	page := "Run\n\n```\ngo run ./x -n 2   # a comment\ngo test ./...\n```\n\n```go\ngo run ./not/shell\n```\n\n" +
		"Then `go run\n./y` and `balance sim -pickers` (a flag's name) and `balance sim -scenario a`, `go vet`, `gofmt`.\n"
	assert.Equal(t, []string{"go run ./x -n 2", "go test ./...", "go run ./y", "balance sim -scenario a", "go vet"}, shownCommands(page))
}
