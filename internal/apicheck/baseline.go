package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/mod/semver"
)

// Where the baseline and the change log live, relative to the top of the
// work tree.
const (
	recordPath    = "api/baseline"
	changelogPath = "CHANGELOG.md"
)

// baseline is the recorded API baseline.
type baseline struct {
	version string
	// commit is the commit that last changed recordPath; "" when the
	// record in the work tree is not committed yet.
	commit string
	// previous is, when the record in the work tree differs from HEAD's
	// (a move being prepared), the commit that last changed it before:
	// the work tree is then compared with it, and its incompatible
	// changes are the ones the move accepts.
	previous string
	// before is the version the record named before the move (before
	// commit, or before the work tree's edit); "" where the record is
	// new. A move must name a later version.
	before string
}

// readVersion returns the version that the record at top names.
func readVersion(top string) (string, error) {
	data, err := os.ReadFile(filepath.Join(top, recordPath))
	if err != nil {
		return "", fmt.Errorf("reading the API baseline: %w", err)
	}
	return parseVersion(data)
}

// versionAt returns the version that the record names in the tree of
// commit, and "" where the tree has no record.
func versionAt(top, commit string) (string, error) {
	if _, err := git(top, "cat-file", "-e", commit+":"+recordPath); err != nil {
		return "", nil
	}
	data, err := git(top, "show", commit+":"+recordPath)
	if err != nil {
		return "", err
	}
	v, err := parseVersion([]byte(data))
	if err != nil {
		return "", fmt.Errorf("at commit %s: %w", short(commit), err)
	}
	return v, nil
}

// parseVersion returns the version that a record names: its one line that
// is neither blank nor a "#" comment, a semantic version.
func parseVersion(data []byte) (string, error) {
	var version string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if version != "" {
			return "", fmt.Errorf("%s:%d: a second version %q (the record names one)", recordPath, n, line)
		}
		if !semver.IsValid(line) || semver.Canonical(line) != line {
			return "", fmt.Errorf("%s:%d: %q is not a version such as v0.1.0", recordPath, n, line)
		}
		version = line
	}
	if version == "" {
		return "", fmt.Errorf("%s: names no version", recordPath)
	}
	return version, nil
}

// findBaseline reads the record in the work tree at top and finds its
// commit in the history.
func findBaseline(top string) (baseline, error) {
	version, err := readVersion(top)
	if err != nil {
		return baseline{}, err
	}
	shallow, err := git(top, "rev-parse", "--is-shallow-repository")
	if err != nil {
		return baseline{}, err
	}
	if shallow == "true" {
		return baseline{}, fmt.Errorf("this is a shallow clone: the API baseline is the commit that last changed %s, "+
			"which needs the whole history (run git fetch --unshallow)", recordPath)
	}
	last, err := git(top, "log", "-1", "--format=%H", "--", recordPath)
	if err != nil {
		return baseline{}, err
	}
	moved, err := git(top, "status", "--porcelain", "--", recordPath)
	if err != nil {
		return baseline{}, err
	}
	if moved != "" {
		b := baseline{version: version, previous: last}
		if last != "" {
			b.before, err = versionAt(top, last)
		}
		return b, err
	}
	b := baseline{version: version, commit: last}
	if parent, err := git(top, "rev-parse", "--verify", "-q", last+"^1"); err == nil {
		b.before, err = versionAt(top, parent)
		if err != nil {
			return baseline{}, err
		}
	}
	return b, nil
}

// changelogHas reports whether the change log at top has a "## version"
// heading (the version as the heading's first word).
func changelogHas(top, version string) (bool, error) {
	data, err := os.ReadFile(filepath.Join(top, changelogPath))
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == "##" && f[1] == version {
			return true, nil
		}
	}
	return false, nil
}

// git runs git in dir and returns its output without the final newline.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
