package sim

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lbgo/balancer"
)

// TestNetworkDelayDerived runs one backend of one worker with a constant
// 8 ms service time and a 6 ms round trip under three clients, 100
// requests/s, a 30 ms timeout and no retry, and derives every reply and
// its report from the attempts' send times alone: an attempt reaches the
// backend 3 ms after it is sent; first-come first-served, its job starts
// then or when the one before it ends; the reply reaches the client 3 ms
// after the job ends, or the client gives up 30 ms after sending; the
// report is the server's state when the job ends (every job that has
// reached it and not ended, the replying one included; the jobs ended in
// the window; the busy time in the window), not when the client reads it.
func TestNetworkDelayDerived(t *testing.T) {
	const service, timeout, rtt = 8 * ms, 30 * ms, 6 * ms
	sc := single(Backend{Workers: 1, Mean: time.Duration(service), Dist: LogNormal, RTT: time.Duration(rtt)}, 100, 5*time.Second)
	sc.Clients, sc.Timeout, sc.Tries = 3, time.Duration(timeout), 1
	var log replyLog
	res, err := Run(&sc, logPolicy(&log), 1)
	require.NoError(t, err)
	require.Greater(t, res.Requests, 400)

	type job struct{ send, arrive, start, end int64 }
	jobs := make([]job, len(log.sends))
	bySend := map[int64]int{}
	var free int64
	for i, s := range log.sends {
		arrive := s + rtt/2
		start := max(arrive, free)
		free = start + service
		jobs[i] = job{s, arrive, start, free}
		bySend[s] = i
	}
	require.Len(t, log.replies, len(jobs), "one reply per attempt")

	var timedOut, reported int
	for _, r := range log.replies {
		i, ok := bySend[r.sent]
		require.True(t, ok, "a reply to an attempt never sent, at %d", r.sent)
		j := jobs[i]
		wantFailed := j.end+rtt/2 > j.send+timeout
		require.Equal(t, wantFailed, r.failed, "attempt sent at %d", j.send)
		if wantFailed {
			timedOut++
			assert.Equal(t, j.send+timeout, r.at)
			assert.Nil(t, r.load, "a timeout carries no report")
			continue
		}
		require.Equal(t, j.end+rtt/2, r.at, "the reply reaches the client half a round trip after the job ends")
		require.NotNil(t, r.load, "a reply without a report")
		reported++
		now := j.end // the server writes the report as the job ends
		cur := now / reportWidth
		lo := max(cur-9, 0) * reportWidth
		sp := max(min(9*reportWidth+now-cur*reportWidth, now), reportWidth)
		covered := min(sp, now)
		var inFlight, ended int
		var busy int64
		for k, o := range jobs {
			if k == i || o.arrive <= now && o.end > now {
				inFlight++
			}
			if k != i && o.end >= lo && o.end <= now {
				ended++
			}
			busy += max(0, min(o.end, now)-max(o.start, now-covered))
		}
		assert.Equal(t, float64(inFlight), r.load.InFlight, "in flight at %d", now)
		assert.InDelta(t, float64(ended)/(float64(sp)/1e9), r.load.RPS, 1e-9, "rps at %d", now)
		assert.InDelta(t, float64(busy)/float64(covered), r.load.Utilization, 1e-9, "utilization at %d", now)
	}
	assert.Positive(t, timedOut)
	assert.Positive(t, reported)
}

