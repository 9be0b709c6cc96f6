package sim

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/lbgo/balancer"
	"github.com/lbgo/balancer/retrybudget"
)

// Hedge configures hedged (backup) attempts, a policy's variant named with
// HedgeSuffix: when a request's attempt has not answered after a delay, its
// client sends one more attempt to a peer its picker chooses among those
// the request has not tried, takes the first answer that succeeds, and
// cancels the other.
//
// Budget is the most hedges per request, a share in [0, MaxHedgeBudget]:
// each client's hedges are taken from a retrybudget.Budget of that ratio
// with no minimum per second over HedgeBudgetWindow, on the virtual clock,
// where each request deposits, and stop while the client sees its
// attempts fail, as gRPC's retryThrottling (A6) stops hedges: each failed
// attempt takes a token, each success adds HedgeTokenRatio, and no hedge
// is sent while the client holds HedgeMaxTokens/2 or fewer (it starts
// with HedgeMaxTokens), so hedges stop once more than about one attempt
// in eleven fails and do not feed an overload. Delay, when positive, is a
// fixed delay;
// when 0, the default, the delay is the (1 − Budget) quantile of the
// client's own recent attempt latencies, as Finagle's BackupRequestFilter
// sets it (5% hedges at about p95): see HedgeHistory.
//
// The zero value is not usable (Budget 0 allows no hedge). A Hedge is a
// plain value, safe to share.
//
// Abort, when set, makes a backend stop a loser already in service when
// the cancel reaches it, freeing its worker, as a handler that watches its
// request's context does; by default it serves the loser to its end.
type Hedge struct {
	Budget float64
	Delay  time.Duration
	Abort  bool
}

// DefaultHedge is the hedging of the +hedge variants: at most 5% more
// attempts, at the delay the client's p95 gives. A share of requests ties
// the delay to the budget, so the budget is rarely what refuses a hedge
// while the latencies hold still; a fixed delay would need tuning to each
// fleet's latencies.
var DefaultHedge = Hedge{Budget: 0.05}

// MaxHedgeBudget bounds Hedge.Budget: a hedge for every other request is
// past what hedging is for.
const MaxHedgeBudget = 0.5

// HedgeSuffix ends the name of a picker's hedged variant:
// "P2CPeakEWMA+hedge".
const HedgeSuffix = "+hedge"

// HedgeBudgetWindow is the window of the hedge budget, Finagle's: 10 s.
const HedgeBudgetWindow = 10 * time.Second

// HedgeHistory is how far back a client's latencies set its percentile
// delay, and HedgeRecompute how often it is recomputed: Finagle's 30 s
// (three 10 s buckets) and 3 s. Until the first recompute, and while no
// latency is recorded, the client sends no hedge. Recorded are the
// latencies of the attempts that succeeded, that timed out (the timeout)
// and that a winner superseded (until they were cancelled, a lower bound);
// failures that answered are left out, as Finagle leaves out fast failures.
// The delay is at least MinHedgeDelay.
const (
	HedgeHistory   = 30 * time.Second
	HedgeRecompute = 3 * time.Second
	MinHedgeDelay  = time.Millisecond
)

// HedgeMaxTokens and HedgeTokenRatio are the hedge throttle's, the values
// of gRPC A6's retryThrottling example: 10 tokens, 0.1 per success.
const (
	HedgeMaxTokens  = 10
	HedgeTokenRatio = 0.1
)

// hedgeable lists the pickers whose +hedge variants HedgePolicies returns:
// the latency-aware ones and the probing one.
var hedgeable = []string{"P2CPeakEWMA", "FastestFirst", "LeastConn" + ReportedSuffix, "Prequal"}

// HedgePolicies returns the +hedge variants, with DefaultHedge, of the
// latency-aware pickers among Pickers (P2CPeakEWMA, FastestFirst,
// LeastConn+rif) and of Prequal, in that order, those that exist.
func HedgePolicies() []Policy {
	var out []Policy
	for _, name := range hedgeable {
		for _, p := range Pickers() {
			if p.Name == name {
				h, _ := Hedged(p, DefaultHedge)
				out = append(out, h)
			}
		}
	}
	return out
}

