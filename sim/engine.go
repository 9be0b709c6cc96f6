package sim

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// epoch is the wall time at which the virtual clock starts. Pickers read
// epoch plus the simulated time; a date far from the Unix epoch keeps the
// library's "zero time means never" conventions out of the way.
var epoch = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// Bucket is the resolution of the traffic-share metrics: attempts are
// counted per backend in buckets of this length.
const Bucket = 100 * time.Millisecond

// SpanBuckets is how many buckets a share is smoothed over (500 ms).
const SpanBuckets = 5

// sampleEvery is how often the in-flight counts are sampled for the herd
// index.
const sampleEvery = int64(10 * time.Millisecond)

type evKind uint8

const (
	evArrival     evKind = iota // a new request arrives
	evReply                     // the current attempt of a request ends at the client
	evJobArrive                 // an attempt reaches a backend across the network (req: its job)
	evJobEnd                    // such a backend ends a job (req: its job)
	evProbeArrive               // a probe reaches its backend (req: its probe)
	evProbeAnswer               // a probe's answer reaches its client (req: its probe)
	evJoin                      // a backend joins every client's picker (req: the backend)
)

// event is one entry of the event queue. Events are ordered by time, then by
// the order they were scheduled in, so that simultaneous events always run
// in the same order.
type event struct {
	at     int64
	seq    uint64
	req    int32
	kind   evKind
	failed bool // evReply: the attempt failed (fault or timeout)
}

// request is one request's state while it is in the system.
type request struct {
	r        balancer.Request
	peer     *balancer.Peer
	arrived  int64
	sent     int64 // start of the current attempt
	client   int32
	backend  int32
	attempts int32
	mode     FaultMode // the current attempt's fault, 0 for none
	end      int64     // when the backend ends the current attempt
	gen      uint32    // counts the request's attempts in this slot, ever
	rif      int64     // the jobs its backend held when the current attempt reached it
	// The report the backend wrote as it ended the current attempt, on a
	// backend across the network (see far), when loaded.
	load   balancer.ServerLoad
	loaded bool
	// Draws for the first attempt's service time, made at arrival from the
	// arrival stream so that a request has the same size under every
	// policy: common random numbers make the pairwise comparisons sharper.
	e, z float64
}

// backendState is a backend during a run.
type backendState struct {
	// workers holds the time each worker becomes free; nil when workers
	// are unlimited. With first-come first-served service a new job starts
	// when the earliest worker frees, so its completion time is known the
	// moment it arrives and needs no event of its own.
	workers []int64
	// The mean service time as a step function: mean[k] (ns) from from[k]
	// on; from[0] is 0.
	from   []int64
	mean   []float64
	dist   Dist
	sigma  float64
	faults []fault
	shed   int64      // fail fast an attempt finding this many jobs or more; 0 never
	lie    Lie        // what it misstates (lie.go)
	svc    *rand.Rand // service draws for retried attempts
	flt    *rand.Rand // draws for faults of probability below 1
	rif    int32      // attempts in flight to this backend, as clients see them
	srv    server     // what the backend reports of itself

	// The network: an attempt or probe reaches the backend up after it is
	// sent, and its answer the client down after the backend sends it
	// (RTT/2 and the rest). With a round trip (far) the server sees jobs
	// as they reach it and end, each an event; without, an attempt
	// reaches it as it is sent, and the server's count is rif plus late.
	up, down int64
	arrived  int32   // far: jobs that reached the server and have not ended
	queued   int32   // far: jobs sent and not ended, the ones on the way included
	seen     []int64 // far: each worker's free time as the server knows it
	// hq is the backend's explicit queue in a hedged run (hedge.go),
	// where arrived counts the jobs it holds; nil otherwise.
	hq *hqueue
}

// far reports whether the backend is across a network: a round trip
// above 0.
func (b *backendState) far() bool { return b.up+b.down > 0 }

type fault struct {
	from, to int64
	mode     FaultMode
	prob     float64
}

// meanAt returns the mean service time in nanoseconds at t.
func (b *backendState) meanAt(t int64) float64 {
	k, found := slices.BinarySearch(b.from, t)
	if !found {
		k--
	}
	return b.mean[max(k, 0)]
}