// TestNetworkDelayFaults: with a 10 ms round trip a fast error reaches
// the client 1 ms plus the round trip after it was sent, and a stall
// fails at the timeout.
func TestNetworkDelayFaults(t *testing.T) {
	for _, tt := range []struct {
		mode FaultMode
		want time.Duration
	}{{FastError, FastErrorDelay + 10*time.Millisecond}, {Stall, 100 * time.Millisecond}} {
		sc := single(Backend{Workers: 1, Mean: time.Millisecond, RTT: 10 * time.Millisecond}, 50, 2*time.Second)
		sc.Backends[0].Faults = []Fault{{From: time.Second, To: time.Hour, Mode: tt.mode, Prob: 1}}
		sc.Tries, sc.Timeout = 1, 100*time.Millisecond
		var log replyLog
		_, err := Run(&sc, logPolicy(&log), 2)
		require.NoError(t, err)
		var failed int
		for _, r := range log.replies {
			// The fault is read when the attempt reaches the backend.
			if r.sent+5*ms < int64(time.Second) {
				assert.False(t, r.failed)
				continue
			}
			require.True(t, r.failed, "%v: sent at %d", tt.mode, r.sent)
			failed++
			assert.Equal(t, int64(tt.want), r.at-r.sent, "%v", tt.mode)
			assert.Equal(t, tt.mode == FastError, r.load != nil, "%v: a fast error carries a report, a stall none", tt.mode)
		}
		assert.Positive(t, failed)
	}
}

// probeLog records a probing test picker's probes and their answers.
type probeLog struct {
	sent    []int64 // when each probe was sent
	answers []loggedAnswer
}

type loggedAnswer struct {
	at   int64
	peer *balancer.Peer
	a    balancer.ProbeAnswer
}

// probingPicker sends every attempt to peer pick(peers) and, on every
// Done, probes the peer that answered: the smallest ProbeReceiver and
// probing picker, for the tests of the probe model.
type probingPicker struct {
	peers  []*balancer.Peer
	now    func() time.Time
	prober balancer.Prober
	rng    *rand.Rand
	log    *probeLog
}

func (p *probingPicker) at() int64 { return int64(p.now().Sub(epoch)) }

func (p *probingPicker) Pick(*balancer.Request) (*balancer.Peer, error) {
	return p.peers[p.rng.IntN(len(p.peers))], nil
}

func (p *probingPicker) Done(peer *balancer.Peer, _ balancer.Outcome) error {
	p.log.sent = append(p.log.sent, p.at())
	p.prober.Probe(peer, p)
	return nil
}

func (p *probingPicker) Answer(peer *balancer.Peer, a balancer.ProbeAnswer) error {
	p.log.answers = append(p.log.answers, loggedAnswer{p.at(), peer, a})
	return nil
}

func probingPolicy(log *probeLog) Policy {
	return Policy{Name: "probing", Probed: func(peers []*balancer.Peer, now func() time.Time, src rand.Source, pr balancer.Prober) (balancer.Picker, error) {
		return &probingPicker{peers: peers, now: now, prober: pr, rng: rand.New(src), log: log}, nil
	}}
}

