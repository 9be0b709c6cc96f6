package testenv

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// recorder is a testing.TB that records whether Missing skipped or failed.
type recorder struct {
	testing.TB
	skipped, failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Skip(...any)           { r.skipped = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestMissing(t *testing.T) {
	for _, tt := range []struct {
		name, value  string
		skip, failed bool
	}{
		{name: "unset skips", value: "", skip: true},
		{name: "set fails", value: "1", failed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(RequireVar, tt.value)
			r := &recorder{TB: t}
			Missing(r, "nginx is not installed")
			assert.Equal(t, tt.skip, r.skipped, "skipped")
			assert.Equal(t, tt.failed, r.failed, "failed")
		})
	}
}
