package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// Build32 builds the package in the test's directory for GOARCH=386,
// where int has 32 bits (an untyped constant past 2^31-1 used as an int
// does not compile there), and fails t with the compiler's output if it
// does not build. It is skipped under -short; a missing go tool is
// Missing.
func Build32(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("cross-compiles the package")
	}
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		Missing(t, "no go tool at "+gotool+": "+err.Error())
		return
	}
	cmd := exec.Command(gotool, "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOARCH=386", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=386 go build: %v\n%s", err, out)
	}
}
