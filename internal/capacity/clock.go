package capacity

import (
	"context"
	"time"
)

// clock is the time a Server and its BusyMeter keep: the wall clock in
// the end-to-end tests, a scripted one in this package's tests.
type clock interface {
	now() time.Time
	// sleepUntil returns once t has come, or once ctx has ended.
	sleepUntil(ctx context.Context, t time.Time)
}

// wallClock is the machine's clock.
type wallClock struct{}

func (wallClock) now() time.Time { return time.Now() }

func (wallClock) sleepUntil(ctx context.Context, t time.Time) {
	tm := time.NewTimer(time.Until(t))
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}
