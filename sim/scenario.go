package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
)

// Dist is the family of a backend's service-time distribution.
//
// The zero value is Exponential. A Dist is a plain value, safe to share.
type Dist uint8

const (
	// Exponential service times: the M in M/M/c, and what the analytic
	// oracles assume.
	Exponential Dist = iota
	// LogNormal service times with the backend's Sigma as shape: the long
	// right tail of real services, or with a small Sigma a nearly constant
	// time.
	LogNormal
)

// FaultMode is how a failing backend treats an attempt.
//
// The zero value is no mode, which Run rejects in a Fault. A FaultMode is a
// plain value, safe to share.
type FaultMode uint8

const (
	// FastError answers at once (after FastErrorDelay) with a failure, like
	// a refused connection or an immediate 5xx.
	FastError FaultMode = iota + 1
	// Stall accepts the attempt and never answers: the client reports a
	// failure when its timeout expires.
	Stall
)

// FastErrorDelay is how long a FastError attempt takes.
const FastErrorDelay = time.Millisecond

// Phase multiplies a backend's mean service time by Factor over [From, To).
// Overlapping phases multiply.
//
// The zero value is not usable: Factor must be positive. A Phase is a plain
// value, safe to share.
type Phase struct {
	From, To time.Duration
	Factor   float64
}

// Fault makes a backend fail each attempt that reaches it during [From, To)
// with probability Prob, in the given Mode.
//
// The zero value is not usable: Mode must be set. A Fault is a plain value,
// safe to share.
type Fault struct {
	From, To time.Duration
	Mode     FaultMode
	Prob     float64
}

// Jitter redraws every backend's mean service time at random: at intervals
// drawn from an exponential distribution of mean Every, or, when Spread is
// positive, uniformly from [Every−Spread, Every+Spread], each backend's
// mean becomes its nominal Mean times a factor drawn uniformly from
// [Lo, Hi] (C3's time-varying service rates). Each backend has its own
// redraw times. Every == 0 disables it; Spread must be below Every.
//
// The zero value is no jitter. A Jitter is a plain value, safe to share.
type Jitter struct {
	Every  time.Duration
	Spread time.Duration
	Lo, Hi float64
}

// interval returns the time to the next redraw from a draw of r.
func (j Jitter) interval(r *rand.Rand) int64 {
	if j.Spread > 0 {
		return int64(j.Every-j.Spread) + int64(2*float64(j.Spread)*r.Float64())
	}
	return int64(r.ExpFloat64() * float64(j.Every))
}

// Backend is one simulated upstream server: a first-come first-served queue
// in front of Workers identical workers.
//
// The zero value is not usable: Mean must be positive. A Backend is a plain
// value and is safe to share between runs, which only read it.
type Backend struct {
	// Workers is the number of requests served at once (the c of M/M/c);
	// 0 means unlimited, a pure delay with no queueing.
	Workers int
	// Mean is the nominal mean service time.
	Mean time.Duration
	// Dist is the service-time distribution; Sigma is LogNormal's shape.
	Dist  Dist
	Sigma float64
	// Weight is the peer weight the clients are configured with (nginx's
	// weight=N); 0 means 1. It is also the backend's fair share of traffic
	// in the share metrics.
	Weight int
	// Phases change the mean service time over time; Faults make the
	// backend fail.
	Phases []Phase
	Faults []Fault
	// RTT is the network round trip between every client and this
	// backend, half of it each way: an attempt or a probe reaches the
	// backend RTT/2 after it is sent, and its answer reaches the client
	// RTT/2 after the backend sends it. 0, the default, is no network.
	RTT time.Duration
	// ShedAbove, when positive, makes the backend shed load as an
	// overloaded server does: an attempt that finds ShedAbove jobs or
	// more on it (in service or waiting) fails fast (FastErrorDelay). 0,
	// the default, sheds nothing. Only for a backend with no RTT.
	ShedAbove int
	// Join, when positive, is when the backend joins: until then the
	// clients' pickers do not hold its peer, and at Join each client adds
	// it (the picker's Add, as a discovery update would). At least one
	// backend must be there from the start.
	Join time.Duration
	// Cold, when positive, is the backend's speed when it joins (at Join,
	// or the start), as a fraction of its nominal speed, rising linearly
	// to the nominal one over WarmUp, in 100 steps: a cold cache or a JIT
	// warming. 0, the default, is no warm-up.
	Cold   float64
	WarmUp time.Duration
	// Lie, when set, makes the backend misstate its load in its probe
	// answers or reports (see Lie). The default tells the truth.
	Lie Lie
}

