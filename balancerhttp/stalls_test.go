package balancerhttp_test

import (
	"sync/atomic"
	"time"
)

// stallMeter measures how long the machine kept the process's goroutines
// waiting: a goroutine sleeps 5 ms at a time and sums how much longer than
// 5 ms each sleep took. A bound on real-time events that a schedule
// derives (the health checker's) then allows what was measured: a machine
// too busy to run this goroutine on time was too busy to run the
// schedule's timers and handlers on time. On a quiet machine it measures
// a few milliseconds a second (the timers' own slack).
type stallMeter struct {
	stop  chan struct{}
	done  chan struct{}
	total atomic.Int64 // nanoseconds
}

// startStalls starts measuring.
func startStalls() *stallMeter {
	const tick = 5 * time.Millisecond
	m := &stallMeter{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		tm := time.NewTimer(tick)
		defer tm.Stop()
		for last := time.Now(); ; {
			select {
			case <-m.stop:
				m.total.Add(int64(max(0, time.Since(last)-tick)))
				return
			case now := <-tm.C:
				now = time.Now() // when this goroutine ran, not when the timer fired
				m.total.Add(int64(max(0, now.Sub(last)-tick)))
				last = now
				tm.Reset(tick)
			}
		}
	}()
	return m
}

// Stop ends the measure and returns the waiting summed since the start.
func (m *stallMeter) Stop() time.Duration {
	close(m.stop)
	<-m.done
	return time.Duration(m.total.Load())
}