// service returns the service time of a job starting at t, from a standard
// exponential draw e and a standard normal draw z.
func (b *backendState) service(t int64, e, z float64) int64 {
	m := b.meanAt(t)
	var d float64
	if b.dist == LogNormal {
		// exp(σz − σ²/2) has mean 1.
		d = m * math.Exp(b.sigma*z-b.sigma*b.sigma/2)
	} else {
		d = m * e
	}
	return int64(math.Round(d))
}

// faultAt returns the fault active at t, with probability 0 if none.
func (b *backendState) faultAt(t int64) (FaultMode, float64) {
	for _, f := range b.faults {
		if t >= f.from && t < f.to {
			return f.mode, f.prob
		}
	}
	return 0, 0
}

// nextChange returns the first time after now at which the backend's mean
// service time or fault state changes, or math.MaxInt64.
func (b *backendState) nextChange(now int64) int64 {
	next := int64(math.MaxInt64)
	if k, found := slices.BinarySearch(b.from, now+1); k < len(b.from) || found {
		next = b.from[k]
	}
	for _, f := range b.faults {
		for _, t := range [2]int64{f.from, f.to} {
			if t > now {
				next = min(next, t)
			}
		}
	}
	return next
}

// earliest returns the index of the worker that frees first.
func (b *backendState) earliest() int {
	k := 0
	for i, t := range b.workers {
		if t < b.workers[k] {
			k = i
		}
	}
	return k
}

// expectedDelay returns, in nanoseconds, how long a job sent now would
// take on average: the network both ways, the exact wait for a worker from
// when it reaches the backend (the jobs on the way there are ahead of it)
// plus the mean service time at its start.
func (b *backendState) expectedDelay(now int64) float64 {
	arrive := now + b.up
	start := arrive
	if b.workers != nil {
		start = max(arrive, b.workers[b.earliest()])
	}
	d := float64(start-now) + b.meanAt(start)
	if b.down > 0 {
		d += float64(b.down)
	}
	return d
}

type client struct {
	picker balancer.Picker
	peers  []*balancer.Peer
	index  map[*balancer.Peer]int32
	prober *prober             // nil unless the policy probes
	budget *retrybudget.Budget // nil unless the policy gives clients one
}

// world is one run: the event queue, the backends and clients, and the
// metrics being collected. Everything happens on one goroutine.
type world struct {
	sc      *Scenario
	seed    uint64
	now     int64 // ns since the start of the run
	seq     uint64
	q       []event // binary heap of replies
	arrival event   // the next arrival; none once its time reaches dur

	// subset runs the subsetting comparison's scale events (subset.go);
	// nil in every other run.
	subset *subsetRun

	backends []backendState
	clients  []client
	reqs     []request
	free     []int32

	arr      *rand.Rand // arrival times, client choice, request sizes
	gap      float64    // mean time between arrivals, ns
	dur      int64
	timeout  int64
	maxTries int32
	steady   int64

	// Metrics.
	lat            []int64 // each finished request's latency
	failed         int
	refused        int // failed at arrival: the picker had no peer
	attempts       int
	failedAttempts int
	steadySum      float64
	steadyN        int
	picks          []int32 // attempts per bucket and backend, bucket-major
	weights        []int32 // client 0's effective weights at each bucket's end, bucket-major
	nextWeigh      int     // the bucket whose end weigh records next
	herd           []float64
	nextSample     int64

	reports bool                // replies carry load reports
	probing bool                // the policy probes
	joins   bool                // a backend joins after the start
	load    balancer.ServerLoad // the report being handed to Done, reused

	// The jobs on backends across the network and the probes in flight,
	// each a slot reused once free.
	jobs      []job
	freeJobs  []int32
	probes    []probe
	freeProbe []int32
	pflt      *rand.Rand // draws for probes reaching a backend stalling with probability below 1

	serviceTime   int64 // worker time spent on requests, ns
	probesSent    int
	probesServed  int // probes the backends answered
	probesFailed  int // probes answered with Failed
	probesRefused int // answers the receiver refused

	// The guard metrics (see Measure): requests arriving in the window,
	// attempts sent in it, and the latencies of the requests arriving in
	// it and in the before-window; retries the budgets refused.
	winRequests, winAttempts, winFailed, winRefused int
	winLat, beforeLat                               []int64
	budgetRefused                                   int

	// h is the hedging state of a hedged run (hedge.go); nil otherwise.
	h *hedgeRun

	err error
}