// Scenario is a complete simulated setup: backends, offered traffic,
// clients and their configuration. Times are measured from the start of the
// run.
//
// The zero value is not usable: a scenario needs backends, a load or rate
// and a duration. A Scenario is a plain value and is safe to share between
// runs, which only read it.
type Scenario struct {
	// Name identifies the scenario on the command line; Title describes it.
	Name, Title string

	Backends []Backend

	// Load is the offered load as a fraction of the backends' total
	// nominal capacity; Rate, when positive, sets the arrival rate in
	// requests per second instead (needed when a backend has unlimited
	// workers). Arrivals are Poisson, open loop.
	Load float64
	Rate float64

	// Clients is the number of independent client balancers (K), each
	// with its own picker and peers; arrivals are spread uniformly at
	// random over them. 0 means 1.
	Clients int

	Duration time.Duration

	// Timeout bounds each attempt: an attempt not answered within it
	// fails at the timeout. 0 means DefaultTimeout.
	Timeout time.Duration

	// Tries bounds the attempts per request. 0 retries like nginx's
	// default proxy_next_upstream (error timeout): a failed attempt is
	// retried at once on another peer, up to one attempt per backend and
	// as long as the picker allows. 1 disables retries.
	Tries int

	// Jitter redraws service-time means at random intervals.
	Jitter Jitter

	// PeerOptions are applied to every peer after its weight, for example
	// balancer.MaxFails(0). None gives nginx's defaults (max_fails=1,
	// fail_timeout=10s).
	PeerOptions []balancer.PeerOption

	// Watch is the index of the backend whose degradation and recovery the
	// divert, readmit and sinkhole metrics follow; -1 for none. Its
	// degraded interval runs from the earliest start to the latest end of
	// its phases and faults.
	Watch int

	// Steady is when the steady-state mean starts: requests arriving
	// before it are left out of SteadyMean, so the start-up transient does
	// not hide the comparison with the analytic optimum.
	Steady time.Duration

	// NoReports turns the backends' load reports off: replies carry no
	// Outcome.Load. By default every reply that reaches the client (a
	// success or a fast error) carries one, as from a server running
	// package loadreport's middleware; see Run for what it holds.
	NoReports bool

	// Pickers, when set, restricts the scenario to the policies of these
	// names (matched without regard to case) among those Compare is
	// given, each followed by its variant under every one of Guards: the
	// guard scenarios compare a picker with and without a guard.
	Pickers []string
	Guards  []Guard

	// Measure is the guard metric the scenario's table shows, over the
	// requests arriving in Window (and, for WindowP99, in Before).
	Measure        Measure
	Window, Before Window
}

// DefaultTimeout is the attempt timeout when a scenario sets none.
const DefaultTimeout = time.Second

// Validate reports the first problem that would make a run of s
// meaningless, wrapping ErrInvalid, or too large, wrapping ErrTooLarge
// with the estimate (see Cost and MaxRequests). Run and Compare call it
// before they allocate anything.
func (s *Scenario) Validate() error {
	if err := s.validate(); err != nil {
		return err
	}
	return s.checkCost()
}

// maxRTT bounds a backend's round trip: longer is no network but a
// mistake, and it keeps every event time far inside int64.
const maxRTT = time.Hour

// maxHorizon bounds the virtual time a run may reach, Duration plus every
// attempt's timeout, far inside int64 nanoseconds (146 years), so that no
// deadline overflows.
const maxHorizon = 1 << 62

