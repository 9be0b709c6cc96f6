package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/exp/apidiff"
	"golang.org/x/mod/semver"
)

// result is what check found.
type result struct {
	base baseline
	// against is the commit the work tree was compared with: the
	// baseline commit, or the previous one while a move is prepared.
	against   string
	packages  []string
	report    apidiff.Report
	changelog bool // CHANGELOG.md has the baseline version's heading
}

// check compares the work tree containing dir with its API baseline.
func check(dir string) (*result, error) {
	top, err := git(dir, "rev-parse", "--show-toplevel")
	if err != nil {
		return nil, err
	}
	base, err := findBaseline(top)
	if err != nil {
		return nil, err
	}
	r := &result{base: base, against: base.commit}
	if base.commit == "" {
		r.against = base.previous
	}
	if r.changelog, err = changelogHas(top, base.version); err != nil {
		return nil, err
	}
	cur, err := loadAPI(top)
	if err != nil {
		return nil, err
	}
	r.packages = names(cur)
	if r.against == "" {
		// The record is new and not committed: the commit that adds
		// it becomes the baseline, and there is nothing before it.
		return r, nil
	}
	tmp, err := os.MkdirTemp("", "apicheck-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if err := extract(top, r.against, tmp); err != nil {
		return nil, err
	}
	old, err := loadAPI(tmp)
	if err != nil {
		return nil, fmt.Errorf("at the baseline commit %s: %w", r.against, err)
	}
	r.report = apidiff.ModuleChanges(old, cur)
	return r, nil
}

// print writes the result and returns the exit status.
func (r *result) print(stdout, stderr io.Writer) int {
	switch {
	case r.base.commit != "":
		fmt.Fprintf(stdout, "API baseline %s: commit %s (the last to change %s)\n", r.base.version, short(r.base.commit), recordPath)
	case r.base.previous != "":
		fmt.Fprintf(stdout, "API baseline %s: moved in the work tree, not committed; compared with the previous baseline, commit %s\n",
			r.base.version, short(r.base.previous))
	default:
		fmt.Fprintf(stdout, "API baseline %s: recorded in the work tree, not committed; the commit that adds it becomes the baseline\n", r.base.version)
	}
	fmt.Fprintf(stdout, "packages: %s\n", strings.Join(r.packages, " "))
	var compatible, incompatible []string
	for _, c := range r.report.Changes {
		if c.Compatible {
			compatible = append(compatible, c.Message)
		} else {
			incompatible = append(incompatible, c.Message)
		}
	}
	list(stdout, "compatible changes", compatible)
	status := exitOK
	if len(incompatible) > 0 {
		if r.base.commit == "" {
			list(stdout, "incompatible changes, accepted by moving the baseline", incompatible)
		} else {
			list(stdout, "incompatible changes", incompatible)
			fmt.Fprintf(stderr, "apicheck: %d incompatible API change(s) since %s (commit %s); "+
				"if intended, move the baseline in the same commit: name the next version in %s "+
				"and give it a section in %s that lists the changes\n",
				len(incompatible), r.base.version, short(r.base.commit), recordPath, changelogPath)
			status = exitIncompatible
		}
	}
	if len(r.report.Changes) == 0 && r.against != "" {
		fmt.Fprintln(stdout, "no API change")
	}
	if r.base.before != "" && semver.Compare(r.base.version, r.base.before) <= 0 {
		where := "the work tree's edit"
		if r.base.commit != "" {
			where = "commit " + short(r.base.commit)
		}
		fmt.Fprintf(stderr, "apicheck: %s changes %s, which moves the baseline, but names %s, not a version after %s\n",
			where, recordPath, r.base.version, r.base.before)
		status = exitIncompatible
	}
	if !r.changelog {
		fmt.Fprintf(stderr, "apicheck: %s has no \"## %s\" heading for the version in %s\n", changelogPath, r.base.version, recordPath)
		status = exitIncompatible
	}
	return status
}

func list(w io.Writer, title string, msgs []string) {
	if len(msgs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s:\n", title)
	for _, m := range msgs {
		fmt.Fprintf(w, "- %s\n", m)
	}
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}
