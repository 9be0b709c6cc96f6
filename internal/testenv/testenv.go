// Package testenv decides what a test does when a real program it needs
// (nginx, rsvg-convert) is missing: it skips, so that `go test ./...`
// passes on a bare machine, unless the environment variable
// BALANCER_REQUIRE_TOOLS is set, as .ci/run sets it, where a missing
// program fails the test: a CI run never passes by skipping the live tests.
package testenv

import (
	"os"
	"testing"
)

// RequireVar is the environment variable that turns a missing program into
// a failure.
const RequireVar = "BALANCER_REQUIRE_TOOLS"

// Missing reports that a program the test needs is not installed: it fails
// t when RequireVar is set and skips it otherwise. why says what is missing
// and how to install it.
func Missing(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireVar) != "" {
		t.Fatalf("%s (%s is set, so a missing program is a failure, not a skip)", why, RequireVar)
		return
	}
	t.Skip(why)
}
