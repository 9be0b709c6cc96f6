package capacity

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a server's workers, without its transport: a request waits
// for a free worker, holds it for a service time from its Drawer scaled
// to the mean, and is recorded. The services follow each other on the
// server's own schedule, so that its capacity, workers / mean service
// time, does not depend on the machine: a busy machine's late timers
// delay the answers, not the services after them (see worker). Safe for
// concurrent use.
type Server struct {
	Name string
	Addr string // the transport's address, set by the test once it listens
	// Busy is the utilization the server reports.
	Busy *BusyMeter

	clk     clock
	workers chan *worker // the free ones
	mean    atomic.Int64 // nanoseconds

	mu       sync.Mutex
	draws    Drawer    // guarded by mu
	services []service // guarded by mu
}

// service is one service: when it began and how long it held its
// worker, on the server's schedule.
type service struct {
	began time.Time
	took  time.Duration
}

// worker is one of a server's workers: when its last service ended on
// the server's schedule.
//
// A request begins when it arrives or when its worker's last service
// ended, whichever is later, and ends its service time after that,
// whenever the timer that waits for it fires. The timers of a busy
// machine fire late: a few milliseconds on a quiet 2-core machine, tens
// when other programs take both cores, beside services of 20 to 80 ms.
// Had a late wake-up held the worker, it would have taken that much from
// the server's capacity (the 20 ms servers losing the most) and from the
// capacity it reports: under three CPU hogs beside the other builds,
// medium's realized share after the change came to 39% where its capacity
// is 50%, and the report-driven pickers followed it off by more than the
// tolerance. On the schedule, the request queued behind a late one begins
// when the late one should have ended, and its own timer waits only for
// what remains of its service, if anything: the server serves what its
// capacity allows and the utilization counts its service times, not the
// late wake-ups. A request that arrives at an idle worker begins on
// arrival, so a worker never banks idle time.
type worker struct{ free time.Time }

// Spec describes one of the scenario's servers.
type Spec struct {
	Name    string
	Workers int
	Mean    time.Duration
	Seed    uint64
}

// Specs are the scenario's servers, big first (the one that slows down).
var Specs = []Spec{
	{"big", 4, 20 * time.Millisecond, 1},
	{"medium", 2, 20 * time.Millisecond, 2},
	{"small", 2, 40 * time.Millisecond, 3},
}

// NewServer returns the workers of sp, their BusyMeter over Window.
func NewServer(sp Spec) *Server { return newServer(sp, wallClock{}) }

// newServer is NewServer on the clock clk.
func newServer(sp Spec, clk clock) *Server {
	s := &Server{
		Name:    sp.Name,
		clk:     clk,
		workers: make(chan *worker, sp.Workers),
		Busy:    newBusyMeter(sp.Workers, Window, clk.now),
		draws:   NewDrawer(sp.Seed),
	}
	for range sp.Workers {
		s.workers <- &worker{}
	}
	s.mean.Store(int64(sp.Mean))
	return s
}

// SetMean sets the mean service time of the requests drawn from now on.
func (s *Server) SetMean(d time.Duration) { s.mean.Store(int64(d)) }

// draw returns the next service time.
func (s *Server) draw() time.Duration {
	s.mu.Lock()
	x := s.draws.Draw()
	s.mu.Unlock()
	return time.Duration(x * float64(s.mean.Load()))
}

// Serve waits for a free worker and holds it for a service time on the
// server's schedule, or less if ctx ends first. It returns ctx's error if
// ctx ended before a worker was free, and nil once served.
func (s *Server) Serve(ctx context.Context) error {
	arrived := s.clk.now()
	var w *worker
	select {
	case w = <-s.workers:
	case <-ctx.Done():
		return ctx.Err()
	}
	began := arrived
	if w.free.After(began) {
		began = w.free
	}
	end := began.Add(s.draw())
	s.clk.sleepUntil(ctx, end)
	if ctx.Err() != nil {
		if now := s.clk.now(); now.Before(end) {
			end = now
		}
	}
	w.free = end
	took := end.Sub(began)
	s.Busy.Done(took)
	s.mu.Lock()
	s.services = append(s.services, service{began, took})
	s.mu.Unlock()
	s.workers <- w
	return nil
}

// Capacity returns the server's realized capacity over the services
// begun in [from, to): workers / their mean duration; 0 for none.
func (s *Server) Capacity(from, to time.Time) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int
	var sum time.Duration
	for _, v := range s.services {
		if !v.began.Before(from) && v.began.Before(to) {
			n++
			sum += v.took
		}
	}
	if n == 0 {
		return 0
	}
	return float64(cap(s.workers)) * float64(n) / sum.Seconds()
}

// Mean returns the mean service time of the requests drawn now.
func (s *Server) Mean() time.Duration { return time.Duration(s.mean.Load()) }