// Hedged returns p's variant with hedged attempts as h sets them, named
// p.Name + HedgeSuffix; of a policy hedged already, the same policy with h
// in place of its hedge, named as it is. It returns an error wrapping
// ErrInvalid for an oracle, a Budget outside [0, MaxHedgeBudget] or a
// negative Delay.
//
// A run of the variant serves every backend from an explicit
// first-come first-served queue, the service time drawn when service
// starts, so that a cancelled attempt can leave it. A cancel reaches the
// backend half a round trip after the client sends it: an attempt still
// waiting there leaves the queue unserved; one in service runs to its end
// and its worker's time is wasted (Result.HedgeWaste), as a handler that
// does not watch its request's context keeps working; one stalled (a
// Stall fault) ends then, as the closed connection ends it. With no hedge
// sent, a run serves every attempt as the plain policy's run does.
//
// A request sends at most one hedge, and only while a single attempt of it
// is in flight. A hedge is not a retry: the scenario's Tries bounds the
// other attempts only. An attempt that fails while the other is in flight
// is reported and the request waits for the other; when the last attempt
// in flight fails, the request is retried as without hedging. A loser is
// reported to the picker Abandoned and Superseded, with the time it was in
// flight.
func Hedged(p Policy, h Hedge) (Policy, error) {
	switch {
	case p.oracle != nil:
		return Policy{}, invalid("sim: %s is an oracle: it has no hedged variant", p.Name)
	case !(h.Budget >= 0 && h.Budget <= MaxHedgeBudget):
		return Policy{}, invalid("sim: hedge budget %v out of range [0, %v]", h.Budget, float64(MaxHedgeBudget))
	case h.Delay < 0:
		return Policy{}, invalid("sim: hedge delay %v is negative", h.Delay)
	}
	v := p
	if p.hedge == nil {
		v.Name = p.Name + HedgeSuffix
	}
	v.hedge = &h
	return v, nil
}

// hedgeByName returns the +hedge variant, with DefaultHedge, of the policy
// a name ending in HedgeSuffix names.
func hedgeByName(name string) (Policy, bool) {
	if len(name) <= len(HedgeSuffix) || !strings.EqualFold(name[len(name)-len(HedgeSuffix):], HedgeSuffix) {
		return Policy{}, false
	}
	base, ok := PolicyByName(name[:len(name)-len(HedgeSuffix)])
	if !ok || base.hedge != nil {
		return Policy{}, false
	}
	h, err := Hedged(base, DefaultHedge)
	return h, err == nil
}

// HedgeBase returns the name of the policy a hedged variant hedges, and
// false for a policy that does not hedge.
func (p Policy) HedgeBase() (string, bool) {
	if p.hedge == nil {
		return "", false
	}
	return strings.TrimSuffix(p.Name, HedgeSuffix), true
}

// Event kinds of a hedged run, apart from those of engine.go.
const (
	evHArrive  evKind = iota + 32 // an attempt reaches its backend (req: the attempt)
	evHEnd                        // a backend ends an attempt
	evHAnswer                     // an attempt's answer reaches its client
	evHTimeout                    // an attempt's deadline at its client
	evHTimer                      // an attempt's hedge delay is up
	evHCancel                     // a cancel reaches an attempt's backend
)

// Where an attempt is on its backend.
const (
	onWay   uint8 = iota // sent, not yet there
	waiting              // in the backend's queue
	running              // in service (or failing: a fault)
	ended                // ended, or left the queue
)

