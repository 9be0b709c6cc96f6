package capacity

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Server is a server's workers, without its transport: a request waits
// for a free worker, holds it for a service time from its Drawer scaled
// to the mean, and is recorded. Safe for concurrent use.
type Server struct {
	Name string
	Addr string // the transport's address, set by the test once it listens
	// Busy is the utilization the server reports.
	Busy *BusyMeter

	clk  clock
	sem  chan struct{}
	mean atomic.Int64 // nanoseconds

	mu       sync.Mutex
	draws    Drawer    // guarded by mu
	services []service // guarded by mu
}

// service is one service: when it began and how long it held its
// worker, as the server's clock saw it (the sleep's own overshoot on a
// busy machine included).
type service struct {
	began time.Time
	took  time.Duration
}

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
		Name:  sp.Name,
		clk:   clk,
		sem:   make(chan struct{}, sp.Workers),
		Busy:  newBusyMeter(sp.Workers, Window, clk.now),
		draws: NewDrawer(sp.Seed),
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

// Serve waits for a free worker and holds it for a service time, or less
// if ctx ends first. It returns ctx's error if ctx ended before a worker
// was free, and nil once served.
func (s *Server) Serve(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	began := s.clk.now()
	s.clk.sleepUntil(ctx, began.Add(s.draw()))
	took := s.clk.now().Sub(began)
	s.Busy.Done(took)
	s.mu.Lock()
	s.services = append(s.services, service{began, took})
	s.mu.Unlock()
	<-s.sem
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
	return float64(cap(s.sem)) * float64(n) / sum.Seconds()
}

// Mean returns the mean service time of the requests drawn now.
func (s *Server) Mean() time.Duration { return time.Duration(s.mean.Load()) }
