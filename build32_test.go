package balancer

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// The library builds for 32-bit platforms (386, arm), where int has 32
// bits: an untyped constant past 2^31-1 used as an int does not compile
// there.
func TestBuild32Bit(t *testing.T) {
	if testing.Short() {
		t.Skip("cross-compiles the package")
	}
	gotool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gotool); err != nil {
		t.Skipf("no go tool at %s: %v", gotool, err)
	}
	cmd := exec.Command(gotool, "build", "-o", os.DevNull, ".")
	cmd.Env = append(os.Environ(), "GOARCH=386", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("GOARCH=386 go build: %v\n%s", err, out)
	}
}
