package sim

import (
	"math/rand/v2"
	"time"

	"github.com/lbgo/balancer"
)

// ProbeTimeout is how long a simulated client waits for a probe's answer:
// a probe of a stalled backend, or one whose round trip is longer, is
// answered Failed this long after it was sent. 250 ms: a server that has
// not answered a probe, which does no work, by then is stalled or far,
// and a later answer would be stale in a pool of answers at most a second
// old.
const ProbeTimeout = 250 * time.Millisecond

// ProbeCost is the server time one probe answer is counted as: 50 µs, a
// whole probe over loopback answered by loadreport's Middleware with a raw
// TCP client that does little of its own (52.4 µs, BENCHMARKS.md, probes
// section), so a bound above the server's part. The Middleware answers a
// probe without entering the application, so a probe occupies no worker
// and delays no request: it is counted (Result.ProbeTime), not queued. At
// 3 probes a request against service times of 10 to 30 ms it is under 1%
// of the servers' time.
const ProbeCost = 50 * time.Microsecond

// probe is one probe in flight.
type probe struct {
	to      balancer.ProbeReceiver
	peer    *balancer.Peer
	backend int32
	sent    int64
	ans     balancer.ProbeAnswer
}

// prober is a client's balancer.Prober in a run: each probe is two events
// on the virtual clock. Half a round trip after Probe, the backend reads
// its state: the jobs it holds and its latency estimate (serverView,
// latency), as package loadreport's Tracker would report them; half a
// round trip later the answer reaches the client, and the run calls
// to.Answer on its own goroutine. A stalled backend does not answer: the
// probe fails ProbeTimeout after it was sent. A backend failing fast
// answers, with the few jobs it holds and the short latency of its
// errors.
//
// A prober belongs to one run: Probe may be called only from the picker's
// Pick, Done or Answer, on the run's goroutine. It allocates nothing once
// the run holds as many probes in flight as it ever will.
type prober struct {
	w *world
	c int32
}

// Probe schedules a probe of p, one of the client's peers; it drops a
// probe of any other peer, or with no receiver, without an answer.
func (pr *prober) Probe(p *balancer.Peer, to balancer.ProbeReceiver) {
	w := pr.w
	b, ok := w.clients[pr.c].index[p]
	if !ok || to == nil {
		return
	}
	w.probesSent++
	i := w.newProbe()
	w.probes[i] = probe{to: to, peer: p, backend: b, sent: w.now}
	be := &w.backends[b]
	if be.up >= int64(ProbeTimeout) {
		w.probes[i].ans.Failed = true
		w.push(event{at: w.now + int64(ProbeTimeout), kind: evProbeAnswer, req: i})
		return
	}
	w.push(event{at: w.now + be.up, kind: evProbeArrive, req: i})
}

// probeArrive: probe i reaches its backend, which answers it unless it
// stalls.
func (w *world) probeArrive(i int32) {
	pr := &w.probes[i]
	be := &w.backends[pr.backend]
	timeout := pr.sent + int64(ProbeTimeout)
	if mode, prob := be.faultAt(w.now); mode == Stall && prob > 0 && (prob >= 1 || w.probeFaults().Float64() < prob) {
		pr.ans.Failed = true
		w.push(event{at: timeout, kind: evProbeAnswer, req: i})
		return
	}
	w.probesServed++
	inFlight, _ := be.serverView(w.now)
	pr.ans = balancer.ProbeAnswer{
		InFlight:  float64(inFlight),
		Latency:   be.latency(w.now, int64(inFlight)),
		RoundTrip: time.Duration(be.up + be.down),
	}
	be.lieProbe(&pr.ans)
	at := w.now + be.down
	if at > timeout {
		pr.ans = balancer.ProbeAnswer{Failed: true}
		at = timeout
	}
	w.push(event{at: at, kind: evProbeAnswer, req: i})
}

// probeAnswer: probe i's answer reaches its client.
func (w *world) probeAnswer(i int32) {
	pr := &w.probes[i]
	if pr.ans.Failed {
		w.probesFailed++
	}
	to, p, a := pr.to, pr.peer, pr.ans
	*pr = probe{}
	w.freeProbe = append(w.freeProbe, i)
	if err := to.Answer(p, a); err != nil {
		w.probesRefused++
	}
}

// probeFaults returns the stream of draws for probes that reach a backend
// stalling with a probability below 1, made on first use: the attempts'
// fault draws stay those of every other policy.
func (w *world) probeFaults() *rand.Rand {
	if w.pflt == nil {
		w.pflt = stream(w.seed, w.sc.Name, "probe faults", 0)
	}
	return w.pflt
}

// newProbe returns a free slot of w.probes.
func (w *world) newProbe() int32 {
	if n := len(w.freeProbe); n > 0 {
		i := w.freeProbe[n-1]
		w.freeProbe = w.freeProbe[:n-1]
		return i
	}
	w.probes = append(w.probes, probe{})
	return int32(len(w.probes) - 1)
}