// attempt is one attempt of a hedged run.
type attempt struct {
	req     int32
	backend int32
	worker  int32 // -1: none (a fault, unlimited workers, not started)
	peer    *balancer.Peer
	sent    int64
	start   int64
	end     int64
	rif     int64   // the jobs the backend held when it arrived
	e, z    float64 // its service draws: the request's for its first attempt
	hedge   bool
	state   uint8
	mode    FaultMode
	// answered: the client has its outcome (an answer, its deadline, or
	// a cancel); cancelled: by a cancel.
	answered, cancelled bool
	failed              bool // the answer on its way is a failure
	loaded              bool
	load                balancer.ServerLoad
	pending             int32 // events of it in the queue
}

// hreq is a request's hedging state.
type hreq struct {
	inFlight [2]int32 // attempts in flight, -1 for none
	hedged   bool
}

// hclient is a client's hedging state: its budget and latency history.
type hclient struct {
	budget  *retrybudget.Budget
	at, lat []int64 // recorded latencies and when, in time order
	head    int     // the first still in the history
	delay   int64   // math.MaxInt64: none yet
	tokens  float64 // the throttle's
	next    int64   // the next recompute
	scratch []int64
}

// hqueue is a backend's queue in a hedged run.
type hqueue struct {
	wait []int32 // attempts waiting, first come first; some may have left
	head int
	run  []int32 // each worker's attempt, -1 when free
}

// hedgeRun is the state of a hedged run.
type hedgeRun struct {
	cfg      Hedge
	attempts []attempt
	free     []int32
	reqs     []hreq
	clients  []hclient

	sent, won, refused, throttled, left int
	waste                               int64
}

func newHedgeRun(w *world, h Hedge, clock func() time.Time) (*hedgeRun, error) {
	r := &hedgeRun{cfg: h, clients: make([]hclient, len(w.clients))}
	for c := range r.clients {
		b, err := retrybudget.New(h.Budget, 0, HedgeBudgetWindow, retrybudget.WithClock(clock))
		if err != nil {
			return nil, err
		}
		r.clients[c] = hclient{budget: b, delay: math.MaxInt64, next: int64(HedgeRecompute), tokens: HedgeMaxTokens}
	}
	for i := range w.backends {
		be := &w.backends[i]
		q := &hqueue{}
		if be.workers != nil {
			q.run = make([]int32, len(be.workers))
			for k := range q.run {
				q.run[k] = -1
			}
		}
		be.hq = q
	}
	return r, nil
}

// record adds an attempt's latency to client c's history.
func (c *hclient) record(now, lat int64) {
	c.at = append(c.at, now)
	c.lat = append(c.lat, lat)
}

// delayAt returns the client's hedge delay at now, recomputing it every
// HedgeRecompute.
func (c *hclient) delayAt(now int64, h Hedge) int64 {
	if h.Delay > 0 {
		return int64(h.Delay)
	}
	if now < c.next {
		return c.delay
	}
	for c.next <= now {
		c.next += int64(HedgeRecompute)
	}
	for c.head < len(c.at) && c.at[c.head] < now-int64(HedgeHistory) {
		c.head++
	}
	if c.head > len(c.at)/2 {
		n := copy(c.at, c.at[c.head:])
		copy(c.lat, c.lat[c.head:])
		c.at, c.lat, c.head = c.at[:n], c.lat[:n], 0
	}
	live := c.lat[c.head:]
	if len(live) == 0 {
		c.delay = math.MaxInt64
		return c.delay
	}
	c.scratch = append(c.scratch[:0], live...)
	slices.Sort(c.scratch)
	c.delay = max(percentile(c.scratch, 1-h.Budget), int64(MinHedgeDelay))
	return c.delay
}

// newAttempt returns a free attempt slot.
func (r *hedgeRun) newAttempt() int32 {
	if n := len(r.free); n > 0 {
		a := r.free[n-1]
		r.free = r.free[:n-1]
		return a
	}
	r.attempts = append(r.attempts, attempt{})
	return int32(len(r.attempts) - 1)
}

