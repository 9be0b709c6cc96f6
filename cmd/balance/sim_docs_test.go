package main

import (
	"bytes"
	"flag"
	"image/png"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/lbgo/balancer/internal/testenv"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/SIMULATION.md and docs/charts")

// The committed charts are what this command writes (the charts read only
// the first seed, so -seeds 1 draws the same ones as the default 3):
//
//	balance sim -scenario hetero,brownout,fleet16,zones16,fastfail16 -seeds 1 -svg docs/charts
//
// TestDocsCharts fails when they differ; run
//
//	go test ./cmd/balance -run 'TestDocs' -update-docs
//
// to regenerate them and docs/SIMULATION.md.
var (
	chartsDir  = filepath.Join("..", "..", "docs", "charts")
	chartsArgs = []string{"sim", "-scenario", "hetero,brownout,fleet16,zones16,fastfail16", "-seeds", "1"}
	pagePath   = filepath.Join("..", "..", "docs", "SIMULATION.md")
)

func skipFullRuns(t *testing.T) {
	t.Helper()
	if testing.Short() || raceEnabled {
		t.Skip("runs full simulations: skipped with -short and -race")
	}
}

func TestDocsCharts(t *testing.T) {
	skipFullRuns(t)
	dir := t.TempDir()
	code, _, errOut := exec(append(slices.Clone(chartsArgs), "-svg", dir), "")
	require.Equal(t, 0, code, errOut)
	fresh, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, fresh, 15, "share, latency and weights for five scenarios")
	if *updateDocs {
		require.NoError(t, os.RemoveAll(chartsDir))
		require.NoError(t, os.MkdirAll(chartsDir, 0o755))
	}
	var names []string
	for _, e := range fresh {
		names = append(names, e.Name())
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		if *updateDocs {
			require.NoError(t, os.WriteFile(filepath.Join(chartsDir, e.Name()), b, 0o644))
			continue
		}
		committed, err := os.ReadFile(filepath.Join(chartsDir, e.Name()))
		require.NoError(t, err, "chart %s is not committed: go test ./cmd/balance -run TestDocs -update-docs", e.Name())
		assert.True(t, bytes.Equal(committed, b), "docs/charts/%s is stale: go test ./cmd/balance -run TestDocs -update-docs", e.Name())
	}
	committed, err := os.ReadDir(chartsDir)
	require.NoError(t, err)
	for _, e := range committed {
		assert.Contains(t, names, e.Name(), "docs/charts/%s is not written by the command", e.Name())
	}
}

// TestDocsChartsRender renders every committed chart to PNG with
// rsvg-convert, when it is installed: the render must succeed and give an
// image of the size the SVG declares.
func TestDocsChartsRender(t *testing.T) {
	tool, err := osexec.LookPath("rsvg-convert")
	if err != nil {
		testenv.Missing(t, "rsvg-convert is not installed (Debian package librsvg2-bin)")
	}
	files, err := filepath.Glob(filepath.Join(chartsDir, "*.svg"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "chart.png")
			msg, err := osexec.Command(tool, "-o", out, f).CombinedOutput()
			require.NoError(t, err, "%s", msg)
			raw, err := os.ReadFile(out)
			require.NoError(t, err)
			img, err := png.Decode(bytes.NewReader(raw))
			require.NoError(t, err)
			b := img.Bounds()
			assert.Greater(t, b.Dx(), 500)
			assert.Greater(t, b.Dy(), 300)
			// Not blank: some pixel is neither white nor transparent.
			var ink bool
			for y := b.Min.Y; y < b.Max.Y && !ink; y += 3 {
				for x := b.Min.X; x < b.Max.X; x += 3 {
					r, g, bl, a := img.At(x, y).RGBA()
					if a > 0 && (r < 0xf000 || g < 0xf000 || bl < 0xf000) {
						ink = true
						break
					}
				}
			}
			assert.True(t, ink, "blank image")
		})
	}
}