// validate reports the first problem that would make a run meaningless.
func (s *Scenario) validate() error {
	switch {
	case len(s.Backends) == 0:
		return invalid("sim: scenario %q has no backends", s.Name)
	case s.Duration <= 0:
		return invalid("sim: scenario %q: duration %v is not positive", s.Name, s.Duration)
	case s.Clients < 0:
		return invalid("sim: scenario %q: negative client count %d", s.Name, s.Clients)
	case s.Tries < 0:
		return invalid("sim: scenario %q: negative tries %d", s.Name, s.Tries)
	case s.Timeout < 0:
		return invalid("sim: scenario %q: negative timeout %v", s.Name, s.Timeout)
	case s.horizon() > maxHorizon:
		return invalid("sim: scenario %q: duration %v plus %d attempts of timeout %v pass the virtual clock's %v",
			s.Name, s.Duration, s.attempts(), orDefault(s.Timeout, DefaultTimeout), time.Duration(maxHorizon))
	case s.Watch < -1 || s.Watch >= len(s.Backends):
		return invalid("sim: scenario %q: watched backend %d out of range", s.Name, s.Watch)
	case s.Jitter.Every < 0 || s.Jitter.Spread < 0 || (s.Jitter.Every > 0 && (!(s.Jitter.Lo > 0) || !(s.Jitter.Hi >= s.Jitter.Lo) || math.IsInf(s.Jitter.Hi, 0) || s.Jitter.Spread >= s.Jitter.Every)):
		return invalid("sim: scenario %q: bad jitter %+v", s.Name, s.Jitter)
	case math.IsNaN(s.Rate) || s.Rate < 0 || math.IsInf(s.Rate, 0):
		return invalid("sim: scenario %q: rate %v is not a positive finite number of requests per second", s.Name, s.Rate)
	case s.Rate == 0 && (math.IsNaN(s.Load) || s.Load <= 0 || math.IsInf(s.Load, 0)):
		return invalid("sim: scenario %q: load %v is not a positive finite fraction of capacity", s.Name, s.Load)
	}
	for i, b := range s.Backends {
		if b.Mean <= 0 || b.Workers < 0 || b.Weight < 0 || b.Sigma < 0 || math.IsNaN(b.Sigma) || math.IsInf(b.Sigma, 0) || b.RTT < 0 || b.RTT > maxRTT || b.Lie < 0 || b.Lie >= lies {
			return invalid("sim: scenario %q: backend %d: bad parameters %+v", s.Name, i, b)
		}
		for _, p := range b.Phases {
			if !(p.Factor > 0) || math.IsInf(p.Factor, 0) || p.To < p.From {
				return invalid("sim: scenario %q: backend %d: bad phase %+v", s.Name, i, p)
			}
		}
		for _, f := range b.Faults {
			if f.Mode != FastError && f.Mode != Stall || !(f.Prob >= 0 && f.Prob <= 1) || f.To < f.From {
				return invalid("sim: scenario %q: backend %d: bad fault %+v", s.Name, i, f)
			}
		}
		if err := s.validateGuarded(i); err != nil {
			return err
		}
	}
	if err := s.validateGuards(); err != nil {
		return err
	}
	r, err := s.rate()
	if err != nil {
		return err
	}
	if !(r > 0) || math.IsInf(r, 0) {
		return invalid("sim: scenario %q: arrival rate %v is not positive", s.Name, r)
	}
	return nil
}

// jitterMean is the mean of the jitter factor: 1 without jitter.
func (s *Scenario) jitterMean() float64 {
	if s.Jitter.Every == 0 {
		return 1
	}
	return (s.Jitter.Lo + s.Jitter.Hi) / 2
}

// Capacity returns backend i's nominal capacity in requests per second:
// workers over the mean service time, the jitter factor's mean included. It
// is +Inf for a backend with unlimited workers.
func (s *Scenario) Capacity(i int) float64 {
	b := s.Backends[i]
	if b.Workers == 0 {
		return math.Inf(1)
	}
	return float64(b.Workers) / (b.Mean.Seconds() * s.jitterMean())
}

