package capacity

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Sample is one request as its client saw it.
type Sample struct {
	Began  time.Duration // since the run began: the pick's time, near enough
	Lat    time.Duration
	Server string // the Name of the server that answered; "" on error
	Err    error

	at time.Time // Run: when it began, before the run's start is known
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

// drive sends requests from Conc goroutines per client until stop is
// closed, each loop bounded to 1000 requests (several times what the
// servers can serve in a run), and returns when all have ended (each
// within the clients' own timeout). It counts down cold once for each
// client, when the client has had an answer from every server, and each
// request begun in ws's open window as fleet number fleet's.
func (f *Fleet) drive(stop <-chan struct{}, cold *countdown, ws *windows, fleet int) {
	const maxPer = 1000
	f.samples = make([][]Sample, Clients*Conc)
	index := map[string]int{}
	for i, s := range f.Servers {
		index[s.Name] = i
	}
	all := uint64(1)<<len(f.Servers) - 1
	heard := make([]atomic.Uint64, Clients) // each client's servers that answered, a bit each
	var wg sync.WaitGroup
	for g := range f.samples {
		call := f.NewCall(g)
		c := g / Conc
		wg.Go(func() {
			for range maxPer {
				select {
				case <-stop:
					return
				default:
				}
				t0 := time.Now()
				ws.count(fleet, t0)
				server, err := call()
				s := Sample{Server: server, Err: err, Lat: time.Since(t0), at: t0}
				if err != nil {
					s.Server = ""
				} else if k, ok := index[server]; ok {
					bit := uint64(1) << k
					if old := heard[c].Or(bit); old != all && old|bit == all {
						cold.done()
					}
				}
				f.samples[g] = append(f.samples[g], s)
			}
		})
	}
	wg.Wait()
}

// MaxHear bounds how long Run waits for every client to hear from every
// server before it starts the schedule anyway.
const MaxHear = 10 * time.Second

// Run drives every fleet at once on one schedule, so that the pickers
// share the machine's moments, and slows each fleet's big server
// (Servers[0]) to ChangedMean at the change. The schedule starts once
// every client of every fleet has had an answer from every server (its
// first report of each), or after MaxHear: on a busy machine the
// connections and first answers take from tens of milliseconds to most
// of a second, and a schedule started with the clients would then measure
// some clients still without a weight for some server. Each measured
// window lasts until every fleet has begun ph.Requests requests in it
// (Phases). The servers' work is real time; the loops end at the
// schedule's end. Each Result holds the phases as they ran.
func Run(ctx context.Context, fleets []*Fleet, ph Phases) []Result {
	stop := make(chan struct{})
	cold := newCountdown(len(fleets) * Clients)
	var ws windows
	var wg sync.WaitGroup
	for i, f := range fleets {
		wg.Go(func() { f.drive(stop, cold, &ws, i) })
	}
	began := time.Now()
	wait := func(ch <-chan struct{}, d time.Duration) {
		tm := time.NewTimer(d)
		defer tm.Stop()
		select {
		case <-ch:
		case <-tm.C:
		case <-ctx.Done():
		}
	}
	// measure keeps a window open for d, then until every fleet has begun
	// ph.Requests in it or ph.Stretch × d has passed, and returns when it
	// opened and how long it stayed open.
	short := false
	measure := func(d time.Duration) (time.Time, time.Duration) {
		w := ws.open(len(fleets))
		wait(nil, d)
		for w.least() < int64(ph.Requests) && time.Since(w.from) < time.Duration(ph.Stretch)*d && ctx.Err() == nil {
			wait(nil, 10*time.Millisecond)
		}
		short = short || w.least() < int64(ph.Requests)
		return w.from, time.Since(w.from)
	}
	wait(cold.closed, MaxHear)
	start := time.Now()
	ran := ph
	wait(nil, ph.Warm)
	from, open := measure(ph.Before)
	ran.Warm, ran.Before = from.Sub(start), open
	for _, f := range fleets {
		f.Servers[0].SetMean(ChangedMean)
	}
	wait(nil, ph.Settle)
	from, open = measure(ph.After)
	ran.Settle, ran.After = from.Sub(start)-ran.Change(), open
	close(stop)
	wg.Wait()
	out := make([]Result, len(fleets))
	for i, f := range fleets {
		for _, ss := range f.samples {
			for k := range ss {
				ss[k].Began = ss[k].at.Sub(start)
			}
		}
		out[i] = f.result(start, ran)
		out[i].Heard, out[i].Phases, out[i].Short = start.Sub(began), ran, short
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
	// Heard is how long every client of every fleet took to hear from
	// every server, when the schedule started, and Phases the schedule
	// as it ran (the same for every fleet).
	Heard  time.Duration
	Phases Phases
	// Short is set when a window closed at its stretch's end with fewer
	// than Requests requests of some fleet: a machine too busy for the
	// shares to tell anything at the tolerance (Schedule).
	Short bool
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