// stream returns the random stream of one purpose in one run, so that each
// purpose draws the same numbers whatever the others do.
func stream(seed uint64, scenario, purpose string, index int) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(scenario))
	h.Write([]byte{0})
	h.Write([]byte(purpose))
	return rand.New(rand.NewPCG(seed, h.Sum64()+uint64(index)*0x9e3779b97f4a7c15))
}

// Run simulates scenario sc under policy pol with the given seed and
// returns its metrics. The same arguments always give the same Result, bit
// for bit: the run is a single-threaded discrete-event simulation on a
// virtual clock, and every random draw comes from a PCG stream seeded from
// seed, the scenario's name and the draw's purpose. Arrivals and request
// sizes do not depend on the policy, so all policies face the same
// workload.
//
// Each request arrives, asks its client's picker for a peer, and occupies
// that backend for one attempt. A failed attempt (a fault, or no answer
// within the timeout) is reported as failed and retried at once on another
// peer as the scenario's Tries allows; a request fails when it runs out of
// tries or the picker has no peer for it. Every attempt is reported with
// Done, with its own latency.
//
// Unless the scenario sets NoReports, a reply the backend sends (a success
// or a fast error; not a timeout or a stall) carries in Outcome.Load the
// report a server running package loadreport's middleware with a window of
// ReportWindow would send: its requests in flight from every client, the
// requests and errors per second it ended over the window, and the busy
// fraction of its workers over the window as utilization. One ServerLoad
// per run is reused for every reply, which the Outcome.Load contract
// allows: a reply allocates nothing.
//
// A policy with a retry budget (a Guard's) gives each client its own,
// on the virtual clock: each request deposits, each retry is taken as
// balancer.Attempts takes one (Attempts.Next), and a retry it refuses
// fails the request. A
// backend that joins late (Backend.Join) is added to every client's
// picker with Add at its join; Run returns an error if a picker cannot
// add it.
//
// Run first checks sc with Scenario.Validate and returns its error, which
// wraps ErrInvalid or ErrTooLarge, before allocating anything for the run.
func Run(sc *Scenario, pol Policy, seed uint64) (*Result, error) {
	if err := sc.Validate(); err != nil {
		return nil, err
	}
	if pol.New == nil && pol.oracle == nil && pol.Probed == nil {
		return nil, invalid("sim: policy %q has no constructor", pol.Name)
	}
	w, err := newWorld(sc, pol, seed)
	if err != nil {
		return nil, err
	}
	w.loop()
	if w.err != nil {
		return nil, fmt.Errorf("sim: %s under %s, seed %d: %w", sc.Name, pol.Name, seed, w.err)
	}
	return w.result(pol.Name, seed), nil
}

