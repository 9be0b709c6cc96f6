package capacity

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestRun_windowsHoldTheRequests: a measured window lasts until every
// fleet has begun Requests requests in it, however slow a fleet's
// requests. Two fleets answer from the three servers in turn, after at
// least 1 ms and 3 ms; the windows are 10 ms long and must hold 200
// requests a fleet, which the slower fleet's 12 loops could not begin in
// less than 200 / 12 × 3 ms = 50 ms. (Without the stretch, windows of
// their length, the slower fleet began 36 requests in each.) Each
// loop's bound, 1000 requests, lasts at least a second, longer than the
// run: no fleet runs out.
func TestRun_windowsHoldTheRequests(t *testing.T) {
	const want = 200
	newFleet := func(delay time.Duration) *Fleet {
		f := &Fleet{}
		for _, sp := range Specs {
			f.Servers = append(f.Servers, NewServer(sp))
		}
		var turn atomic.Int64
		f.NewCall = func(int) func() (string, error) {
			return func() (string, error) {
				time.Sleep(delay)
				return Specs[turn.Add(1)%int64(len(Specs))].Name, nil
			}
		}
		return f
	}
	ph := Phases{Warm: time.Millisecond, Before: 10 * time.Millisecond, Settle: time.Millisecond, After: 10 * time.Millisecond, Requests: want, Stretch: 1000}
	res := Run(t.Context(), []*Fleet{newFleet(time.Millisecond), newFleet(3 * time.Millisecond)}, ph)
	for i, r := range res {
		t.Logf("fleet %d: %d and %d requests begun in windows of %v and %v", i, r.NBefore, r.NAfter, r.Phases.Before, r.Phases.After)
		assert.GreaterOrEqual(t, r.NBefore, want, "fleet %d before the change", i)
		assert.GreaterOrEqual(t, r.NAfter, want, "fleet %d after the change", i)
		assert.Empty(t, r.Errs)
	}
}