// TestProbeDerived: a probe of a backend with a 6 ms round trip is
// answered 6 ms after it is sent, on the virtual clock, with the state of
// the server when the probe reached it, 3 ms after sending: its requests
// in flight r (every job that has reached it and not ended) and its
// latency at r as loadreport's Tracker answers a probe: the mean duration
// on the server (arrival to end) of the jobs ended in the last second
// that found as many others in flight as r within a factor of 2 (levels
// 0, 1, 2-3, 4-7, ...); if none, of the highest lower level that has
// some, scaled by (r+1)/(their mean count+1); if none, of every job ended
// in the window. The round trip is the 6 ms. Everything is derived here from the attempts' send times, as
// in TestNetworkDelayDerived.
func TestProbeDerived(t *testing.T) {
	const service, timeout, rtt = 8 * ms, 30 * ms, 6 * ms
	sc := single(Backend{Workers: 1, Mean: time.Duration(service), Dist: LogNormal, RTT: time.Duration(rtt)}, 100, 5*time.Second)
	sc.Timeout, sc.Tries = time.Duration(timeout), 1
	var sends replyLog
	var log probeLog
	both := probingPolicy(&log)
	probed := both.Probed
	both.Probed = func(peers []*balancer.Peer, now func() time.Time, src rand.Source, pr balancer.Prober) (balancer.Picker, error) {
		p, err := probed(peers, now, src, pr)
		return &sendLogger{Picker: p, receiver: p.(balancer.ProbeReceiver), now: now, log: &sends}, err
	}
	res, err := Run(&sc, both, 1)
	require.NoError(t, err)

	type job struct{ arrive, end, rif int64 }
	var jobs []job
	var free int64
	for _, s := range sends.sends {
		arrive := s + rtt/2
		start := max(arrive, free)
		free = start + service
		var rif int64
		for _, o := range jobs {
			if o.end > arrive {
				rif++
			}
		}
		jobs = append(jobs, job{arrive, free, rif})
	}
	level := func(r int64) int {
		k := 0
		for r > 0 {
			k++
			r >>= 1
		}
		return k
	}
	require.Len(t, log.answers, len(log.sent), "every probe answered once")
	assert.Equal(t, len(log.sent), res.Probes)
	assert.InDelta(t, float64(len(log.sent))/float64(res.Requests), res.ProbesPerRequest(), 1e-12)
	var busy int
	for k, a := range log.answers {
		sent := log.sent[k] // one backend, one round trip: answers in order
		require.Equal(t, sent+rtt, a.at, "probe %d", k)
		require.False(t, a.a.Failed)
		assert.Equal(t, time.Duration(rtt), a.a.RoundTrip)
		now := sent + rtt/2
		lo := max(now/reportWidth-9, 0) * reportWidth
		var inFlight, ended int
		var sum int64
		var n, dur, rifs [40]int64 // by level
		for _, o := range jobs {
			if o.arrive <= now && o.end > now {
				inFlight++
			}
			if o.end >= lo && o.end <= now {
				ended++
				sum += o.end - o.arrive
				k := level(o.rif)
				n[k]++
				dur[k] += o.end - o.arrive
				rifs[k] += o.rif
			}
		}
		assert.Equal(t, float64(inFlight), a.a.InFlight, "in flight at %d", now)
		want := time.Duration(0)
		if ended > 0 {
			want = time.Duration(sum / int64(ended))
		}
		for k := level(int64(inFlight)); k >= 0; k-- {
			if n[k] == 0 {
				continue
			}
			mean := float64(dur[k]) / float64(n[k])
			if k < level(int64(inFlight)) {
				mean *= float64(inFlight+1) / (float64(rifs[k])/float64(n[k]) + 1)
			}
			want = time.Duration(mean)
			break
		}
		assert.InDelta(t, float64(want), float64(a.a.Latency), 1, "latency at %d", now)
		if inFlight > 1 {
			busy++
		}
	}
	assert.Greater(t, len(log.answers), 400)
	assert.Positive(t, busy, "the test means something: probes found queues")
}

// sendLogger logs the send time of every attempt of the picker it wraps,
// and passes its probe answers on.
type sendLogger struct {
	balancer.Picker
	receiver balancer.ProbeReceiver
	now      func() time.Time
	log      *replyLog
}

func (s *sendLogger) Pick(r *balancer.Request) (*balancer.Peer, error) {
	s.log.sends = append(s.log.sends, int64(s.now().Sub(epoch)))
	return s.Picker.Pick(r)
}

func (s *sendLogger) Answer(p *balancer.Peer, a balancer.ProbeAnswer) error {
	return s.receiver.Answer(p, a)
}