func newWorld(sc *Scenario, pol Policy, seed uint64) (*world, error) {
	rate, _ := sc.rate()
	w := &world{
		sc:         sc,
		seed:       seed,
		arr:        stream(seed, sc.Name, "arrivals", 0),
		gap:        float64(time.Second) / rate,
		dur:        int64(sc.Duration),
		timeout:    int64(orDefault(sc.Timeout, DefaultTimeout)),
		maxTries:   int32(min(orDefault(sc.Tries, len(sc.Backends)), math.MaxInt32)),
		steady:     int64(sc.Steady),
		nextSample: sampleEvery,
		reports:    !sc.NoReports,
		probing:    pol.Probed != nil,
		joins:      slices.ContainsFunc(sc.Backends, func(b Backend) bool { return b.Join > 0 }),
	}
	n := len(sc.Backends)
	buckets := int((w.dur + int64(Bucket) - 1) / int64(Bucket))
	w.picks = make([]int32, buckets*n)
	w.weights = make([]int32, buckets*n)
	// Allocated once at the size Cost counts, not grown.
	w.lat = make([]int64, 0, int(poissonCap(sc.Cost().Requests)))
	w.herd = make([]float64, 0, w.dur/sampleEvery+1)
	w.backends = make([]backendState, n)
	for i := range sc.Backends {
		w.backends[i] = w.newBackend(seed, i)
	}
	k := orDefault(sc.Clients, 1)
	w.clients = make([]client, k)
	clock := func() time.Time { return epoch.Add(time.Duration(w.now)) }
	newPicker := pol.New
	if pol.fleet != nil {
		newPicker = pol.fleet(k)
	}
	for c := range w.clients {
		peers := make([]*balancer.Peer, n)
		index := make(map[*balancer.Peer]int32, n)
		for i := range peers {
			opts := append([]balancer.PeerOption{balancer.Weight(sc.weight(i))}, sc.PeerOptions...)
			peers[i] = balancer.NewPeer(fmt.Sprintf("b%d", i), opts...)
			index[peers[i]] = int32(i)
		}
		// The peers of backends that join later are not the picker's yet.
		initial := peers
		if w.joins {
			initial = nil
			for i, p := range peers {
				if sc.Backends[i].Join == 0 {
					initial = append(initial, p)
				}
			}
		}
		src := rand.NewPCG(seed, stream(seed, sc.Name, "balancer", c).Uint64())
		w.clients[c] = client{peers: peers, index: index}
		var p balancer.Picker
		var err error
		switch {
		case pol.oracle != nil:
			p = pol.oracle(w, initial, src)
		case pol.Probed != nil:
			w.clients[c].prober = &prober{w: w, c: int32(c)}
			p, err = pol.Probed(initial, clock, src, w.clients[c].prober)
		default:
			p, err = newPicker(initial, clock, src)
		}
		if err != nil {
			return nil, fmt.Errorf("sim: building %s: %w", pol.Name, err)
		}
		w.clients[c].picker = p
		if b := pol.budget; b != nil {
			if w.clients[c].budget, err = retrybudget.New(b.Ratio, b.MinPerSecond, b.Window, retrybudget.WithClock(clock)); err != nil {
				return nil, fmt.Errorf("sim: building %s's retry budget: %w", pol.Name, err)
			}
		}
	}
	if pol.hedge != nil {
		var err error
		if w.h, err = newHedgeRun(w, *pol.hedge, clock); err != nil {
			return nil, fmt.Errorf("sim: building %s's hedge budget: %w", pol.Name, err)
		}
	}
	for i, b := range sc.Backends {
		if b.Join > 0 {
			w.push(event{at: int64(b.Join), kind: evJoin, req: int32(i)})
		}
	}
	if sc.Measure != NoMeasure {
		w.winLat = make([]int64, 0, int(poissonCap(rate*sc.Window.seconds())))
		if sc.Measure == WindowP99 {
			w.beforeLat = make([]int64, 0, int(poissonCap(rate*sc.Before.seconds())))
		}
	}
	return w, nil
}

// orDefault returns v, or def when v is zero.
func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// newBackend builds backend i's state, with its mean service time as a step
// function of time: the nominal mean, times the jitter factor in force,
// times every phase in force.
func (w *world) newBackend(seed uint64, i int) backendState {
	spec := w.sc.Backends[i]
	b := backendState{
		dist:  spec.Dist,
		sigma: spec.Sigma,
		svc:   stream(seed, w.sc.Name, "service", i),
		flt:   stream(seed, w.sc.Name, "faults", i),
	}
	if spec.Workers > 0 {
		b.workers = make([]int64, spec.Workers)
	}
	b.shed = int64(spec.ShedAbove)
	b.lie = spec.Lie
	b.up = int64(spec.RTT / 2)
	b.down = int64(spec.RTT) - b.up
	if b.far() && spec.Workers > 0 {
		b.seen = make([]int64, spec.Workers)
	}
	if w.probing {
		b.srv.byLevel = new(latencyByLevel)
	}
	for _, f := range spec.Faults {
		b.faults = append(b.faults, fault{int64(f.From), int64(f.To), f.Mode, f.Prob})
	}
	// Jitter: factor jf[k] from jt[k] on. The redraws continue past the
	// end of arrivals, while the last requests drain.
	jt, jf := []int64{0}, []float64{1}
	if j := w.sc.Jitter; j.Every > 0 {
		r := stream(seed, w.sc.Name, "jitter", i)
		// No request ends after the horizon, so no redraw after it is read.
		horizon := int64(w.sc.horizon())
		m := int(poissonCap(float64(horizon) / float64(j.Every)))
		jt, jf = make([]int64, 1, m), make([]float64, 1, m)
		jf[0] = j.Lo + (j.Hi-j.Lo)*r.Float64()
		for t := int64(0); ; {
			t += j.interval(r)
			if t >= horizon {
				break
			}
			jt = append(jt, t)
			jf = append(jf, j.Lo+(j.Hi-j.Lo)*r.Float64())
		}
	}
	points := append(make([]int64, 0, len(jt)+2*len(spec.Phases)+warmSteps+1), jt...)
	for _, p := range spec.Phases {
		points = append(points, int64(p.From), int64(p.To))
	}
	if spec.Cold > 0 {
		for k := range warmSteps + 1 {
			points = append(points, int64(spec.Join)+int64(k)*int64(spec.WarmUp)/warmSteps)
		}
	}
	slices.Sort(points)
	points = slices.Compact(points)
	b.from = make([]int64, 0, len(points))
	b.mean = make([]float64, 0, len(points))
	k := 0
	for _, t := range points {
		if t < 0 {
			continue
		}
		for k+1 < len(jt) && jt[k+1] <= t {
			k++
		}
		m := float64(spec.Mean) * jf[k]
		for _, p := range spec.Phases {
			if t >= int64(p.From) && t < int64(p.To) {
				m *= p.Factor
			}
		}
		m /= spec.speed(t)
		b.from = append(b.from, t)
		b.mean = append(b.mean, m)
	}
	return b
}

