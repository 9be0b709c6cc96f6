package balancer

import (
	"testing"

	"github.com/lbgo/balancer/internal/testenv"
)

// The library builds for 32-bit platforms (386, arm), where int has 32
// bits.
func TestBuild32Bit(t *testing.T) { testenv.Build32(t) }
