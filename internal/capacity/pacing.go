package capacity

import (
	"sync/atomic"
	"time"
)

// What Run waits for besides the clock: every client hearing from every
// server before the schedule starts (countdown), and enough requests in a
// measured window before it closes (window).

// countdown is closed once done has been called n times.
type countdown struct {
	left   atomic.Int64
	closed chan struct{}
}

func newCountdown(n int) *countdown {
	c := &countdown{closed: make(chan struct{})}
	c.left.Store(int64(n))
	if n <= 0 {
		close(c.closed)
	}
	return c
}

func (c *countdown) done() {
	if c.left.Add(-1) == 0 {
		close(c.closed)
	}
}

// window counts each fleet's requests begun since from.
type window struct {
	from  time.Time
	begun []atomic.Int64 // by fleet
}

// windows is the window open now, if any, shared by Run and its loops.
type windows struct{ cur atomic.Pointer[window] }

// open opens a window for fleets fleets, from now on.
func (ws *windows) open(fleets int) *window {
	w := &window{from: time.Now(), begun: make([]atomic.Int64, fleets)}
	ws.cur.Store(w)
	return w
}

// count counts a request of fleet i begun at t in the window open now.
func (ws *windows) count(i int, t time.Time) {
	if w := ws.cur.Load(); w != nil && !t.Before(w.from) {
		w.begun[i].Add(1)
	}
}

// least returns the fewest requests a fleet has begun in w.
func (w *window) least() int64 {
	n := int64(-1)
	for i := range w.begun {
		if v := w.begun[i].Load(); n < 0 || v < n {
			n = v
		}
	}
	return max(n, 0)
}