// loop runs events until none is left. Arrivals stop at the scenario's
// duration; the requests still in the system then run to completion.
//
// The next arrival waits outside the heap: there is only ever one, and
// keeping it apart halves the heap operations.
func (w *world) loop() {
	w.arrival = event{at: int64(w.arr.ExpFloat64() * w.gap), kind: evArrival, seq: w.seq}
	w.seq++
	for (w.arrival.at < w.dur || len(w.q) > 0) && w.err == nil {
		var ev event
		if w.arrival.at < w.dur && (len(w.q) == 0 || w.arrival.before(&w.q[0])) {
			ev = w.arrival
		} else {
			ev = w.pop()
		}
		if w.subset != nil {
			w.subset.advance(w, ev.at)
		}
		for w.nextSample <= ev.at && w.nextSample < w.dur {
			w.sample()
			w.nextSample += sampleEvery
		}
		w.weigh(ev.at)
		w.now = ev.at
		switch ev.kind {
		case evArrival:
			w.arrive()
		case evReply:
			w.reply(ev)
		case evJobArrive:
			w.jobArrive(ev.req)
		case evJobEnd:
			w.jobEnd(ev.req)
		case evProbeArrive:
			w.probeArrive(ev.req)
		case evProbeAnswer:
			w.probeAnswer(ev.req)
		case evJoin:
			w.join(ev.req)
		default:
			w.hedgeEvent(ev)
		}
	}
	w.weigh(math.MaxInt64)
}

// weigh records client 0's effective weights at the end of every bucket
// that ends at or before t. Weights change only inside Pick and Done, so
// the state before the event at t is the state at the bucket's end.
func (w *world) weigh(t int64) {
	n := len(w.backends)
	for w.nextWeigh*n < len(w.weights) && int64(w.nextWeigh+1)*int64(Bucket) <= t {
		row := w.weights[w.nextWeigh*n : (w.nextWeigh+1)*n]
		for i, p := range w.clients[0].peers {
			row[i] = int32(weightOf(p.Snapshot()))
		}
		w.nextWeigh++
	}
}

func (w *world) arrive() {
	next := w.now + int64(w.arr.ExpFloat64()*w.gap)
	c := 0
	if len(w.clients) > 1 {
		c = w.arr.IntN(len(w.clients))
	}
	e, z := w.arr.ExpFloat64(), w.arr.NormFloat64()
	var i int32
	if n := len(w.free); n > 0 {
		i = w.free[n-1]
		w.free = w.free[:n-1]
	} else {
		i = int32(len(w.reqs))
		w.reqs = append(w.reqs, request{})
	}
	q := &w.reqs[i]
	q.arrived, q.client, q.attempts, q.e, q.z = w.now, int32(c), 0, e, z
	if b := w.clients[c].budget; b != nil {
		b.Deposit()
	}
	w.send(i)
	w.arrival = event{at: next, kind: evArrival, seq: w.seq}
	w.seq++
}