// TotalCapacity returns the sum of the backends' nominal capacities.
func (s *Scenario) TotalCapacity() float64 {
	var c float64
	for i := range s.Backends {
		c += s.Capacity(i)
	}
	return c
}

// rate returns the arrival rate in requests per second.
func (s *Scenario) rate() (float64, error) {
	if s.Rate > 0 {
		return s.Rate, nil
	}
	c := s.TotalCapacity()
	if math.IsInf(c, 0) {
		return 0, invalid("sim: scenario %q: load %v of unlimited capacity: set Rate", s.Name, s.Load)
	}
	return s.Load * c, nil
}

// ArrivalRate returns the scenario's arrival rate in requests per second,
// or 0 if it has none.
func (s *Scenario) ArrivalRate() float64 {
	r, err := s.rate()
	if err != nil {
		return 0
	}
	return r
}

// weight returns backend i's configured weight.
func (s *Scenario) weight(i int) int {
	if w := s.Backends[i].Weight; w > 0 {
		return w
	}
	return 1
}

// FairShare returns backend i's fair share of traffic: its weight over the
// total weight.
func (s *Scenario) FairShare(i int) float64 {
	var sum int
	for j := range s.Backends {
		sum += s.weight(j)
	}
	return float64(s.weight(i)) / float64(sum)
}

// Degraded returns the interval over which the watched backend is degraded
// (slowed or failing), and false if the scenario watches none.
func (s *Scenario) Degraded() (from, to time.Duration, ok bool) {
	if s.Watch < 0 || s.Watch >= len(s.Backends) {
		return 0, 0, false
	}
	b := s.Backends[s.Watch]
	from, to = time.Duration(math.MaxInt64), 0
	for _, p := range b.Phases {
		from, to = min(from, p.From), max(to, p.To)
	}
	for _, f := range b.Faults {
		from, to = min(from, f.From), max(to, f.To)
	}
	if to == 0 {
		return 0, 0, false
	}
	return from, to, true
}

// HasFastError reports whether the watched backend fails fast at some point:
// the case where a latency-only balancer would make it a sinkhole.
func (s *Scenario) HasFastError() bool {
	if s.Watch < 0 {
		return false
	}
	for _, f := range s.Backends[s.Watch].Faults {
		if f.Mode == FastError && f.Prob > 0 {
			return true
		}
	}
	return false
}

// MM1 reports whether every backend is a plain M/M/1 queue with no
// perturbation after Steady, the case the square-root rule solves exactly.
func (s *Scenario) MM1() bool {
	if s.Jitter.Every != 0 {
		return false
	}
	for _, b := range s.Backends {
		if b.Workers != 1 || b.Dist != Exponential || len(b.Faults) != 0 {
			return false
		}
		for _, p := range b.Phases {
			if p.To > s.Steady {
				return false
			}
		}
	}
	return true
}

// Scenarios returns the built-in scenarios, in the order the reports use:
// the plan of the latency reference's section 10 (S1 to S4) and a sanity
// check with identical backends. Each call returns fresh values.
func Scenarios() []Scenario {
	return []Scenario{
		hetero(),
		brownout(),
		linkerd(),
		blackhole("blackhole-fast", "fast errors", FastError, 1),
		blackhole("blackhole-flaky", "fast errors on half the attempts", FastError, 0.5),
		blackhole("blackhole-stall", "stalls until the timeout", Stall, 1),
		jitter("jitter", 1),
		jitter("herd", 16),
		fleet("fleet1", 1),
		fleet("fleet16", 16),
		fleet("fleet64", 64),
		zones(),
		zonesOne(),
		fastFail(),
		uniform(),
		retryStorm(),
		outage(),
		scaleUp(),
		coldStart(),
	}
}

