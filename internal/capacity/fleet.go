package capacity

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Sample is one request as its client saw it.
type Sample struct {
	Began  time.Duration // since the run began: the pick's time, near enough
	Lat    time.Duration
	Server string // the Name of the server that answered; "" on error
	Err    error
}

// Fleet is one picker's run: servers of its own and its clients. In the
// capacity scenario (Run) those are Clients clients, each with Conc
// goroutines; in a Shifting one (RunShifting), its Clients, each sending
// at its arrival times.
type Fleet struct {
	Servers []*Server
	// NewCall returns goroutine g's request (client g/Conc's) under Run,
	// client g's under RunShifting, where it is called from many
	// goroutines at once: it sends one and returns the Name of the
	// server that answered.
	NewCall func(g int) func() (server string, err error)

	samples [][]Sample // Run: one list per client goroutine; RunShifting: per client
}

// drive sends requests from Conc goroutines per client until end, each
// loop bounded to 1000 requests (several times what the servers can
// serve in the run), and returns when all have ended (each within the
// clients' own timeout).
func (f *Fleet) drive(start, end time.Time) {
	const maxPer = 1000
	f.samples = make([][]Sample, Clients*Conc)
	var wg sync.WaitGroup
	for g := range f.samples {
		call := f.NewCall(g)
		wg.Go(func() {
			for i := 0; i < maxPer && time.Now().Before(end); i++ {
				t0 := time.Now()
				server, err := call()
				s := Sample{Server: server, Err: err, Lat: time.Since(t0), Began: t0.Sub(start)}
				if err != nil {
					s.Server = ""
				}
				f.samples[g] = append(f.samples[g], s)
			}
		})
	}
	wg.Wait()
}

// Run drives every fleet at once on one schedule, so that the pickers
// share the machine's moments, and slows each fleet's big server
// (Servers[0]) to ChangedMean at the change. The servers' work is real
// time; the loops end at the schedule's end.
func Run(ctx context.Context, fleets []*Fleet, ph Phases) []Result {
	start := time.Now()
	var wg sync.WaitGroup
	for _, f := range fleets {
		wg.Go(func() { f.drive(start, start.Add(ph.End())) })
	}
	select {
	case <-time.After(time.Until(start.Add(ph.Change()))):
	case <-ctx.Done():
	}
	for _, f := range fleets {
		f.Servers[0].SetMean(ChangedMean)
	}
	wg.Wait()
	out := make([]Result, len(fleets))
	for i, f := range fleets {
		out[i] = f.result(start, ph)
	}
	return out
}

// Result is what one fleet's run measured.
type Result struct {
	Before, After []float64 // each server's share of the requests begun in the window
	// Each server's share of the realized capacity (Server.Capacity)
	// over the services begun in the window.
	CapBefore, CapAfter []float64
	// Each client's shares in each window, for a failure's message.
	ClientsBefore, ClientsAfter string
	NBefore, NAfter             int
	P99Before, P99After         time.Duration
	P99                         time.Duration // over both windows
	Errs                        []error
}

// result returns the shares and latencies of the requests begun in the
// measured windows.
func (f *Fleet) result(start time.Time, ph Phases) Result {
	var res Result
	count := func(from, to time.Duration) (shares []float64, n int, lats []time.Duration) {
		per := map[string]int{}
		for _, ss := range f.samples {
			for _, s := range ss {
				if s.Err != nil || s.Began < from || s.Began >= to {
					continue
				}
				per[s.Server]++
				n++
				lats = append(lats, s.Lat)
			}
		}
		for _, s := range f.Servers {
			shares = append(shares, float64(per[s.Name])/float64(max(n, 1)))
		}
		return shares, n, lats
	}
	capShares := func(from, to time.Duration) []float64 {
		var c []float64
		sum := 0.0
		for _, s := range f.Servers {
			c = append(c, s.Capacity(start.Add(from), start.Add(to)))
			sum += c[len(c)-1]
		}
		for i := range c {
			c[i] /= max(sum, 1e-9)
		}
		return c
	}
	res.CapBefore, res.CapAfter = capShares(ph.Warm, ph.Change()), capShares(ph.AfterFrom(), ph.End())
	var latB, latA []time.Duration
	perClient := func(from, to time.Duration) string {
		var b strings.Builder
		for c := range Clients {
			per := map[string]int{}
			n := 0
			for g := c * Conc; g < (c+1)*Conc; g++ {
				for _, s := range f.samples[g] {
					if s.Err == nil && s.Began >= from && s.Began < to {
						per[s.Server]++
						n++
					}
				}
			}
			var sh []float64
			for _, s := range f.Servers {
				sh = append(sh, float64(per[s.Name])/float64(max(n, 1)))
			}
			fmt.Fprintf(&b, " client %d: %s%% of %d;", c, FormatShares(sh), n)
		}
		return b.String()
	}
	res.ClientsBefore, res.ClientsAfter = perClient(ph.Warm, ph.Change()), perClient(ph.AfterFrom(), ph.End())
	res.Before, res.NBefore, latB = count(ph.Warm, ph.Change())
	res.After, res.NAfter, latA = count(ph.AfterFrom(), ph.End())
	res.P99Before, res.P99After = Percentile(latB, 0.99), Percentile(latA, 0.99)
	res.P99 = Percentile(append(latB, latA...), 0.99)
	for _, ss := range f.samples {
		for _, s := range ss {
			if s.Err != nil {
				res.Errs = append(res.Errs, s.Err)
			}
		}
	}
	return res
}