// send starts the next attempt of request i.
func (w *world) send(i int32) {
	if w.h != nil {
		w.hArrive(i)
		return
	}
	q := &w.reqs[i]
	c := &w.clients[q.client]
	var p *balancer.Peer
	var err error
	if c.budget != nil && q.attempts > 0 {
		// A retry, as balancerhttp's Transport asks for one.
		a := balancer.Attempts{Picker: c.picker, Request: &q.r, Budget: c.budget}
		p, err = a.Next(context.Background(), int(q.attempts))
	} else {
		p, err = c.picker.Pick(&q.r)
	}
	if err != nil {
		// No peer for this attempt (nginx's 502), or no retry the budget
		// allows: the request fails now.
		if q.attempts == 0 {
			w.refused++
			if w.sc.Window.contains(q.arrived) {
				w.winRefused++
			}
		}
		if errors.Is(err, balancer.ErrRetryBudget) {
			w.budgetRefused++
		}
		w.finish(i, true)
		return
	}
	if p == nil {
		w.err = fmt.Errorf("Pick returned a nil peer and no error")
		return
	}
	b, ok := c.index[p]
	if !ok {
		w.err = fmt.Errorf("Pick returned peer %v, not one of its own", p)
		return
	}
	q.peer, q.backend, q.sent = p, b, w.now
	q.attempts++
	w.attempts++
	if w.sc.Window.contains(w.now) {
		w.winAttempts++
	}
	n := len(w.backends)
	if k := int(w.now/int64(Bucket))*n + int(b); k < len(w.picks) {
		w.picks[k]++
	}
	be := &w.backends[b]
	be.srv.settle(w.now) // keeps the late attempts few
	if !be.far() {
		q.rif = int64(be.rif) + int64(len(be.srv.late))
	}
	be.rif++
	q.gen++
	q.loaded = false
	var at int64
	var failed bool
	if be.far() {
		at, failed = w.serveFar(be, i)
	} else {
		at, failed = w.serve(be, q)
	}
	w.push(event{at: at, kind: evReply, req: i, failed: failed})
}

// serve returns when the client sees the end of attempt q on backend be and
// whether it failed, and notes in q the attempt's fault and when the
// backend ends it: a fast error when it answers, a stall at the client's
// deadline (when the client closes the connection), a served attempt when
// its service ends, even past the deadline.
func (w *world) serve(be *backendState, q *request) (int64, bool) {
	deadline := w.now + w.timeout
	q.mode = 0
	if be.shed > 0 && q.rif >= be.shed {
		// Shed: refused at once, as an overloaded server answers 503.
		q.mode = FastError
		q.end = min(w.now+int64(FastErrorDelay), deadline)
		return q.end, true
	}
	if mode, prob := be.faultAt(w.now); prob > 0 && (prob >= 1 || be.flt.Float64() < prob) {
		q.mode = mode
		if mode == FastError {
			q.end = min(w.now+int64(FastErrorDelay), deadline)
			return q.end, true
		}
		q.end = deadline
		return deadline, true
	}
	e, z := q.e, q.z
	if q.attempts > 1 {
		e, z = be.svc.ExpFloat64(), be.svc.NormFloat64()
	}
	start, k := w.now, -1
	if be.workers != nil {
		k = be.earliest()
		if free := be.workers[k]; free < w.now {
			be.srv.idleUntil(free, w.now)
		}
		start = max(start, be.workers[k])
	}
	end := start + be.service(start, e, z)
	q.end = end
	w.serviceTime += end - start
	if k >= 0 {
		// A job the client gave up on still occupies its worker: the
		// server does not know the client left.
		be.workers[k] = end
	}
	if end > deadline {
		return deadline, true
	}
	return end, false
}

// reply ends the current attempt of a request: the outcome goes to the
// picker, then the request finishes or tries again.
func (w *world) reply(ev event) {
	q := &w.reqs[ev.req]
	be := &w.backends[q.backend]
	o := balancer.Outcome{Failed: ev.failed, Latency: time.Duration(w.now - q.sent)}
	switch {
	case be.far():
		// The backend wrote its report, if any, as it ended the job
		// (jobEnd), and counted the job then.
		if w.reports && q.loaded {
			w.load = q.load
			o.Load = &w.load
		}
	default:
		if w.reports && (!ev.failed || q.mode == FastError) {
			// The backend answered: its report rides on the reply.
			be.fill(&w.load, w.now)
			o.Load = &w.load
		}
		if q.end > w.now {
			// Timed out in service: the backend ends it later.
			be.srv.late = append(be.srv.late, lateJob{from: q.sent, end: q.end, rif: q.rif})
		} else {
			be.srv.ended(q.sent, w.now, q.rif, q.mode != 0)
		}
	}
	be.rif--
	if err := w.clients[q.client].picker.Done(q.peer, o); err != nil {
		w.err = fmt.Errorf("Done(%v, %+v): %w", q.peer, o, err)
		return
	}
	if !ev.failed {
		w.finish(ev.req, false)
		return
	}
	w.failedAttempts++
	if q.attempts >= w.maxTries {
		w.finish(ev.req, true)
		return
	}
	w.send(ev.req)
}