// Lookup returns the built-in scenario called name, among Scenarios and
// Liars.
func Lookup(name string) (Scenario, bool) {
	for _, s := range append(Scenarios(), Liars()...) {
		if s.Name == name {
			return s, true
		}
	}
	return Scenario{}, false
}

// mm1 returns an M/M/1 backend with the given service rate per second and
// weight.
func mm1(rate float64, weight int) Backend {
	return Backend{Workers: 1, Mean: time.Duration(float64(time.Second) / rate), Weight: weight}
}

// hetero is S1: ten M/M/1 backends of uneven speed, weighted by capacity,
// the fastest of which starts ten times slower for its first 5 s (the late
// bloomer, watched).
func hetero() Scenario {
	s := Scenario{
		Name:     "hetero",
		Title:    "10 M/M/1 backends, μ = {1,1,1,1,1,1,2,2,3,4}×100/s, weights by capacity; the fastest is 10× slower for its first 5 s",
		Load:     0.7,
		Duration: 60 * time.Second,
		Watch:    9,
		Steady:   15 * time.Second,
	}
	for _, m := range []int{1, 1, 1, 1, 1, 1, 2, 2, 3, 4} {
		s.Backends = append(s.Backends, mm1(float64(m)*100, m))
	}
	s.Backends[9].Phases = []Phase{{From: 0, To: 5 * time.Second, Factor: 10}}
	return s
}

// tenWorkers returns n identical backends of four workers with a 40 ms mean
// service time: 100 requests per second each.
func tenWorkers(n int) []Backend {
	b := make([]Backend, n)
	for i := range b {
		b[i] = Backend{Workers: 4, Mean: 40 * time.Millisecond, Weight: 1}
	}
	return b
}

// brownout is S2b: one of ten queueing backends runs ten times slower for
// 30 s.
func brownout() Scenario {
	s := Scenario{
		Name:     "brownout",
		Title:    "10 M/M/4 backends (40 ms); backend 3 is 10× slower during [15 s, 45 s)",
		Backends: tenWorkers(10),
		Load:     0.7,
		Duration: 60 * time.Second,
		Watch:    3,
	}
	s.Backends[3].Phases = []Phase{{From: 15 * time.Second, To: 45 * time.Second, Factor: 10}}
	return s
}

// linkerd is S2a, Linkerd's 2016 benchmark: 11 backends that answer in
// about 167 ms without queueing, one of them in 2 s for 30 s, 1000 requests
// per second, a 1 s timeout, no retries and no failure accounting. Round
// robin sends 1/11 of the traffic to the slow one half of the time: 4.5% of
// requests time out.
func linkerd() Scenario {
	s := Scenario{
		Name:        "linkerd",
		Title:       "11 backends at 167 ms (sd 5 ms, no queueing), backend 3 at 2 s during [15 s, 45 s); 1000/s, no retry, max_fails=0",
		Rate:        1000,
		Duration:    60 * time.Second,
		Tries:       1,
		PeerOptions: []balancer.PeerOption{balancer.MaxFails(0)},
		Watch:       3,
	}
	const mean = 167 * time.Millisecond
	for range 11 {
		s.Backends = append(s.Backends, Backend{Mean: mean, Dist: LogNormal, Sigma: 5.0 / 167, Weight: 1})
	}
	s.Backends[3].Phases = []Phase{{From: 15 * time.Second, To: 45 * time.Second, Factor: float64(2*time.Second) / float64(mean)}}
	return s
}

// blackhole is S3: backend 4 of ten fails during [15 s, 45 s).
func blackhole(name, what string, mode FaultMode, prob float64) Scenario {
	s := Scenario{
		Name:     name,
		Title:    "10 M/M/4 backends (40 ms); backend 4 " + what + " during [15 s, 45 s)",
		Backends: tenWorkers(10),
		Load:     0.7,
		Duration: 60 * time.Second,
		Watch:    4,
	}
	s.Backends[4].Faults = []Fault{{From: 15 * time.Second, To: 45 * time.Second, Mode: mode, Prob: prob}}
	return s
}