// push schedules an event of attempt a.
func (w *world) hpush(at int64, kind evKind, a int32) {
	w.h.attempts[a].pending++
	w.push(event{at: at, kind: kind, req: a})
}

// hArrive starts request i of a hedged run: its first attempt.
func (w *world) hArrive(i int32) {
	r := w.h
	for int(i) >= len(r.reqs) {
		r.reqs = append(r.reqs, hreq{})
	}
	r.reqs[i] = hreq{inFlight: [2]int32{-1, -1}}
	w.reqs[i].attempts = 0
	r.clients[w.reqs[i].client].budget.Deposit()
	w.hSend(i, false)
}

// hSend sends an attempt of request i, a hedge or not, and reports
// whether it did. A request whose attempt finds no peer fails unless a
// hedge was asked for or another attempt is in flight.
func (w *world) hSend(i int32, hedge bool) bool {
	r := w.h
	q := &w.reqs[i]
	c := &w.clients[q.client]
	var p *balancer.Peer
	var err error
	switch {
	case hedge:
		a := balancer.Attempts{Picker: c.picker, Request: &q.r, Budget: r.clients[q.client].budget}
		p, err = a.Next(context.Background(), int(max(q.attempts, 1)))
		if err != nil {
			if err == balancer.ErrRetryBudget {
				r.refused++
			}
			return false
		}
	case c.budget != nil && q.attempts > 0:
		a := balancer.Attempts{Picker: c.picker, Request: &q.r, Budget: c.budget}
		p, err = a.Next(context.Background(), int(q.attempts))
	default:
		p, err = c.picker.Pick(&q.r)
	}
	if err == nil && p == nil {
		w.err = fmt.Errorf("Pick returned a nil peer and no error")
		return false
	}
	b, ok := c.index[p]
	if err == nil && !ok {
		w.err = fmt.Errorf("Pick returned peer %v, not one of its own", p)
		return false
	}
	if err != nil {
		if q.attempts == 0 {
			w.refused++
			if w.sc.Window.contains(q.arrived) {
				w.winRefused++
			}
		}
		if err == balancer.ErrRetryBudget {
			w.budgetRefused++
		}
		w.finish(i, true)
		return false
	}
	a := r.newAttempt()
	at := &r.attempts[a]
	*at = attempt{req: i, backend: b, worker: -1, peer: p, sent: w.now, hedge: hedge, e: q.e, z: q.z}
	if q.attempts > 0 || hedge {
		// Drawn when service starts, from the backend's stream, as a
		// retry's are.
		at.e = math.NaN()
	}
	hr := &r.reqs[i]
	if hr.inFlight[0] < 0 {
		hr.inFlight[0] = a
	} else {
		hr.inFlight[1] = a
	}
	if hedge {
		hr.hedged = true
		r.sent++
	} else {
		q.attempts++
	}
	w.attempts++
	if w.sc.Window.contains(w.now) {
		w.winAttempts++
	}
	n := len(w.backends)
	if k := int(w.now/int64(Bucket))*n + int(b); k < len(w.picks) {
		w.picks[k]++
	}
	be := &w.backends[b]
	be.rif++
	w.hpush(w.now+w.timeout, evHTimeout, a)
	if !hr.hedged {
		if d := r.clients[q.client].delayAt(w.now, r.cfg); d < w.timeout {
			w.hpush(w.now+d, evHTimer, a)
		}
	}
	if be.up == 0 {
		w.hReach(a)
	} else {
		w.hpush(w.now+be.up, evHArrive, a)
	}
	return true
}

// hedgeEvent runs an event of a hedged run.
func (w *world) hedgeEvent(ev event) {
	r := w.h
	a := ev.req
	r.attempts[a].pending--
	switch ev.kind {
	case evHArrive:
		w.hReach(a)
	case evHEnd:
		w.hEnd(a)
	case evHAnswer:
		at := &r.attempts[a]
		if !at.answered {
			w.hOutcome(a, at.failed, false)
		}
	case evHTimeout:
		if !r.attempts[a].answered {
			w.hOutcome(a, true, true)
		}
	case evHTimer:
		w.hTimer(a)
	case evHCancel:
		w.hCancelArrives(a)
	}
	w.hRelease(a)
}