// finish records request i's end and frees its slot.
func (w *world) finish(i int32, failed bool) {
	q := &w.reqs[i]
	lat := w.now - q.arrived
	w.lat = append(w.lat, lat)
	if failed {
		w.failed++
	}
	if q.arrived >= w.steady {
		w.steadySum += float64(lat)
		w.steadyN++
	}
	if w.sc.Measure != NoMeasure {
		if w.sc.Window.contains(q.arrived) {
			w.winRequests++
			w.winLat = append(w.winLat, lat)
			if failed {
				w.winFailed++
			}
		}
		if w.sc.Measure == WindowP99 && w.sc.Before.contains(q.arrived) {
			w.beforeLat = append(w.beforeLat, lat)
		}
	}
	q.r.Reset()
	q.peer = nil
	w.free = append(w.free, i)
}

// sample records the herd index now: the largest in-flight count over the
// mean in-flight count across backends. An idle instant has none.
func (w *world) sample() {
	var sum, top int32
	for i := range w.backends {
		r := w.backends[i].rif
		sum += r
		top = max(top, r)
	}
	if sum > 0 {
		w.herd = append(w.herd, float64(top)*float64(len(w.backends))/float64(sum))
	}
}

func (w *world) push(e event) {
	e.seq = w.seq
	w.seq++
	w.q = append(w.q, e)
	// Sift up.
	h := w.q
	j := len(h) - 1
	for j > 0 {
		p := (j - 1) / 2
		if !h[j].before(&h[p]) {
			break
		}
		h[j], h[p] = h[p], h[j]
		j = p
	}
}

func (w *world) pop() event {
	h := w.q
	top := h[0]
	last := len(h) - 1
	h[0] = h[last]
	h = h[:last]
	// Sift down.
	j := 0
	for {
		l := 2*j + 1
		if l >= len(h) {
			break
		}
		m := l
		if r := l + 1; r < len(h) && h[r].before(&h[l]) {
			m = r
		}
		if !h[m].before(&h[j]) {
			break
		}
		h[j], h[m] = h[m], h[j]
		j = m
	}
	w.q = h
	return top
}

func (e *event) before(o *event) bool {
	return e.at < o.at || e.at == o.at && e.seq < o.seq
}

// weightOf returns the weight a picker balances a peer by: the weight
// FastestFirst derives from latency, else nginx's effective weight.
func weightOf(st balancer.PeerStats) int {
	if st.DerivedWeight != 0 {
		return st.DerivedWeight
	}
	return st.EffectiveWeight
}

// warmSteps is how many steps a backend's warm-up takes (Backend.Cold).
const warmSteps = 100

// speed returns the backend's speed at t as a fraction of its nominal
// one: from Cold at Join rising linearly to 1 over WarmUp, constant over
// each of warmSteps steps at the speed of its middle; 1 without a warm-up.
func (b *Backend) speed(t int64) float64 {
	if b.Cold == 0 {
		return 1
	}
	k := int64(math.Floor(float64(t-int64(b.Join)) * warmSteps / float64(b.WarmUp)))
	switch {
	case k >= warmSteps:
		return 1
	case k < 0:
		return b.Cold // before it joins: no attempt reaches it
	}
	return b.Cold + (1-b.Cold)*(float64(k)+0.5)/warmSteps
}

// join adds backend i's peer to every client's picker, as a discovery
// update adding a new server does.
func (w *world) join(i int32) {
	for c := range w.clients {
		u, ok := w.clients[c].picker.(balancer.Updater)
		if !ok {
			w.err = fmt.Errorf("backend %d joins, and the picker %T cannot add a peer", i, w.clients[c].picker)
			return
		}
		if err := u.Add(w.clients[c].peers[i]); err != nil {
			w.err = fmt.Errorf("adding backend %d: %w", i, err)
			return
		}
	}
}