// jitter is S4: every backend's mean service time is redrawn from
// U[s, 3s] at exponential intervals averaging 0.5 s, with k clients.
func jitter(name string, k int) Scenario {
	s := Scenario{
		Name:     name,
		Title:    fmt.Sprintf("10 M/M/1 backends, mean redrawn from U[10, 30] ms every 0.5 s on average; K=%d", k),
		Load:     0.7,
		Clients:  k,
		Duration: 60 * time.Second,
		Jitter:   Jitter{Every: 500 * time.Millisecond, Lo: 1, Hi: 3},
		Watch:    -1,
	}
	for range 10 {
		s.Backends = append(s.Backends, Backend{Workers: 1, Mean: 10 * time.Millisecond, Weight: 1})
	}
	return s
}

// fleet is a fleet whose speeds shift about every second, seen by k
// independent clients: ten M/M/1 backends of herd's speeds, each redrawing
// its mean service time from U[10, 30] ms at intervals drawn uniformly from
// [0.25 s, 1.75 s], each on its own schedule; load 0.75 of the nominal
// capacity (one worker over the 20 ms mean). A client sees a backend's
// speed only through its own share of the traffic, 1/k of it: the
// backends' load reports and the full-information oracle see it all.
func fleet(name string, k int) Scenario {
	s := Scenario{
		Name:     name,
		Title:    fmt.Sprintf("10 M/M/1 backends, mean redrawn from U[10, 30] ms every 0.25-1.75 s (uniform); K=%d", k),
		Load:     0.75,
		Clients:  k,
		Duration: 60 * time.Second,
		Jitter:   Jitter{Every: time.Second, Spread: 750 * time.Millisecond, Lo: 1, Hi: 3},
		Watch:    -1,
	}
	for range 10 {
		s.Backends = append(s.Backends, Backend{Workers: 1, Mean: 10 * time.Millisecond, Weight: 1})
	}
	return s
}

// zones is fleet16 over two zones: backends 0-4 at a round trip of 1 ms
// from every client, 5-9 at 20 ms. A picker that ignores the network sends
// half its traffic 19 ms further than it need go; one that sees only the
// far zone's queues being short herds onto it.
func zones() Scenario {
	s := fleet("zones16", 16)
	s.Title = "fleet16 in two zones: backends 0-4 at a round trip of 1 ms, 5-9 at 20 ms; K=16"
	for i := range s.Backends {
		s.Backends[i].RTT = time.Millisecond
		if i >= 5 {
			s.Backends[i].RTT = 20 * time.Millisecond
		}
	}
	return s
}

// zonesOne is zones16 seen by one client: the client alone sends all the
// traffic, so its own attempts are every server's queue, and the choice is
// between a near server's queue and a far one's 19 ms more each way.
func zonesOne() Scenario {
	s := zones()
	s.Name, s.Clients = "zones1", 1
	s.Title = "fleet1 in two zones: backends 0-4 at a round trip of 1 ms, 5-9 at 20 ms; K=1"
	return s
}

// fastFail is fleet16 with backend 4 failing every attempt fast during
// [15 s, 45 s) (watched): it answers at once, so it holds few requests and
// its latency is its errors' 1 ms, what a probe reads as the best server.
func fastFail() Scenario {
	s := fleet("fastfail16", 16)
	s.Title = "fleet16 with backend 4 failing fast during [15 s, 45 s); K=16"
	s.Watch = 4
	s.Backends[4].Faults = []Fault{{From: 15 * time.Second, To: 45 * time.Second, Mode: FastError, Prob: 1}}
	return s
}

// uniform is the sanity check: ten identical M/M/1 backends, nothing
// happens. Every sensible picker should be close to the best static split.
func uniform() Scenario {
	s := Scenario{
		Name:     "uniform",
		Title:    "10 identical M/M/1 backends (10 ms), nothing happens",
		Load:     0.7,
		Duration: 60 * time.Second,
		Watch:    -1,
	}
	for range 10 {
		s.Backends = append(s.Backends, mm1(100, 1))
	}
	return s
}
