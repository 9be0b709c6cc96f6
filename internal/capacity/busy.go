package capacity

import (
	"sync"
	"time"
)

// BusyMeter is a server's utilization: busy workers / workers, averaged
// over the window the server counts rps over (in ten buckets, spanning
// as loadreport's rate window does), each request's service time counted
// in the bucket of its completion. Safe for concurrent use.
//
// Over the same requests and span as rps, qps / utilization is then
// exactly workers / the mean service time of the window's requests, the
// server's realized capacity, even while the load shifts. (The count of
// busy workers at the moment of a reply would always include the replying
// request, at least 1/workers: a bias against the servers with few
// workers; an average over another span than rps's skews the weights
// while the load shifts, as it does when the first reports come.)
type BusyMeter struct {
	workers float64
	width   time.Duration // of a bucket
	now     func() time.Time
	start   time.Time

	mu   sync.Mutex
	idx  [10]time.Duration // guarded by mu: each bucket's index (elapsed / width)
	busy [10]time.Duration // guarded by mu: service time completed in it
}

// NewBusyMeter returns the meter of a server of workers workers whose rps
// window is window, starting now.
func NewBusyMeter(workers int, window time.Duration) *BusyMeter {
	return newBusyMeter(workers, window, time.Now)
}

// newBusyMeter is NewBusyMeter on the clock now.
func newBusyMeter(workers int, window time.Duration, now func() time.Time) *BusyMeter {
	m := &BusyMeter{workers: float64(workers), width: window / 10, now: now, start: now()}
	for i := range m.idx {
		m.idx[i] = -1
	}
	return m
}

// Done counts a service of d completed now.
func (m *BusyMeter) Done(d time.Duration) {
	cur := m.now().Sub(m.start) / m.width
	m.mu.Lock()
	b := cur % 10
	if m.idx[b] != cur {
		m.idx[b], m.busy[b] = cur, 0
	}
	m.busy[b] += d
	m.mu.Unlock()
}

// Value returns the utilization now.
func (m *BusyMeter) Value() float64 {
	e := m.now().Sub(m.start)
	cur := e / m.width
	var sum time.Duration
	m.mu.Lock()
	for j := max(cur-9, 0); j <= cur; j++ {
		if m.idx[j%10] == j {
			sum += m.busy[j%10]
		}
	}
	m.mu.Unlock()
	span := min(9*m.width+e-cur*m.width, e)
	span = max(span, m.width)
	return sum.Seconds() / (m.workers * span.Seconds())
}