// hRelease frees attempt a's slot once nothing refers to it.
func (w *world) hRelease(a int32) {
	at := &w.h.attempts[a]
	if at.pending == 0 && at.answered && at.state == ended {
		*at = attempt{}
		w.h.free = append(w.h.free, a)
	}
}

// hReach: attempt a reaches its backend: it fails there (a fault, or shed),
// starts, or waits.
func (w *world) hReach(a int32) {
	at := &w.h.attempts[a]
	be := &w.backends[at.backend]
	at.rif = int64(be.arrived)
	be.arrived++
	if be.shed > 0 && at.rif >= be.shed {
		at.state, at.mode = running, FastError
		w.hpush(w.now+int64(FastErrorDelay), evHEnd, a)
		return
	}
	if mode, prob := be.faultAt(w.now); prob > 0 && (prob >= 1 || be.flt.Float64() < prob) {
		at.state, at.mode = running, mode
		end := at.sent + w.timeout + be.up // a stall ends when the client's close arrives
		if mode == FastError {
			end = w.now + int64(FastErrorDelay)
		}
		w.hpush(end, evHEnd, a)
		return
	}
	hq := be.hq
	if hq.run == nil {
		w.hStart(a, -1)
		return
	}
	for k, j := range hq.run {
		if j < 0 {
			w.hStart(a, k)
			return
		}
	}
	at.state = waiting
	hq.wait = append(hq.wait, a)
}

// hStart starts serving attempt a on worker k (-1: unlimited workers),
// drawing its service time now.
func (w *world) hStart(a int32, k int) {
	at := &w.h.attempts[a]
	be := &w.backends[at.backend]
	e, z := at.e, at.z
	if math.IsNaN(e) {
		e, z = be.svc.ExpFloat64(), be.svc.NormFloat64()
	}
	at.state, at.start, at.worker = running, w.now, int32(k)
	at.end = w.now + be.service(w.now, e, z)
	w.serviceTime += at.end - at.start
	if k >= 0 {
		if free := be.workers[k]; free < w.now {
			be.srv.idleUntil(free, w.now)
		}
		be.workers[k] = at.end
		be.hq.run[k] = a
	}
	w.hpush(at.end, evHEnd, a)
}

// hEnd: attempt a's backend ends it (for an attempt already ended by a
// cancel, nothing): it counts it, writes its report if the answer is
// still awaited, frees its worker for the next waiting attempt, and sends
// the answer.
func (w *world) hEnd(a int32) {
	at := &w.h.attempts[a]
	if at.state != running {
		return
	}
	be := &w.backends[at.backend]
	at.state = ended
	at.end = w.now
	deliver := !at.answered && at.mode != Stall
	if deliver && w.reports {
		be.fill(&at.load, w.now)
		at.loaded = true
	}
	be.srv.ended(at.sent+be.up, w.now, at.rif, at.mode != 0)
	be.arrived--
	if at.cancelled && at.mode == 0 {
		w.h.waste += w.now - at.start
	}
	if k := at.worker; k >= 0 {
		hq := be.hq
		hq.run[k] = -1
		be.workers[k] = w.now // before its time if aborted
		for hq.head < len(hq.wait) {
			next := hq.wait[hq.head]
			hq.head++
			if w.h.attempts[next].state == waiting {
				w.hStart(next, int(k))
				break
			}
		}
		if hq.head > 64 && hq.head > len(hq.wait)/2 {
			n := copy(hq.wait, hq.wait[hq.head:])
			hq.wait, hq.head = hq.wait[:n], 0
		}
	}
	if !deliver {
		return
	}
	at.failed = at.mode != 0
	if be.down == 0 {
		w.hOutcome(a, at.failed, false)
		return
	}
	w.hpush(w.now+be.down, evHAnswer, a)
}

