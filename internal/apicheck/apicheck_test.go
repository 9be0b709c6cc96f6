package main

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The fixture module (testdata/base) is committed into a fresh repository;
// testdata/add and testdata/remove are laid over it. add adds Added and
// the field sub.T.B (compatible additions) and removes a function of an
// internal package and one of a command (neither is checked); remove
// removes Drop (incompatible); brokencmd and brokenlib break the command's
// and a checked package's build. The expected messages are apidiff's own
// wording for those changes.

func TestCheck(t *testing.T) {
	const (
		noChange   = "no API change\n"
		added      = "compatible changes:\n- Added: added\n- ./sub.T.B: added\n"
		dropped    = "incompatible changes:\n- Drop: removed\n"
		accepted   = "incompatible changes, accepted by moving the baseline:\n- Drop: removed\n"
		failHint   = "apicheck: 1 incompatible API change(s) since v1.0.0"
		noHeading  = `apicheck: CHANGELOG.md has no "## v2.0.0" heading`
		moveRecord = "v2.0.0\n"
		moveLog    = "# Changelog\n\n## v2.0.0\n\nRemoved Drop.\n\n## v1.0.0\n"
	)
	tests := []struct {
		name string
		// overlay is laid over the committed base; commit says whether
		// it is committed too.
		overlay string
		commit  bool
		// record and changelog, when set, replace api/baseline and
		// CHANGELOG.md together with the overlay.
		record, changelog string
		wantCode          int
		wantOut, wantErr  []string
		notOut            []string
	}{
		{name: "unchanged", wantCode: 0, wantOut: []string{"API baseline v1.0.0: commit ", noChange}},
		{name: "addition in work tree", overlay: "add", wantCode: 0, wantOut: []string{added}, notOut: []string{"Hidden", "Exported", "incompatible"}},
		{name: "addition committed", overlay: "add", commit: true, wantCode: 0, wantOut: []string{added}},
		{name: "removal in work tree", overlay: "remove", wantCode: 1, wantOut: []string{dropped}, wantErr: []string{failHint}},
		{name: "removal committed", overlay: "remove", commit: true, wantCode: 1, wantOut: []string{dropped}, wantErr: []string{failHint}},
		{name: "removal committed with the baseline moved", overlay: "remove", commit: true, record: moveRecord, changelog: moveLog,
			wantCode: 0, wantOut: []string{"API baseline v2.0.0: commit ", noChange}, notOut: []string{"Drop"}},
		{name: "removal with the baseline moved in the work tree", overlay: "remove", record: moveRecord, changelog: moveLog,
			wantCode: 0, wantOut: []string{"API baseline v2.0.0: moved in the work tree, not committed", accepted}},
		{name: "baseline moved without a changelog section", overlay: "remove", commit: true, record: moveRecord,
			wantCode: 1, wantOut: []string{noChange}, wantErr: []string{noHeading}},
		{name: "record edited without a new version", overlay: "remove", commit: true, record: "# edited\nv1.0.0\n",
			wantCode: 1, wantOut: []string{noChange}, wantErr: []string{"changes api/baseline, which moves the baseline, but names v1.0.0, not a version after v1.0.0"}},
		{name: "record edited in the work tree without a new version", overlay: "remove", record: "# edited\nv0.9.0\n",
			wantCode: 1, wantOut: []string{accepted}, wantErr: []string{"the work tree's edit changes api/baseline, which moves the baseline, but names v0.9.0, not a version after v1.0.0"}},
		{name: "command that does not compile", overlay: "brokencmd", wantCode: 0, wantOut: []string{noChange}},
		{name: "checked package that does not compile", overlay: "brokenlib", wantCode: 2, wantErr: []string{"do not load", "undefined: Undefined"}},
		{name: "record names no version", record: "# only a comment\n", wantCode: 2, wantErr: []string{"api/baseline: names no version"}},
		{name: "record names a bad version", record: "# comment\n1.0\n", wantCode: 2, wantErr: []string{`api/baseline:2: "1.0" is not a version`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := newRepo(t)
			if tt.overlay != "" {
				copyTree(t, filepath.Join("testdata", tt.overlay), dir)
			}
			if tt.record != "" {
				writeTestFile(t, filepath.Join(dir, recordPath), tt.record)
			}
			if tt.changelog != "" {
				writeTestFile(t, filepath.Join(dir, changelogPath), tt.changelog)
			}
			if tt.commit {
				commitAll(t, dir, tt.name)
			}
			code, stdout, stderr := runCheck(t, dir)
			if code != tt.wantCode {
				t.Errorf("exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tt.wantCode, stdout, stderr)
			}
			for _, w := range tt.wantOut {
				if !strings.Contains(stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.notOut {
				if strings.Contains(stdout, w) {
					t.Errorf("stdout has %q:\n%s", w, stdout)
				}
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr lacks %q:\n%s", w, stderr)
				}
			}
			if tt.wantErr == nil && stderr != "" {
				t.Errorf("stderr: %s", stderr)
			}
		})
	}
}

// After the baseline moves, the next incompatible change fails again: the
// move accepts the changes of its own commit only.
func TestCheckAfterMove(t *testing.T) {
	dir := newRepo(t)
	copyTree(t, filepath.Join("testdata", "remove"), dir)
	writeTestFile(t, filepath.Join(dir, recordPath), "v2.0.0\n")
	writeTestFile(t, filepath.Join(dir, changelogPath), "# Changelog\n\n## v2.0.0\n\n## v1.0.0\n")
	commitAll(t, dir, "remove Drop, move the baseline to v2.0.0")
	if err := os.Remove(filepath.Join(dir, "sub", "sub.go")); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runCheck(t, dir)
	if code != 1 {
		t.Errorf("exit status %d, want 1\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if want := "- package example.com/fixture/sub: removed\n"; !strings.Contains(stdout, want) {
		t.Errorf("stdout lacks %q:\n%s", want, stdout)
	}
	if want := "since v2.0.0"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

// A shallow clone has not the history to find the baseline commit in.
func TestCheckShallowClone(t *testing.T) {
	src := newRepo(t)
	copyTree(t, filepath.Join("testdata", "add"), src)
	commitAll(t, src, "add")
	dst := filepath.Join(t.TempDir(), "clone")
	gitRun(t, "", "clone", "-q", "--depth=1", "file://"+src, dst)
	code, stdout, stderr := runCheck(t, dst)
	if code != 2 {
		t.Errorf("exit status %d, want 2\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if want := "shallow clone"; !strings.Contains(stderr, want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr)
	}
}

func TestUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"extra"}, &stdout, &stderr); code != 2 {
		t.Errorf("exit status %d, want 2", code)
	}
	if want := `unexpected argument "extra"`; !strings.Contains(stderr.String(), want) {
		t.Errorf("stderr lacks %q:\n%s", want, stderr.String())
	}
}

func TestChecked(t *testing.T) {
	const mod = "example.com/m"
	tests := []struct {
		path string
		want bool
	}{
		{"example.com/m", true},
		{"example.com/m/sub", true},
		{"example.com/m/sub/deeper", true},
		{"example.com/m/internal", false},
		{"example.com/m/internal/x", false},
		{"example.com/m/sub/internal", false},
		{"example.com/m/cmd/tool", false},
		{"example.com/m/examples/demo", false},
		{"example.com/m/cmdline", true},
		{"example.com/mx", false},
		{"example.com/other", false},
	}
	for _, tt := range tests {
		if got := checked(mod, tt.path); got != tt.want {
			t.Errorf("checked(%q, %q) = %v, want %v", mod, tt.path, got, tt.want)
		}
	}
}

// newRepo returns a new repository whose one commit is testdata/base.
func newRepo(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "repo")
	copyTree(t, filepath.Join("testdata", "base"), dir)
	gitRun(t, dir, "init", "-q")
	commitAll(t, dir, "base")
	return dir
}

func runCheck(t *testing.T, dir string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run([]string{"-repo", dir}, &out, &errb)
	return code, out.String(), errb.String()
}

// copyTree lays the files under src over dst; a file of the overlay with
// no declarations left (hidden.go in testdata/add) replaces the one there.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		// The fixture's go.mod is stored as go.mod.fixture, so that
		// the fixture is no module of this repository (CI tests each).
		rel = strings.TrimSuffix(rel, ".fixture")
		writeTestFile(t, filepath.Join(dst, rel), string(data))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commitAll(t *testing.T, dir, msg string) {
	t.Helper()
	gitRun(t, dir, "add", "-A")
	gitRun(t, dir, "commit", "-q", "--allow-empty", "-m", msg)
}

func gitRun(t *testing.T, dir string, args ...string) {
	t.Helper()
	args = append([]string{"-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"}, args...)
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	// The repository's own settings only: not the machine's or the user's.
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
