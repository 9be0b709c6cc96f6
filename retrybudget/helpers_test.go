package retrybudget_test

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// clock is a virtual clock, safe for concurrent reads.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ns.Store(time.Unix(100, 0).UnixNano())
	return c
}

func (c *clock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) add(d time.Duration)     { c.ns.Add(int64(d)) }
func (c *clock) opt() retrybudget.Option { return retrybudget.WithClock(c.now) }

// peers returns n peers named p0, p1, ... that never go out (max_fails 0).
func peers(n int) []*balancer.Peer {
	ps := make([]*balancer.Peer, n)
	for i := range ps {
		ps[i] = balancer.NewPeer("p"+strconv.Itoa(i), balancer.MaxFails(0))
	}
	return ps
}