// TestProbeFaults: a backend that fails fast answers its probes (its
// requests end at once: few in flight, a latency near FastErrorDelay),
// the weakness a probing picker must guard against; a stalled one does
// not, and the probe fails ProbeTimeout after it was sent.
func TestProbeFaults(t *testing.T) {
	for _, mode := range []FaultMode{FastError, Stall} {
		sc := single(Backend{Workers: 1, Mean: 5 * time.Millisecond, RTT: 2 * time.Millisecond}, 100, 4*time.Second)
		sc.Backends[0].Faults = []Fault{{From: time.Second, To: time.Hour, Mode: mode, Prob: 1}}
		sc.Tries, sc.Timeout = 1, 300*time.Millisecond
		var log probeLog
		res, err := Run(&sc, probingPolicy(&log), 3)
		require.NoError(t, err)
		require.Len(t, log.answers, len(log.sent))
		var late, failed int
		for k, a := range log.answers {
			sent := log.sent[k]
			if a.a.Failed {
				failed++
			}
			if sent+int64(time.Millisecond) < int64(time.Second) {
				assert.False(t, a.a.Failed)
				continue
			}
			if sent < int64(3*time.Second) {
				continue // the window still holds requests from before the fault
			}
			late++
			if mode == Stall {
				assert.True(t, a.a.Failed, "a stalled backend answered a probe sent at %d", sent)
				assert.Equal(t, sent+int64(ProbeTimeout), a.at)
				continue
			}
			assert.False(t, a.a.Failed)
			assert.LessOrEqual(t, a.a.InFlight, 2.0)
			assert.InDelta(t, float64(FastErrorDelay), float64(a.a.Latency), float64(10*time.Microsecond))
		}
		assert.Positive(t, late, "%v", mode)
		if mode == Stall {
			assert.Equal(t, failed, res.ProbesFailed)
		} else {
			assert.Zero(t, res.ProbesFailed)
		}
	}
}

// TestProbeDeterministic: a run with probes and round trips is the same
// bit for bit for the same seed, and differs for another.
func TestProbeDeterministic(t *testing.T) {
	sc := mustLookup(t, "fleet16")
	sc.Duration = 5 * time.Second
	for i := range sc.Backends {
		sc.Backends[i].RTT = time.Duration(i+1) * time.Millisecond
	}
	run := func(seed uint64) string {
		var log probeLog
		r, err := Run(&sc, probingPolicy(&log), seed)
		require.NoError(t, err)
		require.Positive(t, r.Probes)
		out := fmt.Sprintf("%+v %v", r, log.sent)
		for _, a := range log.answers {
			out += fmt.Sprintf(" %d %s %+v", a.at, a.peer.Addr(), a.a)
		}
		return out
	}
	first := run(1)
	assert.True(t, first == run(1), "same seed, different run")
	assert.False(t, first == run(2), "different seeds, same run")
}

// TestProbeAnswerErrorsCounted: an answer the receiver refuses (a peer it
// no longer holds) is counted, not fatal.
func TestProbeAnswerErrorsCounted(t *testing.T) {
	sc := single(Backend{Workers: 1, Mean: 5 * time.Millisecond}, 50, time.Second)
	pol := Policy{Name: "refusing", Probed: func(peers []*balancer.Peer, now func() time.Time, src rand.Source, pr balancer.Prober) (balancer.Picker, error) {
		return &refusingPicker{probingPicker{peers: peers, now: now, prober: pr, rng: rand.New(src), log: &probeLog{}}}, nil
	}}
	r, err := Run(&sc, pol, 1)
	require.NoError(t, err)
	assert.Positive(t, r.Probes)
	assert.Equal(t, r.Probes, r.ProbesRefused)
}

type refusingPicker struct{ probingPicker }

func (p *refusingPicker) Done(peer *balancer.Peer, _ balancer.Outcome) error {
	p.prober.Probe(peer, p)
	return nil
}

func (p *refusingPicker) Answer(*balancer.Peer, balancer.ProbeAnswer) error {
	return balancer.ErrUnknownPeer
}