// simulationPage builds docs/SIMULATION.md from the commands' output.
func simulationPage(t *testing.T) string {
	t.Helper()
	code, tables, errOut := exec([]string{"sim", "-format", "markdown"}, "")
	require.Equal(t, 0, code, errOut)
	code, checks, errOut := exec([]string{"sim", "-check"}, "")
	require.Contains(t, []int{0, 1}, code, errOut) // -check exits 1 on a missed target
	code, prequal, errOut := exec([]string{"sim", "-check", "-candidate", "Prequal"}, "")
	require.Contains(t, []int{0, 1}, code, errOut)
	code, subsets, errOut := exec([]string{"sim", "-scenario", "subset300", "-format", "markdown"}, "")
	require.Equal(t, 0, code, errOut)
	var b strings.Builder
	b.WriteString(`# Simulation results

<!-- Generated from the output of balance sim: do not edit. Regenerate with
     go test ./cmd/balance -run TestDocs -update-docs -->

Every number on this page is printed by ` + "`balance sim`" + ` on a virtual
clock, so the same flags always print the same bytes; a test fails when
this page and the command disagree. See the sim package's documentation
for the model.

## Charts

` + "`balance sim -scenario hetero,brownout,fleet16,zones16,fastfail16 -seeds 1 -svg docs/charts`" + `
draws these, from each scenario's first seed.

![Share of attempts per backend over time in the brownout](charts/brownout-share.svg)

![FastestFirst's derived weights in the brownout](charts/brownout-weights.svg)

![Latency by percentile in the brownout](charts/brownout-latency.svg)

![Share of attempts per backend over time in hetero](charts/hetero-share.svg)

![Latency by percentile in hetero](charts/hetero-latency.svg)

![FastestFirst's derived weights in hetero](charts/hetero-weights.svg)

![Latency by percentile in fleet16, 16 clients on shifting speeds](charts/fleet16-latency.svg)

![Share of attempts per backend over time in fleet16](charts/fleet16-share.svg)

![Latency by percentile in zones16, fleet16 in two zones of 1 and 20 ms round trip](charts/zones16-latency.svg)

![Share of attempts per backend over time in zones16](charts/zones16-share.svg)

![Share of attempts per backend over time in fastfail16, backend 4 failing fast mid-run](charts/fastfail16-share.svg)

![Latency by percentile in fastfail16](charts/fastfail16-latency.svg)

## Tables

` + "`balance sim -format markdown`" + `:

`)
	b.WriteString(tables)
	b.WriteString("\n## Checks\n\n`balance sim -check`:\n\n```\n")
	b.WriteString(checks)
	b.WriteString("```\n")
	b.WriteString(`
## Prequal's targets

` + "`balance sim -check -candidate Prequal`" + ` measures Prequal against the checks above and
its own targets: p99 within 1.5× Oracle SED's in fleet16 and 2× in fleet64, no worse than
P2CPeakEWMA's in any scenario, a fast-failing backend's share of attempts no more than under
FastestFirst, at most 3 probes a request. A FAIL line is a target missed, by the numbers it
shows; [PREQUAL_SWEEP.md](PREQUAL_SWEEP.md) sweeps Prequal's settings.

` + "```\n")
	b.WriteString(prequal)
	b.WriteString("```\n")
	b.WriteString(`
## Subsetting

` + "`balance sim -scenario subset300 -format markdown`" + ` compares the subsettings over the SRE
book's fleet, each client's round robin wrapped in a subset.Subset, with two scale events
inside the run: at each, every client's picker gets the new backend list through Update, and
the churn is what that Update changed.

`)
	b.WriteString(subsets)
	return b.String()
}

func TestDocsSimulationPage(t *testing.T) {
	skipFullRuns(t)
	page := simulationPage(t)
	if *updateDocs {
		require.NoError(t, os.WriteFile(pagePath, []byte(page), 0o644))
		return
	}
	committed, err := os.ReadFile(pagePath)
	require.NoError(t, err)
	assert.Equal(t, page, string(committed), "docs/SIMULATION.md is stale: go test ./cmd/balance -run TestDocs -update-docs")
	// Every chart the page shows is committed.
	for _, line := range strings.Split(page, "\n") {
		if i := strings.Index(line, "](charts/"); i >= 0 {
			name := strings.TrimSuffix(line[i+len("](charts/"):], ")")
			_, err := os.Stat(filepath.Join(chartsDir, name))
			assert.NoError(t, err, "the page shows %s", name)
		}
	}
}
