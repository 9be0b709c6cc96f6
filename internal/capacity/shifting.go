package capacity

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"time"
)

// Shifting is the herding scenario, the simulator's fleet16 on real
// servers: Servers servers of Workers workers each, whose mean service
// time is redrawn from U[Lo, Hi] at intervals drawn from
// U[Every−Spread, Every+Spread], each server on its own schedule; Clients
// independent clients, each with its own picker, sending requests at
// Poisson times (open loop: a request does not wait for the previous one)
// at Load times the nominal capacity in all, each giving up after Timeout.
// A client sees a server's speed only through its own 1/Clients of the
// traffic, so the pickers that judge by their own replies follow each
// other onto whichever server looked fast (they herd).
//
// The schedule and the arrivals follow from Seed: every fleet of a run,
// and every run, gets the same ones.
type Shifting struct {
	Servers, Workers, Clients int
	Lo, Hi                    time.Duration // the range of a server's mean service time
	Every, Spread             time.Duration // the intervals between its redraws
	Load                      float64       // of the nominal capacity, NominalRate
	Warm, Measure             time.Duration // the measured requests begin in [Warm, Warm+Measure)
	Timeout                   time.Duration // the clients give up after it
	Seed                      uint64
}

// Fleet16 is the scenario the end-to-end tests run: the simulator's
// fleet16 (ten servers of one worker, sixteen clients, load 0.75, means
// redrawn from [Lo, 3 Lo] at gaps within Every ± 75%) with service
// times four times its own, means in [40 ms, 120 ms], and redraws twice
// as far apart, every 0.5–3.5 s (so the speeds shift after 25 mean
// services rather than 50: a run of 23 s sees 11 redraws a server), and
// lognormal service times of shape Sigma rather than exponential. On
// that scale a busy machine's late timers (3–5 ms at the p99 when it is
// quiet, tens of milliseconds when the other programs take both cores)
// stay small beside the services, and the process's own load (requests
// and probes over loopback) stays low. The nominal capacity is
// 10 × 1 / 80 ms = 125 requests a second, the arrivals 93.75 a second,
// 5.9 a client: in the 20 s measured about 1875 requests, so a p99 is
// about the 19th longest.
var Fleet16 = Shifting{
	Servers: 10, Workers: 1, Clients: 16,
	Lo: 40 * time.Millisecond, Hi: 120 * time.Millisecond,
	Every: 2 * time.Second, Spread: 1500 * time.Millisecond,
	Load: 0.75,
	Warm: 3 * time.Second, Measure: 20 * time.Second,
	Timeout: 6 * time.Second,
	Seed:    1,
}

// Slower returns sc with its service times, redraw gaps, warm-up and
// timeout k times longer, and so its arrivals k times fewer a second, the
// measured window kept: a run of the same length with 1/k of the
// requests, for a process slowed by the race detector.
func (sc Shifting) Slower(k int) Shifting {
	d := time.Duration(k)
	sc.Lo, sc.Hi, sc.Every, sc.Spread = d*sc.Lo, d*sc.Hi, d*sc.Every, d*sc.Spread
	sc.Warm, sc.Timeout = d*sc.Warm, d*sc.Timeout
	return sc
}

// NominalRate is the servers' capacity in requests a second at the middle
// of the means' range: Servers × Workers / ((Lo+Hi)/2), as the simulator
// counts fleet16's. (Averaged over the redraws a server serves
// Workers × E[1/mean], ln(Hi/Lo)/(Hi−Lo) per worker: 1.10 times more
// for Hi = 3 Lo, so the load is nearer 0.68 of it.)
func (sc Shifting) NominalRate() float64 {
	return float64(sc.Servers*sc.Workers) / ((sc.Lo + sc.Hi) / 2).Seconds()
}

// Rate is the arrivals a second, all clients together.
func (sc Shifting) Rate() float64 { return sc.Load * sc.NominalRate() }

// End is when the last arrival may come, since the run began.
func (sc Shifting) End() time.Duration { return sc.Warm + sc.Measure }

// Change is one redraw: server Server's mean becomes Mean at At.
type Change struct {
	At     time.Duration // since the run began
	Server int
	Mean   time.Duration
}

// Specs returns the servers, each with its mean at the start: s0, s1, …
func (sc Shifting) Specs() []Spec {
	out := make([]Spec, sc.Servers)
	for i := range out {
		rng := sc.serverRand(i)
		out[i] = Spec{Name: "s" + strconv.Itoa(i), Workers: sc.Workers, Mean: sc.drawMean(rng), Seed: sc.Seed*1000 + uint64(i)}
	}
	return out
}

// Changes returns every server's redraws until End, in time order.
func (sc Shifting) Changes() []Change {
	var out []Change
	for i := range sc.Servers {
		rng := sc.serverRand(i)
		sc.drawMean(rng) // the start's, Specs's
		at := time.Duration(0)
		for {
			at += sc.Every - sc.Spread + time.Duration(rng.Int64N(int64(2*sc.Spread)+1))
			if at >= sc.End() {
				break
			}
			out = append(out, Change{At: at, Server: i, Mean: sc.drawMean(rng)})
		}
	}
	slices.SortStableFunc(out, func(a, b Change) int { return int(a.At - b.At) })
	return out
}

// Arrivals returns client c's request times until End: a Poisson process
// of rate Rate/Clients, so that all clients' together are one of rate
// Rate.
func (sc Shifting) Arrivals(c int) []time.Duration {
	rng := rand.New(rand.NewPCG(sc.Seed, 2000+uint64(c)))
	per := sc.Rate() / float64(sc.Clients)
	var out []time.Duration
	at := 0.0
	for {
		at += rng.ExpFloat64() / per
		d := time.Duration(at * float64(time.Second))
		if d >= sc.End() {
			return out
		}
		out = append(out, d)
	}
}

func (sc Shifting) serverRand(i int) *rand.Rand {
	return rand.New(rand.NewPCG(sc.Seed, 1000+uint64(i)))
}

func (sc Shifting) drawMean(rng *rand.Rand) time.Duration {
	return sc.Lo + time.Duration(rng.Int64N(int64(sc.Hi-sc.Lo)+1))
}
