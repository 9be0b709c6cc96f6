package capacity

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// lateClock is a scripted clock for a Server: it stands still until the
// test wakes a sleeper, then moves to the sleeper's time plus late, as a
// timer fires late on a busy machine. A sleep until a time already come
// returns at once. It records the time of every sleep.
type lateClock struct {
	late   time.Duration
	sleeps chan lateSleeper // the sleepers waiting for the test
	reads  chan struct{}    // one for each read of the time, while there is room

	mu     sync.Mutex
	t      time.Time
	untils []time.Time // guarded by mu: every sleep's time, in order
}

type lateSleeper struct {
	until time.Time
	wake  chan struct{}
}

func newLateClock(late time.Duration) *lateClock {
	return &lateClock{late: late, sleeps: make(chan lateSleeper), reads: make(chan struct{}, 1000), t: time.Unix(100, 0)}
}

// now counts its read once it has read the time, so that a test that
// waits for the count knows the time that was read.
func (c *lateClock) now() time.Time {
	c.mu.Lock()
	t := c.t
	c.mu.Unlock()
	select {
	case c.reads <- struct{}{}:
	default:
	}
	return t
}

func (c *lateClock) sleepUntil(ctx context.Context, t time.Time) {
	c.mu.Lock()
	c.untils = append(c.untils, t)
	come := !t.After(c.t)
	c.mu.Unlock()
	if come {
		return
	}
	s := lateSleeper{t, make(chan struct{})}
	c.sleeps <- s
	<-s.wake
}

// wake moves the clock to s's time plus late, and wakes s.
func (c *lateClock) wake(s lateSleeper) {
	c.mu.Lock()
	c.t = s.until.Add(c.late)
	c.mu.Unlock()
	close(s.wake)
}

// drain forgets the reads of the time so far.
func (c *lateClock) drain() {
	for {
		select {
		case <-c.reads:
		default:
			return
		}
	}
}

// TestServer_capacityDoesNotDependOnTheMachine: a busy machine's late
// timers take nothing from a server's capacity, neither from what it
// serves nor from what it reports. Every wake-up of the scripted clock is
// late by the case's lateness (up to 30 ms, beside services of 10 ms
// mean: late timers on a 2-core machine whose cores other programs take).
//
// Queued: 16 requests arrive at once at a server of one worker. Its
// schedule is the draws' (a fresh Drawer of the same seed gives them):
// the k-th service ends at the start plus the first k service times
// (d1 + … + dk), however late each wake-up, as a server of that
// capacity ends them; the worker was busy for the sum of the service
// times, its realized capacity is 16 / that sum. One at a time: each
// request arrives once the one before has been answered, late, at a
// server of two workers: the server was idle between them, and what it
// reports, busy time / (workers × the span), makes qps / utilization
// workers × 16 / the sum of the service times, its capacity, not the
// smaller one the late answers would give.
func TestServer_capacityDoesNotDependOnTheMachine(t *testing.T) {
	const n = 16
	for _, tc := range []struct {
		name    string
		workers int
		late    time.Duration
		queued  bool
	}{
		{"queued, on time", 1, 0, true},
		{"queued, 3 ms late", 1, 3 * time.Millisecond, true},
		{"queued, 30 ms late", 1, 30 * time.Millisecond, true},
		{"one at a time, 30 ms late", 2, 30 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := Spec{Name: "s", Workers: tc.workers, Mean: 10 * time.Millisecond, Seed: 5}
			draws := NewDrawer(sp.Seed)
			var d []time.Duration
			var sum time.Duration
			for range n {
				d = append(d, time.Duration(draws.Draw()*float64(sp.Mean)))
				sum += d[len(d)-1]
			}
			clk := newLateClock(tc.late)
			start := clk.now()
			s := newServer(sp, clk)
			ctx := context.Background() // not the test's: a failed case leaves its requests waiting, not failing after it
			if tc.queued {
				clk.drain()
				var wg sync.WaitGroup
				for range n {
					wg.Go(func() { assert.NoError(t, s.Serve(ctx)) })
				}
				// Nothing else reads the time before a service ends: n
				// reads are the n arrivals. (The bound only keeps a
				// server that reads no arrival from hanging the test.)
				for i := range n {
					select {
					case <-clk.reads:
					case <-time.After(10 * time.Second):
						t.Fatalf("%d of %d requests read the time on arrival: a request that waits for a worker cannot begin when the worker is free on the schedule", i, n)
					}
				}
				served := make(chan struct{})
				go func() { wg.Wait(); close(served) }()
			loop:
				for {
					select {
					case sl := <-clk.sleeps:
						clk.wake(sl)
					case <-served:
						break loop
					}
				}
				var want []time.Time
				end := start
				for _, x := range d {
					end = end.Add(x)
					want = append(want, end)
				}
				assert.Equal(t, want, clk.untils, "each service's end")
			} else {
				for range n {
					done := make(chan struct{})
					go func() { assert.NoError(t, s.Serve(ctx)); close(done) }()
					clk.wake(<-clk.sleeps)
					<-done
				}
			}
			span := clk.now().Sub(start)
			require.Less(t, span, 9*Window/10, "the run must stay within the meter's first nine buckets, where its span is the time elapsed")
			assert.InDelta(t, sum.Seconds(), s.Busy.Value()*float64(tc.workers)*span.Seconds(), 1e-9, "busy time reported")
			assert.InDelta(t, float64(tc.workers*n)/sum.Seconds(), s.Capacity(start, start.Add(time.Hour)), 1e-6, "realized capacity")
		})
	}
}