// hOutcome gives the client attempt a's outcome: a reply (failed or not)
// or its deadline. A success ends the request and cancels the other
// attempt in flight; a failure with another in flight waits for it; the
// last failure retries or fails the request.
func (w *world) hOutcome(a int32, failed, timeout bool) {
	r := w.h
	at := &r.attempts[a]
	at.answered = true
	i := at.req
	q := &w.reqs[i]
	be := &w.backends[at.backend]
	be.rif--
	lat := w.now - at.sent
	o := balancer.Outcome{Failed: failed, Latency: time.Duration(lat)}
	if at.loaded && !timeout {
		w.load = at.load
		o.Load = &w.load
	}
	hc := &r.clients[q.client]
	if !failed || timeout {
		hc.record(w.now, lat)
	}
	if failed {
		hc.tokens = max(hc.tokens-1, 0)
	} else {
		hc.tokens = min(hc.tokens+HedgeTokenRatio, HedgeMaxTokens)
	}
	if err := w.clients[q.client].picker.Done(at.peer, o); err != nil {
		w.err = fmt.Errorf("Done(%v, %+v): %w", at.peer, o, err)
		return
	}
	hr := &r.reqs[i]
	other := hr.inFlight[0]
	if other == a {
		other = hr.inFlight[1]
	}
	hr.inFlight = [2]int32{other, -1}
	if !failed {
		if at.hedge {
			r.won++
		}
		if other >= 0 {
			w.hCancel(other)
		}
		w.finish(i, false)
		return
	}
	w.failedAttempts++
	if other >= 0 {
		return // the other may yet succeed
	}
	if q.attempts >= w.maxTries {
		w.finish(i, true)
		return
	}
	w.hSend(i, false)
}

// hCancel cancels attempt a, whose request another attempt won: the
// picker hears it Abandoned and Superseded now, its backend of the cancel half a round
// trip later.
func (w *world) hCancel(a int32) {
	at := &w.h.attempts[a]
	at.answered, at.cancelled = true, true
	be := &w.backends[at.backend]
	be.rif--
	lat := w.now - at.sent
	c := w.reqs[at.req].client
	w.h.clients[c].record(w.now, lat)
	if err := w.clients[c].picker.Done(at.peer, balancer.Outcome{Abandoned: true, Superseded: true, Latency: time.Duration(lat)}); err != nil {
		w.err = fmt.Errorf("Done(%v, abandoned): %w", at.peer, err)
		return
	}
	if be.up == 0 {
		w.hCancelArrives(a)
		return
	}
	w.hpush(w.now+be.up, evHCancel, a)
}

// hCancelArrives: the cancel of attempt a reaches its backend. Waiting, it
// leaves the queue; stalled, it ends; in service, it runs on.
func (w *world) hCancelArrives(a int32) {
	at := &w.h.attempts[a]
	be := &w.backends[at.backend]
	switch {
	case at.state == waiting:
		at.state = ended
		be.arrived--
		w.h.left++
	case at.state == running && (at.mode == Stall || w.h.cfg.Abort && at.mode == 0):
		if at.mode == 0 {
			w.serviceTime -= at.end - w.now // not served after all
		}
		w.hEnd(a)
	}
}

// hTimer: attempt a's hedge delay is up. If it is still the request's one
// attempt in flight, and the request has sent no hedge, the client sends
// one, as its throttle and budget allow.
func (w *world) hTimer(a int32) {
	at := &w.h.attempts[a]
	if at.answered {
		return
	}
	hr := &w.h.reqs[at.req]
	if hr.hedged || hr.inFlight[1] >= 0 {
		return
	}
	if w.h.clients[w.reqs[at.req].client].tokens <= HedgeMaxTokens/2 {
		w.h.throttled++
		return
	}
	w.hSend(at.req, true)
}