// TestReportProbeColumns: a table gets the probe columns when one of its
// policies probed, with that policy's probes per request and the server
// time they took over the service time; a table without probes has none.
func TestReportProbeColumns(t *testing.T) {
	var log probeLog
	rep := shortReport(t, []string{"uniform"}, []Policy{policy(t, "SmoothWRR"), probingPolicy(&log)}, 1)
	m, ok := rep.Find("uniform", "probing")
	require.True(t, ok)
	r := m.Runs[0]
	// One probe per Done, one Done per attempt; nothing fails here.
	assert.Equal(t, r.Attempts, r.Probes)
	assert.Equal(t, r.Requests, r.Attempts)
	assert.Equal(t, time.Duration(r.Probes)*ProbeCost, r.ProbeTime)
	// 10 ms of service a request, 50 µs a probe: 0.5%.
	assert.InDelta(t, 0.005, r.ProbeLoad(), 0.0005)
	var b bytes.Buffer
	require.NoError(t, rep.Write(&b, false))
	assert.Contains(t, b.String(), "probes/req")
	assert.Contains(t, b.String(), "probe load %")
	assert.Regexp(t, `probing +[^\n]* 1\.00 +0\.(49|50|51)[0-9] `, b.String())

	quiet := shortReport(t, []string{"uniform"}, []Policy{policy(t, "SmoothWRR")}, 1)
	b.Reset()
	require.NoError(t, quiet.Write(&b, true))
	assert.NotContains(t, b.String(), "probes/req")
}

// TestPrequalDeterministic: Prequal's runs, probes and round trips
// included, print the same bytes for the same seed whatever the
// parallelism, and others for another seed.
func TestPrequalDeterministic(t *testing.T) {
	scs := []Scenario{mustLookup(t, "zones16"), mustLookup(t, "fastfail16")}
	for i := range scs {
		scs[i].Duration = 20 * time.Second
	}
	pols := []Policy{policy(t, "Prequal"), policy(t, OracleSED)}
	render := func(seed uint64, parallel int) string {
		rep, err := Compare(scs, pols, Options{Seeds: 2, Seed: seed, Parallel: parallel})
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, rep.Write(&b, true))
		for _, sum := range rep.Summaries {
			for _, r := range sum[0].Runs {
				fmt.Fprintf(&b, "%+v\n", *r)
			}
		}
		return b.String()
	}
	first := render(1, 1)
	assert.Contains(t, first, "probes/req")
	assert.True(t, first == render(1, 3), "same seed, different output")
	assert.False(t, first == render(4, 2), "different seeds, same output")
}

// quietProber picks at random and, when probe is set, probes the peer of
// every Done, keeping nothing: what a run allocates for it is the run's.
type quietProber struct {
	peers  []*balancer.Peer
	rng    *rand.Rand
	prober balancer.Prober
	probe  bool
}

func (p *quietProber) Pick(*balancer.Request) (*balancer.Peer, error) {
	return p.peers[p.rng.IntN(len(p.peers))], nil
}

func (p *quietProber) Done(peer *balancer.Peer, _ balancer.Outcome) error {
	if p.probe {
		p.prober.Probe(peer, p)
	}
	return nil
}

func (p *quietProber) Answer(*balancer.Peer, balancer.ProbeAnswer) error { return nil }

// TestProbesAllocateNothing: probes and round trips allocate nothing per
// probe or attempt: a run probing once an attempt allocates no more
// objects than the same run without probes, but for the few slices of
// probes and jobs in flight growing.
func TestProbesAllocateNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	sc := mustLookup(t, "zones16")
	sc.Duration = 10 * time.Second
	mallocs := func(probe bool) uint64 {
		pol := Policy{Name: "quiet", Probed: func(peers []*balancer.Peer, _ func() time.Time, src rand.Source, pr balancer.Prober) (balancer.Picker, error) {
			return &quietProber{peers: peers, rng: rand.New(src), prober: pr, probe: probe}, nil
		}}
		var a, b runtime.MemStats
		runtime.ReadMemStats(&a)
		r, err := Run(&sc, pol, 1)
		runtime.ReadMemStats(&b)
		require.NoError(t, err)
		require.Greater(t, r.Attempts, 3000)
		if probe {
			require.Equal(t, r.Attempts, r.Probes)
		}
		return b.Mallocs - a.Mallocs
	}
	on, off := mallocs(true), mallocs(false)
	assert.LessOrEqual(t, on, off+100, "with probes %d allocations, without %d", on, off)
}
