package balancer

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptions_everyOptionEveryPicker builds every picker with every option,
// one at a time, each with a valid value: the pickers named in the option's
// row accept it (from each constructor's doc), every other one refuses it
// with ErrInvalidConfig and an error naming the option.
func TestOptions_everyOptionEveryPicker(t *testing.T) {
	latency := []string{"P2CPeakEWMA", "FastestFirst"}
	tests := []struct {
		name    string
		opt     Option
		accepts []string // nil: every picker
	}{
		{"WithClock", WithClock(time.Now), nil},
		{"WithRand", WithRand(rand.NewPCG(1, 2)), []string{"RoundRobin", "RandomWeighted", "P2CPeakEWMA", "FastestFirst", "Random", "RandomTwo"}},
		{"WithWarmup", WithWarmup(time.Minute), []string{"RandomWeighted"}},
		{"WithDecay", WithDecay(time.Second), latency},
		{"WithFailurePenalty", WithFailurePenalty(time.Second), latency},
		{"WithBand", WithBand(1.5), []string{"FastestFirst"}},
		{"WithExponent", WithExponent(1), []string{"FastestFirst"}},
		{"WithFloor", WithFloor(2), []string{"FastestFirst"}},
		{"WithTolerance", WithTolerance(2), []string{"FastestFirst"}},
		{"WithBoundedLoad", WithBoundedLoad(1.25), []string{"ConsistentHash"}},
		{"WithEvents", WithEvents(func(Event) {}), nil},
	}
	require.Len(t, tests, len(optionNames), "one row per option")
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			forEachPicker(t, func(t *testing.T, pc pickerCase) {
				_, err := pc.new([]*Peer{NewPeer("a")}, tt.opt)
				if tt.accepts == nil || slices.Contains(tt.accepts, pc.name) {
					assert.NoError(t, err)
					return
				}
				assert.ErrorIs(t, err, ErrInvalidConfig)
				assert.ErrorContains(t, err, tt.name)
				assert.ErrorContains(t, err, pc.name)
			})
		})
	}
}

// TestOptions_nil checks that a nil option is refused, by every picker,
// with its position.
func TestOptions_nil(t *testing.T) {
	forEachPicker(t, func(t *testing.T, pc pickerCase) {
		_, err := pc.new([]*Peer{NewPeer("a")}, WithClock(time.Now), nil)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.ErrorContains(t, err, "opts[1] is nil")
	})
}

// TestOptions_bitsNamed checks that every option bit below optEnd has a
// name, so that newConfig's check reaches each one.
func TestOptions_bitsNamed(t *testing.T) {
	n := 0
	for bit := optionSet(1); bit < optEnd; bit <<= 1 {
		assert.NotContains(t, bit.String(), "option(", "bit %#x", uint16(bit))
		n++
	}
	assert.Equal(t, len(optionNames), n)
}
